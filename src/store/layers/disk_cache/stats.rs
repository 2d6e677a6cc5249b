//! The disk cache's counters: its own, for tests, and the process-wide series of `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::metrics::Revalidation;

/// Counters of this cache, for tests (the process-wide ones are in `metrics::DiskCacheMetrics`).
#[derive(Debug, Default)]
pub struct DiskCacheStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub written: AtomicU64,
    pub corrupt: AtomicU64,
    pub evicted: AtomicU64,
    /// Revalidations that found the cached version still there, and another one (or none).
    pub unchanged: AtomicU64,
    pub changed: AtomicU64,
}

impl DiskCacheStats {
    pub(super) fn hit(&self, blocks: u64, bytes: u64) {
        self.hits.fetch_add(blocks, Ordering::Relaxed);
        let m = &crate::metrics::global().disk_cache;
        m.hits.inc_by(blocks);
        m.read_bytes.inc_by(bytes);
    }
    pub(super) fn miss(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
        crate::metrics::global().disk_cache.misses.inc();
    }
    pub(super) fn corrupt(&self) {
        self.corrupt.fetch_add(1, Ordering::Relaxed);
        crate::metrics::global().disk_cache.corrupt.inc();
    }
    pub(super) fn evicted(&self, files: u64) {
        self.evicted.fetch_add(files, Ordering::Relaxed);
        crate::metrics::global().disk_cache.evictions.inc_by(files);
    }
    pub(super) fn revalidated(&self, found: Revalidation) {
        let mine = if found == Revalidation::Unchanged { &self.unchanged } else { &self.changed };
        mine.fetch_add(1, Ordering::Relaxed);
        crate::metrics::global().disk_cache.revalidations(found).inc();
    }
}
