//! The views of a store, a folder each: `mapping` (pure: what each path of the mount is, no
//! I/O) and `namespace` (the async side: fetches what the mapping asks for and serves it
//! through the one `Namespace` trait), plus what else the view needs (the unsharded view's
//! shard writer and read-ahead). `shared` holds the trait and the machinery every view uses.

pub mod flat;
pub mod presented;
pub mod raw;
pub mod shared;
pub mod unsharded;

use std::sync::Arc;
use std::time::Duration;

pub use presented::mapping::ome::OmeInV2;

use crate::store::Store;
use flat::namespace::FlatNamespace;
use presented::mapping::decoded::DecodedPresenter;
use presented::mapping::v2::{V2DecodedPresenter, V2Presenter};
use presented::mapping::Presenter;
use presented::namespace::PresentedNamespace;
use raw::namespace::RawNamespace;
use shared::namespace::Namespace;
use unsharded::namespace::UnshardedNamespace;
use unsharded::read_ahead::ShardReadAhead;

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

/// What every view is built with, from the mount's configuration.
#[derive(Debug, Clone, Copy, Default)]
pub struct ViewOptions {
    /// How long metadata read through the view is trusted (`--metadata-ttl`).
    pub metadata_ttl: Duration,
    /// Small arrays fetched whole at their first chunk lookup (`--array-prefetch`).
    pub array_prefetch: u64,
    /// The lookup of a `*.zarr` directory fetches its metadata documents beside it.
    pub document_fetch: bool,
    /// The memory cache's size (`--cache-size`): shards read ahead wait there for the reader.
    pub cache_size: u64,
    /// What the v2 views do with OME-Zarr metadata (`--v2-ome`).
    pub v2_ome: OmeInV2,
}

/// Memory for decoded chunks when `--cache-size 0` turned the object cache off: without any,
/// every read of a chunk file would decode the whole chunk again.
const MIN_DECODED_CACHE: u64 = 64 << 20;

/// The namespace of view `kind` over `store`: one raw namespace at the bottom, the unsharded
/// view over it, and the presented or flat view over that.
pub fn build(kind: ViewKind, store: Arc<dyn Store>, opts: &ViewOptions) -> Arc<dyn Namespace> {
    let ttl = opts.metadata_ttl;
    let raw = RawNamespace::new(store)
        .with_chunk_trees(ttl)
        .with_array_prefetch(opts.array_prefetch)
        .with_document_fetch(opts.document_fetch);
    let shards_ahead = ShardReadAhead::budget_for_cache(opts.cache_size);
    let unsharded =
        |raw| Arc::new(UnshardedNamespace::new(raw, ttl).with_shard_read_ahead(shards_ahead));
    let decoded_cache = opts.cache_size.max(MIN_DECODED_CACHE) as usize;
    let presented = |raw, presenter: Box<dyn Presenter>| -> Arc<dyn Namespace> {
        Arc::new(PresentedNamespace::new(unsharded(raw), presenter, ttl, decoded_cache))
    };
    let ome = opts.v2_ome;
    match kind {
        ViewKind::Raw => Arc::new(raw),
        ViewKind::Unsharded => unsharded(raw),
        ViewKind::Decoded => presented(raw, Box::new(DecodedPresenter)),
        ViewKind::V2 => presented(raw, Box::new(V2Presenter { ome })),
        ViewKind::V2Decoded => presented(raw, Box::new(V2DecodedPresenter { ome })),
        ViewKind::Flat => Arc::new(FlatNamespace::new(unsharded(raw), ttl, decoded_cache)),
    }
}
