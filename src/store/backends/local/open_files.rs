//! Files of a local store kept open after a read (a bounded number, each used for a few
//! seconds), so the chunks of one shard, read one request at a time, cost one open(2) between
//! them, not one each. A kept file is only ever used for the inode its key names at the time
//! of the read: every read resolves the key afresh, and takes the kept file only if the file
//! found is the same inode (device and inode number; the kept descriptor pins its inode, so
//! the number cannot be reused meanwhile) with the same mode, owner, group and change time. So
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

/// Which inode a key named, and who could open it, when its file was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    dev: u64,
    ino: u64,
    mode: u32,
    uid: u32,
    gid: u32,
    ctime: (i64, i64),
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
        }
    }
}

struct Kept {
    file: Arc<File>,
    id: Identity,
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
    pub fn get(&self, key: &str, now: Identity) -> Option<Arc<File>> {
        let mut kept = self.lock();
        let entry = kept.get(key)?;
        if entry.id == now && entry.opened.elapsed() < KEPT_FOR {
            return Some(entry.file.clone());
        }
        kept.pop(key);
        None
    }

    /// Keep `file`, just opened as the inode `id` for `key` (the least recently used entry
    /// goes when the cache is full, and any past `KEPT_FOR`).
    pub fn keep(&self, key: &str, id: Identity, file: Arc<File>) {
        let mut kept = self.lock();
        while kept.peek_lru().is_some_and(|(_, e)| e.opened.elapsed() >= KEPT_FOR) {
            kept.pop_lru();
        }
        kept.put(key.to_string(), Kept { file, id, opened: Instant::now() });
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

    fn opened(path: &std::path::Path) -> (Arc<File>, Identity) {
        let file = File::open(path).unwrap();
        let id = Identity::of(&file.metadata().unwrap());
        (Arc::new(file), id)
    }

    #[test]
    fn a_kept_file_is_used_only_for_the_same_unchanged_inode() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, b"old").unwrap();
        let files = OpenFiles::default();
        let (file, id) = opened(&path);
        files.keep("f", id, file);
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
        let (file, id) = opened(&path);
        files.keep("f", id, file);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        let now = Identity::of(&std::fs::metadata(&path).unwrap());
        assert_eq!((now.dev, now.ino), (id.dev, id.ino));
        assert!(files.get("f", now).is_none(), "a chmod makes the kept descriptor unusable");
        assert_eq!(files.len(), 0);
    }

    #[test]
    fn the_cache_is_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let files = OpenFiles::default();
        for i in 0..KEPT_FILES + 10 {
            let (file, id) = opened(&path);
            files.keep(&format!("k{i}"), id, file);
        }
        assert_eq!(files.len(), KEPT_FILES);
        files.forget(&format!("k{}", KEPT_FILES + 9));
        assert_eq!(files.len(), KEPT_FILES - 1);
    }
}
