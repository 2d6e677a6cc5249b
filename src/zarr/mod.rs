//! Pure Zarr format logic: metadata parsing, chunk keys, and the sharding codec's
//! layout, index and shard assembly. No I/O: every input is untrusted bytes or JSON
//! handed in by the caller, and every failure is a typed error, never a panic.

pub mod chunk_key;
pub mod codecs;
pub mod consolidated;
pub mod data_type;
pub mod error;
pub mod json;
pub mod metadata;
pub mod sharding;
pub mod v2;
