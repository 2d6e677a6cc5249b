//! Shard indexes fetched from the store and kept in memory: one ranged GET per shard (the
//! index at the start or the end), checked (crc32c, bounds) before use, cached in an LRU
//! bounded by bytes and shared by concurrent requests for the same shard (one fetch).
//!
//! Over a store that keeps small objects whole (the S3/GCS/Azure/HTTP cache), once an array's
//! shards have proved small enough to be kept, the index GET asks for the whole shard: the
//! chunk reads that follow are then served from memory instead of costing a second request.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::store::{ByteRange, Store, StoreError};
use crate::zarr::shard_index::ShardIndex;
use crate::zarr::sharding::{IndexLocation, ShardLayout};

/// What the store holds at a shard key.
#[derive(Debug)]
pub enum ShardState {
    /// No shard: every inner chunk is absent (fill value).
    Missing,
    Present {
        index: ShardIndex,
        version: String,
        modified: std::time::SystemTime,
    },
    /// The index failed its checks: reads of this shard's chunks give EIO.
    Corrupt(String),
}

type Slot = Arc<tokio::sync::OnceCell<Result<Arc<ShardState>, Arc<StoreError>>>>;

/// How many arrays' shard sizes are remembered.
const ARRAYS_SIZED: usize = 4096;

pub struct ShardIndexCache {
    store: Arc<dyn Store>,
    ttl: Duration,
    budget_bytes: usize,
    inner: Mutex<CacheInner>,
    /// Bumped by every invalidation: a fetch that overlapped one is not cached.
    epoch: std::sync::atomic::AtomicU64,
    /// Array directory -> largest shard size seen in it.
    shard_sizes: Mutex<LruCache<String, u64>>,
}

struct CacheInner {
    entries: LruCache<String, (Arc<ShardState>, Instant, usize)>,
    bytes: usize,
    inflight: HashMap<String, Slot>,
}

fn metrics() -> &'static crate::metrics::CacheMetrics {
    crate::metrics::global().cache(crate::metrics::CacheKind::ShardIndex)
}

impl Drop for ShardIndexCache {
    fn drop(&mut self) {
        metrics().capacity.sub(self.budget_bytes as i64);
        metrics().held(-(self.lock().bytes as i64));
    }
}

