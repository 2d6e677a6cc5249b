//! The views of a store, a folder each: `mapping` (pure: what each path of the mount is, no
//! I/O) and `namespace` (the async side: fetches what the mapping asks for and serves it
//! through the one `Namespace` trait), plus what else the view needs (the unsharded view's
//! shard writer and read-ahead). `shared` holds the trait and the machinery every view uses.

pub mod flat;
pub mod presented;
pub mod raw;
pub mod shared;
pub mod unsharded;

/// How the store is presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ViewKind {
    /// The store exactly as stored.
    Raw,
    /// Sharded Zarr v3 arrays appear as unsharded arrays whose inner chunks are files.
    Unsharded,
    /// As unsharded, and every chunk file holds its decoded elements (C order, little-endian).
    Decoded,
    /// As unsharded, with Zarr v3 groups and arrays presented as Zarr v2.
    V2,
    /// As v2, with every chunk decoded (no compressor or filters, little-endian, order C).
    V2Decoded,
    /// Every array as single files (`NAME.npy`, ...) in its parent directory; groups stay
    /// directories.
    Flat,
}

impl ViewKind {
    /// Views whose files cannot be mapped back to stored bytes exactly.
    pub fn is_read_only(self) -> bool {
        matches!(self, ViewKind::Decoded | ViewKind::V2 | ViewKind::V2Decoded | ViewKind::Flat)
    }

    pub fn name(self) -> &'static str {
        match self {
            ViewKind::Raw => "raw",
            ViewKind::Unsharded => "unsharded",
            ViewKind::Decoded => "decoded",
            ViewKind::V2 => "v2",
            ViewKind::V2Decoded => "v2-decoded",
            ViewKind::Flat => "flat",
        }
    }
}
