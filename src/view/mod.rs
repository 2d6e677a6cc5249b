//! Views: pure logic that maps a path in the mount to what backs it. No I/O and no FUSE here;
//! the `fs` layer fetches what a view asks for and hands it back.

pub mod node;
pub mod unsharded;

/// How the store is presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ViewKind {
    /// The store exactly as stored.
    Raw,
    /// Sharded Zarr v3 arrays appear as unsharded arrays whose inner chunks are files.
    Unsharded,
    /// Every chunk holds decoded raw elements (not available yet).
    Decoded,
    /// Zarr v3 presented as Zarr v2 (not available yet).
    V2,
}

impl ViewKind {
    pub fn name(self) -> &'static str {
        match self {
            ViewKind::Raw => "raw",
            ViewKind::Unsharded => "unsharded",
            ViewKind::Decoded => "decoded",
            ViewKind::V2 => "v2",
        }
    }
}
