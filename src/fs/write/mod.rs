//! The write path: a file open for writing is buffered (in memory, or spilled to an anonymous
//! file) and stored as one object at close.

pub mod spill;
pub(crate) mod write_buf;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use spill::Spill;
use write_buf::SharedBuf;

/// The write buffers of a mount, and where they spill.
pub(crate) struct Writes {
    /// path -> the write buffer of a file open for writing (or a staged temp file).
    bufs: Mutex<HashMap<String, SharedBuf>>,
    /// Where write buffers go once too large for memory, and the memory they may hold.
    spill: Arc<Spill>,
}

impl Writes {
    pub fn new(spill: Arc<Spill>) -> Self {
        Writes { bufs: Mutex::new(HashMap::new()), spill }
    }

    pub fn bufs(&self) -> MutexGuard<'_, HashMap<String, SharedBuf>> {
        crate::locks::lock(&self.bufs)
    }

    pub fn spill(&self) -> &Arc<Spill> {
        &self.spill
    }

    /// Forget `buf` as the write buffer of `path` (if it still is).
    pub fn drop_buf(&self, path: &str, buf: &SharedBuf) {
        let mut bufs = self.bufs();
        if bufs.get(path).is_some_and(|x| Arc::ptr_eq(x, buf)) {
            bufs.remove(path);
        }
    }
}
