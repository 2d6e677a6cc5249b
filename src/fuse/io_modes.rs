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
    /// `Some`: passthrough to this backing file.
    backing: Option<Arc<B>>,
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
    /// Through the daemon (and the page cache), as without passthrough.
    Cached,
}

impl<B> IoModes<B> {
    /// Whether an open of `ino` now would decide its mode (no file of it is open), and so
    /// whether a local copy is worth looking for.
    pub fn undecided(&self, ino: u64) -> bool {
        !lock(&self.inodes).contains_key(&ino)
    }

    /// Count an open of `ino` and say how to answer it. When no file of `ino` is open, `copy`
    /// decides: `Some(make)` makes the backing file (an error falls back to the page cache and
    /// is returned for the caller to log); later opens follow the first until all are released.
    pub fn open<E>(
        &self,
        ino: u64,
        copy: Option<impl FnOnce() -> Result<B, E>>,
    ) -> (OpenMode<B>, Option<E>) {
        let mut inodes = lock(&self.inodes);
        if let Some(io) = inodes.get_mut(&ino) {
            io.opens += 1;
            let mode = io.backing.clone().map_or(OpenMode::Cached, OpenMode::Passthrough);
            return (mode, None);
        }
        let (backing, err) = match copy.map(|make| make()) {
            Some(Ok(b)) => (Some(Arc::new(b)), None),
            Some(Err(e)) => (None, Some(e)),
            None => (None, None),
        };
        let mode = backing.clone().map_or(OpenMode::Cached, OpenMode::Passthrough);
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

#[cfg(test)]
mod tests {
    use super::*;

    type Modes = IoModes<&'static str>;

    fn open(m: &Modes, ino: u64, copy: Option<&'static str>) -> Option<&'static str> {
        let (mode, err) = m.open(ino, copy.map(|c| move || Ok::<_, ()>(c)));
        assert!(err.is_none());
        match mode {
            OpenMode::Passthrough(b) => Some(*b),
            OpenMode::Cached => None,
        }
    }

    #[test]
    fn the_first_open_decides_until_the_last_release() {
        let m = Modes::default();
        assert!(m.undecided(1));
        assert_eq!(open(&m, 1, Some("v1")), Some("v1"));
        assert!(!m.undecided(1));
        // A later open follows the first, with its backing, whatever it found itself.
        assert_eq!(open(&m, 1, None), Some("v1"));
        assert_eq!(open(&m, 1, Some("v2")), Some("v1"));
        m.release(1);
        m.release(1);
        assert_eq!(open(&m, 1, Some("v2")), Some("v1"), "one file still open");
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
        let (mode, err) = m.open(7, Some(|| Err::<(), _>("EPERM")));
        assert!(matches!(mode, OpenMode::Cached));
        assert_eq!(err, Some("EPERM"));
        // The inode is decided (page cache) until released.
        let (mode, err) = m.open(7, Some(|| Ok::<(), &str>(())));
        assert!(matches!(mode, OpenMode::Cached) && err.is_none());
        m.release(7);
        m.release(7);
        m.release(7); // a stray release does not underflow
        assert_eq!(m.open_inodes(), 0);
    }
}
