//! Views: pure logic that maps a path in the mount to what backs it. No I/O and no FUSE here;
//! the `fs` layer fetches what a view asks for and hands it back.

pub mod chunk_lookup;
pub mod decoded;
pub mod flat;
pub mod node;
pub mod ome;
pub mod present;
pub mod regions;
pub mod retile;
pub mod unsharded;
pub mod unsharded_dirs;
pub mod v2;

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
