//! Shard indexes fetched from the store and kept in memory: one ranged GET per shard (the
//! index at the start or the end), checked (crc32c, bounds) before use, cached in an LRU
//! bounded by bytes and shared by concurrent requests for the same shard (one fetch).
//!
//! Over a store that keeps small objects whole (the S3/GCS/Azure/HTTP cache), when an array's
//! shards are small enough to be kept (by its metadata's bound, or by the sizes seen), the
//! index GET of a chunk read asks for the whole shard: the chunk reads that follow are then
//! served from memory instead of costing a second request. A listing asks for the index
//! alone: `ls -R` or `du` of an array must not download it.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::flight_lru::FlightLru;
use crate::locks::lock;
use crate::store::{ByteRange, Store, StoreError};
use crate::zarr::sharding::index::ShardIndex;
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
        /// The shard's own mode, owner and group: its inner chunk files show them.
        perms: Option<crate::perms::Perms>,
    },
    /// The index failed its checks: reads of this shard's chunks give EIO.
    Corrupt(String),
}

/// What a shard's index is wanted for, which decides how much of the shard to fetch with it.
#[derive(Debug, Clone, Copy)]
pub enum IndexFor {
    /// Names and sizes for a listing: the index alone.
    Listing,
    /// A chunk's bytes are read next: the whole shard when it is small. `shard_bound` is the
    /// array metadata's upper estimate of a shard's size (`stored_chunk_bound`), if any.
    Reading { shard_bound: Option<u64> },
}

/// How many arrays' shard sizes are remembered.
const ARRAYS_SIZED: usize = 4096;

/// A state and when it was read (trusted for the TTL after that).
type Held = (Arc<ShardState>, Instant);

pub struct ShardIndexCache {
    store: Arc<dyn Store>,
    ttl: Duration,
    cache: FlightLru<Held, Arc<ShardState>, StoreError>,
    /// Array directory -> largest shard size seen in it.
    shard_sizes: Mutex<LruCache<String, u64>>,
}

impl ShardIndexCache {
    pub fn new(store: Arc<dyn Store>, ttl: Duration, budget_bytes: usize) -> Self {
        let metrics = crate::metrics::global().cache(crate::metrics::CacheKind::ShardIndex);
        ShardIndexCache {
            store,
            ttl,
            cache: FlightLru::new(budget_bytes as u64, metrics),
            shard_sizes: Mutex::new(LruCache::new(
                NonZeroUsize::new(ARRAYS_SIZED).expect("nonzero"),
            )),
        }
    }

    /// Forget a shard (after it was written or deleted through the mount).
    pub fn invalidate(&self, key: &str) {
        self.cache.invalidate(key);
    }

    /// Whether the state of `key` is held (fresh or not) or being fetched; not a use of it.
    pub fn is_known(&self, key: &str) -> bool {
        self.cache.is_known(key)
    }

    /// The state of the shard at `key` (a full store key) of the array in directory `array`.
    pub async fn get(
        &self,
        array: &str,
        key: &str,
        layout: &ShardLayout,
        purpose: IndexFor,
    ) -> Result<Arc<ShardState>, StoreError> {
        let held = self.cache.get_with(key, |(state, at)| (state.clone(), *at));
        if let Some((state, at)) = held {
            if crate::clock::since(at) < self.ttl {
                self.cache.hit();
                return Ok(state);
            }
        }
        self.cache.miss();
        let keep = |state: &Arc<ShardState>| {
            // Held bytes: 16 per chunk entry, a little for the rest, and the key.
            let size = match &**state {
                ShardState::Present { index, .. } => (index.len() as usize) * 16 + 64,
                _ => 64,
            } + key.len();
            Some(((state.clone(), crate::clock::now()), size as u64))
        };
        self.cache.load(key, || self.fetch(array, key, layout, purpose), keep).await
    }

    /// How many bytes to ask for to get the index of a shard of `array`: just the index, or,
    /// for a chunk read when the store keeps small objects whole and this array's shards are
    /// small, a window likely to hold the whole shard: twice the largest shard seen, within
    /// the store's limit; before any is seen, the metadata's bound on a shard's size when
    /// within that limit (the first shards of a scan then cost one request each, not an index
    /// GET and a chunk GET in a row).
    fn window(&self, array: &str, index_size: u64, purpose: IndexFor) -> u64 {
        let limit = self.store.whole_object_limit();
        let IndexFor::Reading { shard_bound: bound } = purpose else { return index_size };
        if limit == 0 {
            return index_size;
        }
        let seen = lock(&self.shard_sizes).get(array).copied();
        match (seen, bound) {
            (Some(size), _) if size <= limit => size.saturating_mul(2).min(limit).max(index_size),
            (None, Some(bound)) if bound <= limit => bound.max(index_size),
            _ => index_size,
        }
    }

