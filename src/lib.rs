//! zarr-mount: mount a Zarr store as a directory.
//!
//! Layers, each using only those below it (`tests/it/layering.rs` checks the imports):
//! `cli`/`mount` -> `fuse` and `serve` (the two front doors) -> `fs` (inodes, handles, caches)
//! -> `views` (each view: its pure mapping and the namespace that serves it, all reached
//! through one `Namespace` trait) -> `prefetch` (every read-ahead policy) -> `zarr` (the
//! format, no I/O) and `store` (async key/value backends), two leaves that know nothing of each
//! other. A view's mapping (`mapping.rs` or `mapping/`) uses only `zarr` and other mappings.
//! The shared pieces (`clock`, `locks`, `metrics`, `stats`, the caches, `python_json`, `perms`)
//! serve every layer.

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
