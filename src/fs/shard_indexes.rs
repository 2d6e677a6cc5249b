//! Shard indexes fetched from the store and kept in memory: one ranged GET per shard (the
//! index at the start or the end), checked (crc32c, bounds) before use, cached in an LRU
//! bounded by bytes and shared by concurrent requests for the same shard (one fetch).

use std::collections::HashMap;
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
    Present { index: ShardIndex, version: String, modified: std::time::SystemTime },
    /// The index failed its checks: reads of this shard's chunks give EIO.
    Corrupt(String),
}

type Slot = Arc<tokio::sync::OnceCell<Result<Arc<ShardState>, Arc<StoreError>>>>;

pub struct ShardIndexCache {
    store: Arc<dyn Store>,
    ttl: Duration,
    budget_bytes: usize,
    inner: Mutex<CacheInner>,
    /// Bumped by every invalidation: a fetch that overlapped one is not cached.
    epoch: std::sync::atomic::AtomicU64,
}

struct CacheInner {
    entries: LruCache<String, (Arc<ShardState>, Instant, usize)>,
    bytes: usize,
    inflight: HashMap<String, Slot>,
}

impl ShardIndexCache {
    pub fn new(store: Arc<dyn Store>, ttl: Duration, budget_bytes: usize) -> Self {
        ShardIndexCache {
            store,
            ttl,
            budget_bytes,
            inner: Mutex::new(CacheInner { entries: LruCache::unbounded(), bytes: 0, inflight: HashMap::new() }),
            epoch: std::sync::atomic::AtomicU64::new(0),
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
        }
    }

    /// The state of the shard at `key` (a full store key).
    pub async fn get(&self, key: &str, layout: &ShardLayout) -> Result<Arc<ShardState>, Arc<StoreError>> {
        let epoch = self.epoch.load(std::sync::atomic::Ordering::SeqCst);
        let slot = {
            let mut inner = self.lock();
            if let Some((state, at, _)) = inner.entries.get(key) {
                if at.elapsed() < self.ttl {
                    return Ok(state.clone());
                }
            }
            inner.inflight.entry(key.to_string()).or_default().clone()
        };
        let result = slot.get_or_init(|| self.fetch(key, layout)).await.clone();
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
                if let Some((_, _, old)) = inner.entries.put(key.to_string(), (state.clone(), Instant::now(), size)) {
                    inner.bytes -= old;
                }
                inner.bytes += size;
                while inner.bytes > self.budget_bytes {
                    match inner.entries.pop_lru() {
                        Some((_, (_, _, s))) => inner.bytes -= s,
                        None => break,
                    }
                }
            }
        }
        result
    }

    async fn fetch(&self, key: &str, layout: &ShardLayout) -> Result<Arc<ShardState>, Arc<StoreError>> {
        let n = layout.index_size();
        let range = match layout.index_location {
            IndexLocation::Start => ByteRange::Range(0..n),
            IndexLocation::End => ByteRange::Suffix(n),
        };
        let fetched = match self.store.get_ranged(key, range).await {
            Ok(f) => f,
            Err(StoreError::NotFound(_)) => None,
            Err(e) => return Err(Arc::new(e)),
        };
        let Some((bytes, meta)) = fetched else { return Ok(Arc::new(ShardState::Missing)) };
        let state = match ShardIndex::decode(layout, &bytes, meta.size) {
            Ok(index) => ShardState::Present { index, version: meta.version, modified: meta.modified },
            Err(e) => {
                tracing::error!(shard = ?key, error = %e, "corrupt shard index: its chunks will read as EIO");
                ShardState::Corrupt(e.to_string())
            }
        };
        Ok(Arc::new(state))
    }
}
