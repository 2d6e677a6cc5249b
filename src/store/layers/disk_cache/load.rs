//! Block files and copies read back from disk, each checked; a file that fails its check is
//! deleted and its bytes fetched again.

use std::fs::File;
use std::ops::Range;
use std::time::{Instant, SystemTime};

use bytes::Bytes;

use super::format::{crc_of, encode_header, read_block_into};
use super::index::{BlockId, COPY, TOUCH_EVERY};
use super::DiskCacheStore;
use crate::store::ObjectMeta;

impl DiskCacheStore {
    /// Read and check one block file; a bad file is deleted (and forgotten).
    pub(super) fn load_block(&self, key: &str, meta: &ObjectMeta, id: &BlockId) -> Option<Bytes> {
        let mut data = vec![0u8; self.block_len(id.index, meta.size) as usize];
        self.load_block_into(key, meta, id, &mut data).then(|| Bytes::from(data))
    }

    /// Blocks `blocks` of an object, all on disk (as far as the index knows), read into one
    /// buffer (bytes `blocks.start * block_size ..` of the object): a warm read of a whole
    /// shard is then one allocation and no copy in the daemon (a buffer per block and their
    /// assembly were two thirds of a warm zarr-python read's time in the daemon, mostly
    /// faulting in fresh pages). `None` when one fails its check (it is dropped).
    pub(super) fn load_span(
        &self,
        key: &str,
        meta: &ObjectMeta,
        object: &str,
        blocks: Range<u64>,
    ) -> Option<Vec<u8>> {
        let bs = self.cfg.block_size;
        let end = (blocks.end * bs).min(meta.size);
        let mut out = vec![0u8; (end - blocks.start * bs) as usize];
        for (index, part) in blocks.clone().zip(out.chunks_mut(bs as usize)) {
            let id = BlockId { object: object.to_string(), index };
            if !self.load_block_into(key, meta, &id, part) {
                return None;
            }
        }
        Some(out)
    }

    /// Read one block file's data into `out` (the block's length), checked; a bad file is
    /// deleted (and forgotten).
    pub(super) fn load_block_into(
        &self,
        key: &str,
        meta: &ObjectMeta,
        id: &BlockId,
        out: &mut [u8],
    ) -> bool {
        let path = self.block_path(id);
        let touch = {
            let mut st = self.state();
            match st.blocks.get_mut(id) {
                Some((_, at)) if at.elapsed() >= TOUCH_EVERY => {
                    *at = Instant::now();
                    true
                }
                Some(_) => false,
                None => return false,
            }
        };
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(_) => {
                self.drop_block(id, false);
                return false;
            }
        };
        let before = encode_header(key, &meta.version, meta.size, id.index, out.len());
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if !read_block_into(&file, len, &before, out) {
            tracing::warn!(path = %path.display(), "disk cache block failed its check; fetching it again");
            self.stats.corrupt();
            self.drop_block(id, true);
            return false;
        }
        if touch {
            let _ = file.set_modified(SystemTime::now());
        }
        true
    }

    /// `object`'s copy file, opened, if one is kept; checked whole (its length and CRC-32C) the
    /// first time this daemon opens it. A bad copy is deleted (and forgotten). The use
    /// refreshes its place in the LRU order.
    pub(super) fn open_copy(&self, object: &str, size: u64) -> Option<File> {
        let id = BlockId { object: object.to_string(), index: COPY };
        let (copy, touch) = {
            let mut st = self.state();
            let copy = *st.copies.get(object)?;
            match st.blocks.get_mut(&id) {
                Some((_, at)) if at.elapsed() >= TOUCH_EVERY => {
                    *at = Instant::now();
                    (copy, true)
                }
                Some(_) => (copy, false),
                None => return None,
            }
        };
        let path = self.copy_path(object, copy.crc);
        let Ok(file) = File::open(&path) else {
            self.drop_block(&id, false);
            return None;
        };
        let len = file.metadata().map(|m| m.len()).ok();
        let good = len == Some(size) && (copy.checked || crc_of(&file) == Some(copy.crc));
        if !good {
            tracing::warn!(path = %path.display(), "disk cache copy failed its check; fetching it again");
            self.stats.corrupt();
            self.drop_block(&id, true);
            return None;
        }
        if !copy.checked {
            if let Some(c) = self.state().copies.get_mut(object) {
                c.checked = true;
            }
        }
        if touch {
            let _ = file.set_modified(SystemTime::now());
        }
        Some(file)
    }

    /// Bytes `want` of an object of `size` bytes kept as the copy `object`; `None` when there is
    /// none, or it failed its check.
    pub(super) fn load_from_copy(
        &self,
        object: &str,
        size: u64,
        want: Range<u64>,
    ) -> Option<Bytes> {
        use std::os::unix::fs::FileExt;
        let file = self.open_copy(object, size)?;
        let mut out = vec![0u8; (want.end - want.start) as usize];
        file.read_exact_at(&mut out, want.start).ok()?;
        Some(Bytes::from(out))
    }

    /// The copy of `key` (see the module comment), opened for the kernel to read directly, when
    /// one is kept for `version` and that version is known fresh; checked whole at its first use
    /// by this daemon. Blocks on file I/O: call it off the async runtime.
    pub fn local_copy(&self, key: &str, version: &str) -> Option<File> {
        let meta = self.fresh_meta(key).filter(|m| m.version == version)?;
        let file = self.open_copy(&self.object_id(key, &meta), meta.size)?;
        self.stats.hit(1, meta.size);
        Some(file)
    }

    /// Whether a copy of `key`'s version known fresh is kept (see `StoreHints::keeps_local_copy`).
    pub fn keeps_local_copy(&self, key: &str) -> bool {
        let Some(meta) = self.fresh_meta(key) else { return false };
        let object = self.object_id(key, &meta);
        self.state().copies.contains_key(&object)
    }
}
