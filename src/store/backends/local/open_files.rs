//! Files of a local store kept open after a read (a bounded number, each used for a few
//! seconds), so the chunks of one shard, read one request at a time, cost one open(2) between
//! them, not one each. A kept file is only ever used for the inode its key names at the time
//! of the read: every read resolves the key afresh, and takes the kept file only if the file
//! found is the same inode (device and inode number; the kept descriptor pins its inode, so
//! the number cannot be reused meanwhile) with the same mode, owner, group, change time, size
//! and modification time (so the status kept with the file is the one a new stat gives). So
//! a kept descriptor is never used past a change to who may open the file (a chmod or chown
//! changes the first three; the change time also moves with ACLs, links and writes, to the
//! kernel's clock tick): the file is opened again, and the kernel checks that open as it
//! checked the first. A file renamed over the key is another inode: never read through the old
//! file's descriptor.

use std::fs::File;
use std::num::NonZeroUsize;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lru::LruCache;

/// Files kept open at most: a few shards' worth of readers at once, few descriptors.
const KEPT_FILES: usize = 64;
/// How long after its open a kept file may be used. An expired file is closed by the next read
/// of its key, or by a later `keep` once it is the least recently used; until then a file
/// deleted behind the store's back keeps its disk space through our descriptor (at most
/// `KEPT_FILES` files).
const KEPT_FOR: Duration = Duration::from_secs(5);

/// Which inode a key named, who could open it, and its size and times, when its file was
/// opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    dev: u64,
    ino: u64,
    mode: u32,
    uid: u32,
    gid: u32,
    ctime: (i64, i64),
    size: u64,
    mtime: (i64, i64),
}

impl Identity {
    pub fn of(md: &std::fs::Metadata) -> Self {
        Identity {
            dev: md.dev(),
            ino: md.ino(),
            mode: md.mode(),
            uid: md.uid(),
            gid: md.gid(),
            ctime: (md.ctime(), md.ctime_nsec()),
            size: md.len(),
            mtime: (md.mtime(), md.mtime_nsec()),
        }
    }

    /// The same, from a `statx` (as the standard library's `Metadata` reads it).
    pub fn of_statx(st: &libc::statx) -> Self {
        let time = |t: libc::statx_timestamp| (t.tv_sec, i64::from(t.tv_nsec));
        Identity {
            dev: libc::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            mode: u32::from(st.stx_mode),
            uid: st.stx_uid,
            gid: st.stx_gid,
            ctime: time(st.stx_ctime),
            size: st.stx_size,
            mtime: time(st.stx_mtime),
        }
    }
}

struct Kept {
    file: Arc<File>,
    id: Identity,
    /// The file's status when it was opened: what a stat of the same identity gives.
    md: std::fs::Metadata,
    opened: Instant,
}

pub struct OpenFiles {
    kept: Mutex<LruCache<String, Kept>>,
}

impl Default for OpenFiles {
    fn default() -> Self {
        let cap = NonZeroUsize::new(KEPT_FILES).expect("KEPT_FILES is not zero");
        OpenFiles { kept: Mutex::new(LruCache::new(cap)) }
    }
}

impl OpenFiles {
    /// The file kept for `key` if it is the inode `now` identifies, unchanged since it was
    /// opened, and not older than `KEPT_FOR`. Anything else kept for `key` is closed.
    /// With it, the file's status as it was kept (equal to `now` in all `Identity` holds).
    pub fn get(&self, key: &str, now: Identity) -> Option<(Arc<File>, std::fs::Metadata)> {
        let mut kept = self.lock();
        let entry = kept.get(key)?;
        if entry.id == now && entry.opened.elapsed() < KEPT_FOR {
            return Some((entry.file.clone(), entry.md.clone()));
        }
        kept.pop(key);
        None
    }

    /// Is a file kept for `key`, not past `KEPT_FOR` (whether its key still names it is
    /// for `get` to tell)?
    pub fn holds(&self, key: &str) -> bool {
        self.lock().peek(key).is_some_and(|e| e.opened.elapsed() < KEPT_FOR)
    }

    /// Keep `file`, just opened as `md` says for `key` (the least recently used entry goes
    /// when the cache is full, and any past `KEPT_FOR`).
    pub fn keep(&self, key: &str, md: &std::fs::Metadata, file: Arc<File>) {
        let (id, md) = (Identity::of(md), md.clone());
        let mut kept = self.lock();
        while kept.peek_lru().is_some_and(|(_, e)| e.opened.elapsed() >= KEPT_FOR) {
            kept.pop_lru();
        }
        kept.put(key.to_string(), Kept { file, id, md, opened: Instant::now() });
    }

    /// Close what is kept for `key` (the store removed or replaced it).
    pub fn forget(&self, key: &str) {
        self.lock().pop(key);
    }

    fn lock(&self) -> MutexGuard<'_, LruCache<String, Kept>> {
        // The cache holds no invariant a panicking holder could break half-way.
        self.kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(path: &std::path::Path) -> (Arc<File>, std::fs::Metadata) {
        let file = File::open(path).unwrap();
        let md = file.metadata().unwrap();
        (Arc::new(file), md)
    }

    #[test]
    fn a_kept_file_is_used_only_for_the_same_unchanged_inode() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, b"old").unwrap();
        let files = OpenFiles::default();
        let (file, md) = opened(&path);
        let id = Identity::of(&md);
        files.keep("f", &md, file);
        assert!(files.get("f", id).is_some());
        assert!(files.get("g", id).is_none());

        // Replaced by rename: another inode, and the old descriptor is closed.
        let new = tmp.path().join("f.new");
        std::fs::write(&new, b"new").unwrap();
        std::fs::rename(&new, &path).unwrap();
        let now = Identity::of(&std::fs::metadata(&path).unwrap());
        assert_ne!(now, id);
        assert!(files.get("f", now).is_none());
        assert_eq!(files.len(), 0);
    }

    #[test]
    fn a_mode_change_is_a_change() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, b"data").unwrap();
        let files = OpenFiles::default();
        let (file, md) = opened(&path);
        let id = Identity::of(&md);
        files.keep("f", &md, file);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        let now = Identity::of(&std::fs::metadata(&path).unwrap());
        assert_eq!((now.dev, now.ino), (id.dev, id.ino));
        assert!(files.get("f", now).is_none(), "a chmod makes the kept descriptor unusable");
        assert_eq!(files.len(), 0);
    }

    /// A `statx` and the standard library's stat name a file alike, so either finds it kept.
    #[test]
    fn a_statx_identifies_the_file_as_its_metadata_does() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, b"data").unwrap();
        let md = std::fs::metadata(&path).unwrap();
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: statx of a NUL-terminated path into a zeroed struct.
        let mut st: libc::statx = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::statx(
                libc::AT_FDCWD,
                c.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
                libc::STATX_BASIC_STATS,
                &mut st,
            )
        };
        assert_eq!(rc, 0);
        assert_eq!(Identity::of_statx(&st), Identity::of(&md));
        std::fs::write(&path, b"more data").unwrap();
        assert_ne!(Identity::of(&std::fs::metadata(&path).unwrap()), Identity::of(&md));
    }

    #[test]
    fn the_cache_is_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let files = OpenFiles::default();
        for i in 0..KEPT_FILES + 10 {
            let (file, md) = opened(&path);
            files.keep(&format!("k{i}"), &md, file);
        }
        assert_eq!(files.len(), KEPT_FILES);
        files.forget(&format!("k{}", KEPT_FILES + 9));
        assert_eq!(files.len(), KEPT_FILES - 1);
    }
}
