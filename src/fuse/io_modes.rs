//! Which open files the kernel reads directly from a local copy (FUSE passthrough) and which it
//! reads through the daemon, per inode.
//!
//! The kernel's rule (fs/fuse/iomode.c): while an inode has a file open in passthrough mode,
//! every other open of it must be passthrough too, with the same backing file; while it has a
//! file open through its page cache, none may be passthrough. A reply that breaks the rule fails
//! the user's open() with EIO. So the first open of an inode with no open files decides, and the
//! others follow it until the last one is released. Counts are raised before the reply goes out
//! and lowered at RELEASE, which the kernel sends after it has dropped its own count: this
//! table is never behind the kernel.
//!
//! Generic over the backing handle so that the rule is tested without a FUSE connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::locks::lock;

/// How the open files of one inode are served, and how many there are.
struct InodeIo<B> {
    /// `Some`: passthrough to this backing file, a copy of this content version.
    backing: Option<(Arc<B>, String)>,
    opens: usize,
}

pub struct IoModes<B> {
    inodes: Mutex<HashMap<u64, InodeIo<B>>>,
}

impl<B> Default for IoModes<B> {
    fn default() -> Self {
        IoModes { inodes: Mutex::new(HashMap::new()) }
    }
}

/// How one open is to be answered.
pub enum OpenMode<B> {
    /// Passthrough to this backing file.
    Passthrough(Arc<B>),
    /// The inode is open in passthrough mode on a copy of an older version: this backing file
    /// as the kernel requires, with direct I/O, so that reads come to the daemon, which serves
    /// the version this open resolved.
    Direct(Arc<B>),
    /// Through the daemon (and the page cache), as without passthrough.
    Cached,
}

impl<B> IoModes<B> {
    /// Whether an open of `ino` now would decide its mode (no file of it is open), and so
    /// whether a local copy is worth looking for.
    pub fn undecided(&self, ino: u64) -> bool {
        !lock(&self.inodes).contains_key(&ino)
    }

    /// Count an open of `ino`, which resolved content `version`, and say how to answer it.
    /// When no file of `ino` is open, `copy` decides: `Some(make)` makes the backing file (an
    /// error falls back to the page cache and is returned for the caller to log); later opens
    /// follow the first until all are released (`Direct` when their version is not the copy's).
    pub fn open<E>(
        &self,
        ino: u64,
        version: &str,
        copy: Option<impl FnOnce() -> Result<B, E>>,
    ) -> (OpenMode<B>, Option<E>) {
        let mut inodes = lock(&self.inodes);
        if let Some(io) = inodes.get_mut(&ino) {
            io.opens += 1;
            let mode = match &io.backing {
                Some((b, v)) if v == version => OpenMode::Passthrough(b.clone()),
                Some((b, _)) => OpenMode::Direct(b.clone()),
                None => OpenMode::Cached,
            };
            return (mode, None);
        }
        let (backing, err) = match copy.map(|make| make()) {
            Some(Ok(b)) => (Some(Arc::new(b)), None),
            Some(Err(e)) => (None, Some(e)),
            None => (None, None),
        };
        let mode = backing.clone().map_or(OpenMode::Cached, OpenMode::Passthrough);
        let backing = backing.map(|b| (b, version.to_string()));
        inodes.insert(ino, InodeIo { backing, opens: 1 });
        (mode, err)
    }

    /// An open file of `ino` was released (or its open failed before the reply).
    pub fn release(&self, ino: u64) {
        let mut inodes = lock(&self.inodes);
        if let Some(io) = inodes.get_mut(&ino) {
            io.opens -= 1;
            if io.opens == 0 {
                inodes.remove(&ino); // the backing file is closed when the last Arc goes
            }
        }
    }

    /// Inodes with open files (tests).
    pub fn open_inodes(&self) -> usize {
        lock(&self.inodes).len()
    }
}

