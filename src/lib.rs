//! zarr-mount: mount a Zarr store as a directory.
//!
//! Layers, each calling only the one below:
//! `cli` -> `fuse` (thin fuser adapter) -> `fs` (inodes, handles, caches) ->
//! `view` (pure path mapping) -> `zarr` (metadata, shard index) -> `store` (async key/value backends).

pub mod cli;
pub mod clock;
pub mod daemon;
pub mod flight_lru;
pub mod fs;
pub mod fstab;
pub mod fuse;
pub mod generated_docs;
pub mod locks;
pub mod metrics;
pub mod mount;
pub mod python_json;
pub mod source;
pub mod stats;
pub mod store;
pub mod ttl_cache;
pub mod view;
pub mod zarr;
