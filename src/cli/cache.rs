//! The "Cache" section: the memory cache of small objects, whole-array prefetch, the disk
//! cache, and how long metadata is trusted.

use std::path::PathBuf;
use std::time::Duration;

use crate::source::{Location, Source};
use crate::store::layers::disk_cache::{DirLock, DiskCacheOptions, BLOCK_SIZE, DEFAULT_MAX_BYTES};

use super::{usage, values, UsageError};

/// `--array-prefetch` unless given: arrays up to 32 MiB, such as a 2048 x 2048 float32
/// image, or the coordinate variables and masks that readers load whole.
const DEFAULT_ARRAY_PREFETCH: u64 = 32 << 20;

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Cache")]
pub struct CacheFlags {
    /// Seconds that file and directory metadata (and absences) are cached; 0 = always ask the store.
    /// Default: 1 for local directories, 60 for object stores and zips.
    #[arg(long, value_name = "SECONDS", value_parser = values::seconds)]
    pub metadata_ttl: Option<Duration>,
    /// Resolved paths (and absences) the metadata cache holds at most, ~300 bytes each
    /// (default 200000). A walk of more keys than this gets no hits from it anyway.
    #[arg(long, value_name = "N", value_parser = values::at_least_one)]
    pub metadata_cache_entries: Option<usize>,
    /// Memory for whole small objects read from an object store, e.g. 512M or 2G; 0 disables.
    /// Default: 1/8 of RAM, at most 2G.
    #[arg(long, value_name = "SIZE", value_parser = values::size)]
    pub cache_size: Option<u64>,
    /// On an object store, a small array (its chunk objects at most this much by its
    /// metadata, at most 256 of them) is fetched whole into memory at its first chunk read,
    /// e.g. 64M; 0 disables. Default: 32M (at most a quarter of --cache-size).
    #[arg(long, value_name = "SIZE", value_parser = values::size)]
    pub array_prefetch: Option<u64>,
    /// Keep bytes read from an object store (or a remote zip) in this directory, across
    /// remounts and reboots; one mount per directory. See docs/PERFORMANCE.md "Disk cache".
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Bound of --cache-dir, e.g. 20G (least recently used blocks are dropped first). Default: 10G.
    #[arg(long, value_name = "SIZE", value_parser = values::size)]
    pub cache_max_size: Option<u64>,
    /// The data does not change: what --cache-dir holds is served without asking the store
    /// again, across remounts and past --metadata-ttl (a change at the store is not seen until
    /// the cache directory is emptied). See docs/PERFORMANCE.md "Disk cache".
    #[arg(long)]
    pub immutable: bool,
}

/// The caches of one mount, as `CacheFlags` ask for them.
pub(super) struct Caches {
    pub metadata_ttl: Duration,
    pub cache_size: u64,
    pub array_prefetch: u64,
    pub disk_cache: Option<DiskCacheOptions>,
}

impl CacheFlags {
    pub(super) fn caches(&self, source: &Source) -> Result<Caches, UsageError> {
        let default_ttl = match source {
            Source::Directory(Location::Local(_)) => Duration::from_secs(1),
            _ => Duration::from_secs(60),
        };
        let cache_size =
            self.cache_size.unwrap_or_else(crate::store::layers::cache::default_cache_bytes);
        Ok(Caches {
            metadata_ttl: self.metadata_ttl.unwrap_or(default_ttl),
            cache_size,
            array_prefetch: self
                .array_prefetch
                .unwrap_or(DEFAULT_ARRAY_PREFETCH)
                .min(cache_size / 4),
            disk_cache: self.disk_cache(source)?,
        })
    }

    /// `--cache-dir`: only for remote sources; the directory is locked here, so a second mount
    /// on it fails with a usage error (exit 2) before anything is mounted.
    fn disk_cache(&self, source: &Source) -> Result<Option<DiskCacheOptions>, UsageError> {
        let Some(dir) = &self.cache_dir else {
            return match (self.cache_max_size, self.immutable) {
                (Some(_), _) => Err(usage("--cache-max-size needs --cache-dir")),
                (_, true) => Err(usage("--immutable needs --cache-dir")),
                (None, false) => Ok(None),
            };
        };
        if matches!(source, Source::Icechunk(_)) {
            return Err(usage("--cache-dir does not apply to Icechunk sources yet"));
        }
        if matches!(source.location(), Location::Local(_)) {
            return Err(usage(
                "--cache-dir applies only to object-store sources (s3://, gs://, az://, http(s)://)",
            ));
        }
        let max_bytes = self.cache_max_size.unwrap_or(DEFAULT_MAX_BYTES);
        if max_bytes < BLOCK_SIZE * 2 {
            return Err(usage("--cache-max-size must be at least 2M"));
        }
        let lock = DirLock::acquire(dir).map_err(usage)?;
        Ok(Some(DiskCacheOptions {
            lock: std::sync::Arc::new(lock),
            max_bytes,
            immutable: self.immutable,
        }))
    }
}