    fn note_size(&self, array: &str, size: u64) {
        let mut sizes = lock(&self.shard_sizes);
        let largest = sizes.get(array).map_or(size, |s| size.max(*s));
        sizes.put(array.to_string(), largest);
    }

    async fn fetch(
        &self,
        array: &str,
        key: &str,
        layout: &ShardLayout,
        purpose: IndexFor,
    ) -> Result<Arc<ShardState>, StoreError> {
        let n = layout.index_size();
        let window = self.window(array, n, purpose);
        // A window past the index is meant to take the whole shard: asked for from the
        // start, whatever end the index is at. A bounded range is a shape every server takes
        // (a suffix longer than the object is not: s3s-fs answers 500, after the client's
        // retries; Azure takes no suffix), and the cache shares such a read with the chunk
        // reads of the same shard that follow it.
        let whole_shard = window > n;
        let index_at_end = layout.index_location == IndexLocation::End;
        let range = if index_at_end && !whole_shard {
            ByteRange::Suffix(n)
        } else {
            ByteRange::Range(0..window)
        };
        let Some((mut bytes, mut meta)) = self.fetch_range(key, range).await? else {
            tracing::debug!(shard = ?key, "no shard at this key: its chunks read as absent");
            return Ok(Arc::new(ShardState::Missing));
        };
        if index_at_end && whole_shard && bytes.len() as u64 != meta.size {
            // A shard larger than the window: its index is past what was read.
            let Some(tail) = self.fetch_range(key, ByteRange::Suffix(n)).await? else {
                return Ok(Arc::new(ShardState::Missing));
            };
            (bytes, meta) = tail;
        }
        self.note_size(array, meta.size);
        // The index is the first or last `n` of the bytes read (all of them if fewer: then
        // the shard is too short and decoding says so).
        let keep = (n as usize).min(bytes.len());
        let bytes = match layout.index_location {
            IndexLocation::Start => bytes.slice(..keep),
            IndexLocation::End => bytes.slice(bytes.len() - keep..),
        };
        let state = match ShardIndex::decode(layout, &bytes, meta.size) {
            Ok(index) => ShardState::Present {
                index,
                version: meta.version,
                modified: meta.modified,
                perms: meta.perms,
            },
            Err(e) => {
                tracing::error!(shard = ?key, error = %e, "corrupt shard index: its chunks will read as EIO");
                ShardState::Corrupt(e.to_string())
            }
        };
        Ok(Arc::new(state))
    }