/// Whether this process may hand the kernel backing files (`FUSE_DEV_IOC_BACKING_OPEN` needs
/// CAP_SYS_ADMIN). Without it a mount keeps serving reads without OPEN, which saves a round trip
/// per open that passthrough could not repay.
pub fn may_pass_through() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| cap_sys_admin_in(&s))
}

/// CAP_SYS_ADMIN (bit 21) in the effective set of a `/proc/PID/status` text.
fn cap_sys_admin_in(status: &str) -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps >> CAP_SYS_ADMIN & 1 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Modes = IoModes<&'static str>;

    /// The backing an open is answered with (`copy`: the copy it found, also its version).
    fn open(m: &Modes, ino: u64, copy: Option<&'static str>) -> Option<&'static str> {
        open_at(m, ino, copy.unwrap_or("v1"), copy)
    }

    fn open_at(
        m: &Modes,
        ino: u64,
        version: &str,
        copy: Option<&'static str>,
    ) -> Option<&'static str> {
        let (mode, err) = m.open(ino, version, copy.map(|c| move || Ok::<_, ()>(c)));
        assert!(err.is_none());
        match mode {
            OpenMode::Passthrough(b) => Some(*b),
            OpenMode::Direct(b) => panic!("direct on {b}"),
            OpenMode::Cached => None,
        }
    }

    #[test]
    fn the_first_open_decides_until_the_last_release() {
        let m = Modes::default();
        assert!(m.undecided(1));
        assert_eq!(open(&m, 1, Some("v1")), Some("v1"));
        assert!(!m.undecided(1));
        // A later open of the same version follows the first, with its backing.
        assert_eq!(open_at(&m, 1, "v1", None), Some("v1"));
        // One of a newer version keeps the backing (the kernel's rule) but reads through us.
        match m.open(1, "v2", Some(|| Ok::<_, ()>("v2"))) {
            (OpenMode::Direct(b), None) => assert_eq!(*b, "v1"),
            _ => panic!("a newer version must be read through the daemon"),
        }
        m.release(1);
        m.release(1);
        assert_eq!(open_at(&m, 1, "v1", None), Some("v1"), "one file still open");
        m.release(1);
        m.release(1);
        assert!(m.undecided(1));
        assert_eq!(m.open_inodes(), 0);
        // Opened through the page cache first: no passthrough until all of those are closed.
        assert_eq!(open(&m, 1, None), None);
        assert_eq!(open(&m, 1, Some("v2")), None);
        m.release(1);
        m.release(1);
        assert_eq!(open(&m, 1, Some("v2")), Some("v2"));
        // Inodes are independent.
        assert_eq!(open(&m, 2, None), None);
        assert_eq!(open(&m, 3, Some("w")), Some("w"));
    }

    #[test]
    fn a_backing_that_cannot_be_made_falls_back_and_says_why() {
        let m = IoModes::<()>::default();
        let (mode, err) = m.open(7, "v", Some(|| Err::<(), _>("EPERM")));
        assert!(matches!(mode, OpenMode::Cached));
        assert_eq!(err, Some("EPERM"));
        // The inode is decided (page cache) until released.
        let (mode, err) = m.open(7, "v", Some(|| Ok::<(), &str>(())));
        assert!(matches!(mode, OpenMode::Cached) && err.is_none());
        m.release(7);
        m.release(7);
        m.release(7); // a stray release does not underflow
        assert_eq!(m.open_inodes(), 0);
    }

    #[test]
    fn cap_sys_admin_is_read_from_the_effective_set() {
        assert!(cap_sys_admin_in("Name:\tx\nCapPrm:\t0\nCapEff:\t000001ffffffffff\n"));
        assert!(cap_sys_admin_in("CapEff:\t0000000000200000\n"));
        assert!(!cap_sys_admin_in("CapPrm:\t000001ffffffffff\nCapEff:\t0000000000000000\n"));
        assert!(!cap_sys_admin_in("CapEff:\t00000000001fffff\n"));
        assert!(!cap_sys_admin_in("no such line"));
    }
}