impl ShardIndexCache {
    pub fn new(store: Arc<dyn Store>, ttl: Duration, budget_bytes: usize) -> Self {
        metrics().capacity.add(budget_bytes as i64);
        ShardIndexCache {
            store,
            ttl,
            budget_bytes,
            inner: Mutex::new(CacheInner {
                entries: LruCache::unbounded(),
                bytes: 0,
                inflight: HashMap::new(),
            }),
            epoch: std::sync::atomic::AtomicU64::new(0),
            shard_sizes: Mutex::new(LruCache::new(
                NonZeroUsize::new(ARRAYS_SIZED).expect("nonzero"),
            )),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forget a shard (after it was written or deleted through the mount).
    pub fn invalidate(&self, key: &str) {
        let mut inner = self.lock();
        self.epoch.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // A fetch under way may have read the old shard: later readers start a new one.
        inner.inflight.remove(key);
        if let Some((_, _, size)) = inner.entries.pop(key) {
            inner.bytes -= size;
            metrics().held(-(size as i64));
        }
    }

    /// Whether the state of `key` is held (fresh or not) or being fetched; not a use of it.
    pub fn is_known(&self, key: &str) -> bool {
        let inner = self.lock();
        inner.entries.peek(key).is_some() || inner.inflight.contains_key(key)
    }

    /// The state of the shard at `key` (a full store key) of the array in directory `array`.
    pub async fn get(
        &self,
        array: &str,
        key: &str,
        layout: &ShardLayout,
    ) -> Result<Arc<ShardState>, Arc<StoreError>> {
        let epoch = self.epoch.load(std::sync::atomic::Ordering::SeqCst);
        let slot = {
            let mut inner = self.lock();
            if let Some((state, at, _)) = inner.entries.get(key) {
                if at.elapsed() < self.ttl {
                    metrics().hit();
                    return Ok(state.clone());
                }
            }
            metrics().miss();
            inner.inflight.entry(key.to_string()).or_default().clone()
        };
        let result = slot.get_or_init(|| self.fetch(array, key, layout)).await.clone();
        let mut inner = self.lock();
        if inner.inflight.get(key).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
            inner.inflight.remove(key);
        }
        let unchanged = self.epoch.load(std::sync::atomic::Ordering::SeqCst) == epoch;
        if unchanged {
            if let Ok(state) = &result {
                let size = match &**state {
                    ShardState::Present { index, .. } => (index.len() as usize) * 16 + 64,
                    _ => 64,
                } + key.len();
                if let Some((_, _, old)) =
                    inner.entries.put(key.to_string(), (state.clone(), Instant::now(), size))
                {
                    inner.bytes -= old;
                    metrics().held(-(old as i64));
                }
                inner.bytes += size;
                metrics().held(size as i64);
                while inner.bytes > self.budget_bytes {
                    match inner.entries.pop_lru() {
                        Some((_, (_, _, s))) => {
                            inner.bytes -= s;
                            metrics().held(-(s as i64));
                            metrics().evictions.inc();
                        }
                        None => break,
                    }
                }
            }
        }
        result
    }

    /// How many bytes to ask for to get the index of a shard of `array`: just the index, or,
    /// when the store keeps small objects whole and this array's shards have been small, a
    /// window (twice the largest shard seen, within the store's limit) likely to hold the
    /// whole shard.
    fn window(&self, array: &str, index_size: u64) -> u64 {
        let limit = self.store.whole_object_limit();
        let seen = self.shard_sizes.lock().unwrap_or_else(|p| p.into_inner()).get(array).copied();
        match seen {
            Some(size) if limit > 0 && size <= limit => {
                size.saturating_mul(2).min(limit).max(index_size)
            }
            _ => index_size,
        }
    }

    fn note_size(&self, array: &str, size: u64) {
        let mut sizes = self.shard_sizes.lock().unwrap_or_else(|p| p.into_inner());
        let largest = sizes.get(array).map_or(size, |s| size.max(*s));
        sizes.put(array.to_string(), largest);
    }

    async fn fetch(
        &self,
        array: &str,
        key: &str,
        layout: &ShardLayout,
    ) -> Result<Arc<ShardState>, Arc<StoreError>> {
        let n = layout.index_size();
        let window = self.window(array, n);
        let range = match layout.index_location {
            IndexLocation::Start => ByteRange::Range(0..window),
            IndexLocation::End => ByteRange::Suffix(window),
        };
        let fetched = match self.store.get_ranged(key, range).await {
            Ok(f) => f,
            Err(StoreError::NotFound(_)) => None,
            Err(e) => return Err(Arc::new(e)),
        };
        let Some((bytes, meta)) = fetched else { return Ok(Arc::new(ShardState::Missing)) };
        self.note_size(array, meta.size);
        // The index is the first or last `n` of the bytes read (all of them if fewer: then
        // the shard is too short and decoding says so).
        let keep = (n as usize).min(bytes.len());
        let bytes = match layout.index_location {
            IndexLocation::Start => bytes.slice(..keep),
            IndexLocation::End => bytes.slice(bytes.len() - keep..),
        };
        let state = match ShardIndex::decode(layout, &bytes, meta.size) {
            Ok(index) => {
                ShardState::Present { index, version: meta.version, modified: meta.modified }
            }
            Err(e) => {
                tracing::error!(shard = ?key, error = %e, "corrupt shard index: its chunks will read as EIO");
                ShardState::Corrupt(e.to_string())
            }
        };
        Ok(Arc::new(state))
    }
}
