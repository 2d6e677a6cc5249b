//! The in-memory index of the files on disk, in LRU order, and eviction: space is reserved
//! before a file is written, the least recently used files deleted first.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lru::LruCache;

use super::super::known_objects::KnownObjects;
use super::DiskCacheStore;
use crate::store::{ByteRange, ObjectMeta};

/// The block index that stands for an object's copy in the LRU index.
pub(super) const COPY: u64 = u64::MAX;

/// A block file's mtime is refreshed on a hit at most this often (it orders eviction after a
/// restart; finer than this is not worth a syscall per read).
pub(super) const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// One block file: which object (hash of store, key, version, size) and which block of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct BlockId {
    pub(super) object: String,
    pub(super) index: u64,
}

pub(super) struct State {
    /// Block files on disk, least recently used first; value: file size and last touch.
    pub(super) blocks: LruCache<BlockId, (u64, Instant)>,
    /// Bytes of block files on disk, plus space reserved for writes under way.
    pub(super) used: u64,
    /// Metadata seen for each key and when (wall clock: it may come from an earlier daemon).
    pub(super) known: KnownObjects,
    /// Objects kept as copies (their LRU entry is `BlockId { object, index: COPY }`).
    pub(super) copies: HashMap<String, CopyFile>,
}

/// A copy file's checksum (part of its name), and whether this daemon has checked it.
#[derive(Debug, Clone, Copy)]
pub(super) struct CopyFile {
    pub(super) crc: u32,
    pub(super) checked: bool,
}

impl DiskCacheStore {
    /// Make room for `n` more bytes: the files to delete (least recently used first).
    pub(super) fn reserve(&self, n: u64) -> Vec<PathBuf> {
        let mut st = self.state();
        let mut victims = Vec::new();
        while st.used + n > self.cfg.max_bytes {
            match st.blocks.peek_lru().map(|(id, _)| id.clone()) {
                Some(id) => victims.extend(self.unindex(&mut st, &id)),
                None => break,
            }
        }
        st.used += n;
        victims
    }

    pub(super) fn remove_files(&self, victims: &[PathBuf]) {
        for path in victims {
            let _ = std::fs::remove_file(path);
        }
        self.stats.evicted(victims.len() as u64);
    }

    /// Take the block or copy `id` out of the index (and its space out of `used`): the path of
    /// its file, if it was indexed.
    pub(super) fn unindex(&self, st: &mut State, id: &BlockId) -> Option<PathBuf> {
        let (len, _) = st.blocks.pop(id)?;
        st.used -= len;
        if id.index != COPY {
            return Some(self.block_path(id));
        }
        let copy = st.copies.remove(&id.object)?;
        Some(self.copy_path(&id.object, copy.crc))
    }

    /// Forget a block or copy file, and delete it if `delete`.
    pub(super) fn drop_block(&self, id: &BlockId, delete: bool) {
        let path = self.unindex(&mut self.state(), id);
        if let Some(path) = path.filter(|_| delete) {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Forget the files of `key` at `old`, a version the store no longer has: each block the
    /// object's size allows, and its copy. Deleted off the async runtime.
    pub(super) fn drop_version(&self, key: &str, old: &ObjectMeta) {
        let object = self.object_id(key, old);
        let blocks = old.size.div_ceil(self.cfg.block_size);
        let paths: Vec<PathBuf> = {
            let mut st = self.state();
            std::iter::once(COPY)
                .chain(0..blocks)
                .filter_map(|index| {
                    self.unindex(&mut st, &BlockId { object: object.clone(), index })
                })
                .collect()
        };
        if paths.is_empty() {
            return;
        }
        let remove = move || {
            for p in paths {
                let _ = std::fs::remove_file(p);
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }

    /// Is anything of `range` of `key` at `meta` on disk (its copy, or a block of the range)?
    /// Then a revalidation is worth sending rather than a plain GET.
    pub(super) fn holds_any(&self, key: &str, meta: &ObjectMeta, range: &ByteRange) -> bool {
        let want = range.clip(meta.size);
        let object = self.object_id(key, meta);
        let st = self.state();
        if st.copies.contains_key(&object) {
            return true;
        }
        if want.is_empty() {
            return false;
        }
        let bs = self.cfg.block_size;
        (want.start / bs..=(want.end - 1) / bs)
            .any(|index| st.blocks.contains(&BlockId { object: object.clone(), index }))
    }
}
