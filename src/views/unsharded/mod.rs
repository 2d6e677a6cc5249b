//! `--view unsharded`: sharded Zarr v3 arrays shown as unsharded arrays whose inner chunks are
//! files. `mapping` (keys, metadata, directories: pure), `namespace` (the async side),
//! `shard_indexes` (fetched and cached), `writer` (chunk writes spliced into shards) and
//! `read_ahead` (shards fetched ahead of a scan).

pub mod mapping;
pub mod namespace;
pub mod read_ahead;
pub mod shard_indexes;
pub mod writer;
