//! zarr-mount: mount a Zarr store as a directory.
//!
//! Layers, each using only those below it (`tests/it/layering.rs` checks the imports):
//! `cli`/`mount` -> `fuse` (thin fuser adapter) -> `fs` (inodes, handles, caches; where I/O
//! meets the format) -> `view` (pure path mapping) -> `zarr` (the format, no I/O). `store`
//! (async key/value backends) is the other leaf: `zarr` and `store` know nothing of each other,
//! and `view` uses only `zarr`. `prefetch` (every read-ahead policy) sits under `fs` and
//! `fuse`, over `zarr` and `store`. The shared pieces (`clock`, `locks`, `metrics`, `stats`, the
//! caches, `python_json`, `perms`) serve every layer.

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
pub mod perms;
pub mod prefetch;
pub mod python_json;
pub mod serve;
pub mod serving;
pub mod source;
pub mod stats;
pub mod store;
pub mod ttl_cache;
pub mod views;
pub mod zarr;