    /// `range` of the shard at `key`, or None if there is no shard.
    async fn fetch_range(
        &self,
        key: &str,
        range: ByteRange,
    ) -> Result<Option<(bytes::Bytes, crate::store::ObjectMeta)>, StoreError> {
        match self.store.get_ranged(key, range).await {
            Err(StoreError::NotFound(_)) => Ok(None),
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::layers::fault::{Fault, FaultPlan, FaultStore, Op};
    use crate::store::prelude::*;
    use crate::views::shared::error::FsError;
    use crate::zarr::sharding::index::tests::{layout, raw_index};

    /// Readers that share one failed index fetch each get its errno (EACCES here; a shared
    /// error used to become EIO), and the failure is not cached.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_shared_failure_keeps_its_errno() {
        let plan = FaultPlan::new();
        let store = Arc::new(FaultStore::new(Arc::new(MemoryStore::new()), plan.clone()));
        store.put("a/c/0", bytes::Bytes::from(vec![0xFFu8; 64])).await.unwrap();
        plan.delay(&[Op::Read], Duration::from_millis(100));
        plan.fail_next(Op::Read, 1, Fault::PermissionDenied);
        let cache = Arc::new(ShardIndexCache::new(store, Duration::from_secs(60), 1 << 20));
        let l = layout(2, IndexLocation::End, false);
        let readers: Vec<_> = (0..6)
            .map(|_| {
                let (cache, l) = (cache.clone(), l.clone());
                tokio::spawn(async move {
                    cache.get("a", "a/c/0", &l, IndexFor::Listing).await.map(|_| ())
                })
            })
            .collect();
        for r in readers {
            let e = r.await.unwrap().unwrap_err();
            assert_eq!(FsError::Store(e).errno(), libc::EACCES);
        }
        assert_eq!(plan.injected(), 1, "one fetch shared by six readers");
        plan.clear();
        assert!(!cache.is_known("a/c/0"), "the failure was not kept");
        assert!(matches!(
            *cache.get("a", "a/c/0", &l, IndexFor::Listing).await.unwrap(),
            ShardState::Present { .. }
        ));
    }

    /// The first index read of an array asks for the whole shard when the metadata bounds a
    /// shard within what the store keeps whole (then the chunk read after it is free), else
    /// just the index; once a shard has been seen, twice its size. A listing, the index alone.
    #[tokio::test]
    async fn the_first_index_read_takes_the_whole_shard_when_the_metadata_bounds_it() {
        use crate::store::layers::cache::{CacheConfig, CachingStore};
        use crate::store::layers::recording::RecordingStore;
        let l = layout(2, IndexLocation::End, false);
        let shard = [vec![7u8; 100], raw_index(&[(0, 50), (50, 50)], false)].concat();
        let index = l.index_size();
        // The index alone is its suffix; the whole shard is asked for from the start.
        let first = |window: u64| {
            if window == index {
                format!("get_ranged a/c/0 Suffix({index})")
            } else {
                format!("get_ranged a/c/0 Range(0..{window})")
            }
        };
        for (bound, first_window) in [(None, index), (Some(4096), 4096), (Some(64 << 20), index)] {
            let memory = Arc::new(MemoryStore::new());
            memory.put("a/c/0", bytes::Bytes::from(shard.clone())).await.unwrap();
            memory.put("a/c/1", bytes::Bytes::from(shard.clone())).await.unwrap();
            memory.put("a/c/2", bytes::Bytes::from(shard.clone())).await.unwrap();
            let reading = IndexFor::Reading { shard_bound: bound };
            let recording = Arc::new(RecordingStore::new(memory));
            let cfg = CacheConfig {
                capacity: 64 << 20,
                object_limit: 8 << 20,
                ttl: Duration::from_secs(60),
            };
            let store = CachingStore::new(recording.clone(), cfg);
            let cache = ShardIndexCache::new(store.clone(), Duration::from_secs(60), 1 << 20);
            let state = cache.get("a", "a/c/0", &l, reading).await.unwrap();
            assert!(matches!(*state, ShardState::Present { .. }), "{bound:?}");
            let calls = recording.take();
            assert_eq!(calls, vec![first(first_window)], "{bound:?}");
            store.get_range("a/c/0", 50..100).await.unwrap();
            let chunk_reads = recording.take().len();
            assert_eq!(chunk_reads, usize::from(first_window == index), "{bound:?}");
            // The next shard: twice the size seen, whatever the bound.
            cache.get("a", "a/c/1", &l, reading).await.unwrap();
            let calls = recording.take();
            assert_eq!(
                calls,
                vec![format!("get_ranged a/c/1 Range(0..{})", 2 * shard.len())],
                "{bound:?}"
            );
            // A listing: the index alone, whatever is known of the shards' sizes.
            cache.get("a", "a/c/2", &l, IndexFor::Listing).await.unwrap();
            assert_eq!(recording.take(), vec![format!("get_ranged a/c/2 Suffix({index})")]);
        }
    }

    /// A shard larger than the window read from its start (a metadata bound too low): its
    /// index is then read from the shard's end, and is the right one.
    #[tokio::test]
    async fn a_shard_past_the_window_has_its_index_read_from_its_end() {
        use crate::store::layers::recording::RecordingStore;
        let l = layout(2, IndexLocation::End, false);
        let shard = [vec![7u8; 5000], raw_index(&[(0, 2500), (2500, 2500)], false)].concat();
        let index = l.index_size();
        let memory = Arc::new(MemoryStore::new());
        memory.put("a/c/0", bytes::Bytes::from(shard.clone())).await.unwrap();
        let recording = Arc::new(RecordingStore::new(memory));
        let store = crate::store::layers::cache::CachingStore::new(
            recording.clone(),
            crate::store::layers::cache::CacheConfig {
                capacity: 64 << 20,
                object_limit: 8 << 20,
                ttl: Duration::from_secs(60),
            },
        );
        let cache = ShardIndexCache::new(store, Duration::from_secs(60), 1 << 20);
        let reading = IndexFor::Reading { shard_bound: Some(4096) };
        let state = cache.get("a", "a/c/0", &l, reading).await.unwrap();
        let ShardState::Present { index: got, .. } = &*state else { panic!("{state:?}") };
        assert_eq!(got.len(), 2);
        // The second read asks for the index (the cache, now knowing the shard is small,
        // fetches it whole).
        let calls = recording.take();
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert_eq!(calls[0], "get_ranged a/c/0 Range(0..4096)");
        assert!(index < 4096);
    }
}
