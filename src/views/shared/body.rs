//! What a write-back hands a view to store: the content of a write buffer, in memory or in
//! its spill file (`fs::write::spill`).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

/// What a write-back stores: bytes in memory, or the first `len` bytes of a spill file.
#[derive(Debug, Clone)]
pub enum Body {
    Bytes(Bytes),
    File(Arc<File>, u64),
}

impl Body {
    pub fn len(&self) -> u64 {
        match self {
            Body::Bytes(b) => b.len() as u64,
            Body::File(_, len) => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole body in memory (for the paths that need it: small objects, conditional puts).
    pub fn into_bytes(self) -> std::io::Result<Bytes> {
        match self {
            Body::Bytes(b) => Ok(b),
            Body::File(f, len) => {
                let mut v = vec![0; usize::try_from(len).map_err(std::io::Error::other)?];
                f.read_exact_at(&mut v, 0)?;
                Ok(Bytes::from(v))
            }
        }
    }
}
