//! `--view decoded`, `v2` and `v2-decoded`: Zarr nodes of the unsharded view re-presented.
//! `mapping` (pure: what each directory shows, the presenters, re-tiling) and `namespace`
//! (the async side).

pub mod mapping;
pub mod namespace;
