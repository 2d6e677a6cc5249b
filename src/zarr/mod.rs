//! Pure Zarr format logic: metadata parsing, chunk keys, data types and fill values
//! (`data_type/`), the sharding format's layout, index and shard assembly (`sharding/`),
//! codec chains (`codecs/`) and the v2 translation. No I/O: every input is untrusted
//! bytes or JSON handed in by the caller, and every failure is a typed error, never a
//! panic. Modules import each other without cycles, each only from those before it:
//! `error`, `json`, `data_type`, `chunk_key`, `chunk_grid`, `chunk_tree`, `metadata`,
//! `consolidated`, `sharding`, `codecs`, `chunk_specs`, `v2`.

pub mod chunk_grid;
pub mod chunk_key;
pub mod chunk_specs;
pub mod chunk_tree;
pub mod codecs;
pub mod consolidated;
pub mod data_type;
pub mod error;
pub mod json;
pub mod metadata;
pub mod sharding;
pub mod v2;

/// The names of Zarr's metadata documents, v3 and v2 (`.zmetadata`: v2 consolidated), read
/// whole by readers that open a node (zarr-python 3 asks for `zarr.json`, `.zarray` and
/// `.zattrs` at once). Documents, never directories: the store's `ListStore::lookup_reading`
/// says what that means for a lookup.
pub const METADATA_NAMES: [&str; 5] = ["zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"];
