//! What the command line sets of the disk cache (`--cache-dir`, `--cache-max-size`,
//! `--immutable`) and how long it trusts what the store said.

use std::sync::Arc;
use std::time::Duration;

use super::super::disk_meta::MetaJournal;
use super::lock::DirLock;

/// Bytes per block.
pub const BLOCK_SIZE: u64 = 1 << 20;

/// Objects fetched whole up to this size are kept as copies (see the module comment): shards and
/// documents. Larger ones are read in parts anyway, and a copy is checked whole at first use.
pub const COPY_MAX: u64 = 16 << 20;

/// Default `--cache-max-size`.
pub const DEFAULT_MAX_BYTES: u64 = 10 << 30;

/// See [`MetaJournal::root_answered_within`].
pub fn vouches_for(opts: &DiskCacheOptions, identity: &str, ttl: Duration) -> bool {
    MetaJournal::root_answered_within(opts.lock.dir(), identity, ttl)
}

/// `--cache-dir`, `--cache-max-size` and `--immutable`, checked (the directory is locked
/// already).
#[derive(Debug, Clone)]
pub struct DiskCacheOptions {
    pub lock: Arc<DirLock>,
    pub max_bytes: u64,
    /// The data does not change: what the cache learned is trusted for ever.
    pub immutable: bool,
}

/// How long an answer of the store is trusted under `--immutable`: for ever, in effect (a
/// century keeps every clock sum far from overflowing).
pub const IMMUTABLE_TRUST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl DiskCacheOptions {
    /// How long the cache trusts what the store said, given `--metadata-ttl`.
    pub fn trust(&self, metadata_ttl: Duration) -> Duration {
        if self.immutable {
            IMMUTABLE_TRUST
        } else {
            metadata_ttl
        }
    }
}

#[derive(Debug, Clone)]
pub struct DiskCacheConfig {
    pub max_bytes: u64,
    pub block_size: u64,
    /// Objects fetched whole up to this size are kept as one copy file, not blocks (0: never).
    pub copy_max: u64,
    /// How long metadata seen by this layer is trusted before a read confirms it with a HEAD.
    pub ttl: Duration,
}
