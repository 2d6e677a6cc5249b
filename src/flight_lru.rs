//! The one in-memory cache every layer uses (the object cache in `store::layers::cache`, the shard
//! index cache and the decoded-chunk cache in `fs`): an LRU bounded by bytes whose loads are
//! single-flight (concurrent loads of one key share one fetch), with the cache's series in
//! `metrics` kept here so that each cache reports them the same way.
//!
//! Errors are shared by cloning (`E: Clone`), never by wrapping, so every waiter of a failed
//! fetch gets the same error, with the same errno, as the one that ran it.
//!
//! Invalidation: `invalidate` forgets a key and drops its fetch under way (later loads start
//! a new one), and bumps an epoch; a fetch that overlapped any invalidation is not kept, since
//! it may have read what was just replaced.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use lru::LruCache;

use crate::locks::lock;
use crate::metrics::CacheMetrics;

/// One fetch under way: the epoch it started in, and its outcome once known.
struct Flight<T, E> {
    epoch: u64,
    outcome: tokio::sync::OnceCell<Result<T, E>>,
}

struct State<V, T, E> {
    entries: LruCache<String, (V, u64)>,
    bytes: u64,
    inflight: HashMap<String, Arc<Flight<T, E>>>,
}

/// A byte-bounded LRU of `V` by string key, filled by single-flight loads that produce a `T`
/// (turned into the `V` to keep, if any, by the caller's `keep`).
pub struct FlightLru<V, T = V, E = ()> {
    budget: u64,
    metrics: &'static CacheMetrics,
    /// Called for every value that leaves (evicted, replaced or invalidated).
    on_leave: fn(&V),
    state: Mutex<State<V, T, E>>,
    epoch: AtomicU64,
}

impl<V, T: Clone, E: Clone> FlightLru<V, T, E> {
    /// An empty cache of at most `budget` bytes reporting to `metrics`.
    pub fn new(budget: u64, metrics: &'static CacheMetrics) -> Self {
        metrics.capacity.add(budget as i64);
        FlightLru {
            budget,
            metrics,
            on_leave: |_| {},
            state: Mutex::new(State {
                entries: LruCache::unbounded(),
                bytes: 0,
                inflight: HashMap::new(),
            }),
            epoch: AtomicU64::new(0),
        }
    }

    /// Call `f` for every value that leaves the cache.
    pub fn on_leave(mut self, f: fn(&V)) -> Self {
        self.on_leave = f;
        self
    }

    fn state(&self) -> MutexGuard<'_, State<V, T, E>> {
        lock(&self.state)
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    pub fn hit(&self) {
        self.metrics.hit();
    }

    pub fn miss(&self) {
        self.metrics.miss();
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.state().bytes
    }

    /// Values held now.
    pub fn len(&self) -> usize {
        self.state().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains(&self, key: &str) -> bool {
        self.state().entries.contains(key)
    }

    /// Whether `key` is held or being fetched.
    pub fn is_known(&self, key: &str) -> bool {
        let st = self.state();
        st.entries.contains(key) || st.inflight.contains_key(key)
    }

    /// `f` of the value at `key`, marking it most recently used.
    pub fn get_with<R>(&self, key: &str, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        self.state().entries.get_mut(key).map(|(v, _)| f(v))
    }

    /// `f` of the value at `key`, leaving its place in the LRU order as it is.
    pub fn peek_with<R>(&self, key: &str, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        self.state().entries.peek_mut(key).map(|(v, _)| f(v))
    }

    /// The epoch now: pass it to `insert_since` to keep a value read outside `load`.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Keep `value` (of `size` bytes) unless the cache was invalidated since `epoch`.
    pub fn insert_since(&self, epoch: u64, key: &str, value: V, size: u64) {
        let mut st = self.state();
        if self.epoch() == epoch {
            self.put(&mut st, key, value, size);
        }
    }

    /// Keep `value` (of `size` bytes), evicting the least recently used values over budget.
    /// A value larger than the whole budget is not kept.
    fn put(&self, st: &mut State<V, T, E>, key: &str, value: V, size: u64) {
        if size > self.budget {
            return;
        }
        self.remove(st, key);
        st.entries.put(key.to_string(), (value, size));
        st.bytes += size;
        self.metrics.held(size as i64);
        while st.bytes > self.budget {
            match st.entries.pop_lru() {
                Some((_, (v, s))) => {
                    st.bytes -= s;
                    self.metrics.held(-(s as i64));
                    (self.on_leave)(&v);
                    self.metrics.evictions.inc();
                }
                None => break,
            }
        }
    }

    fn remove(&self, st: &mut State<V, T, E>, key: &str) {
        if let Some((v, s)) = st.entries.pop(key) {
            st.bytes -= s;
            self.metrics.held(-(s as i64));
            (self.on_leave)(&v);
        }
    }

    /// Drop the value held at `key`, if any (seen to be stale); fetches under way go on.
    pub fn forget(&self, key: &str) {
        self.remove(&mut self.state(), key);
    }

    /// Forget `key` and any fetch of it under way; fetches overlapping this are not kept.
    pub fn invalidate(&self, key: &str) {
        self.invalidate_where(|k| k == key);
    }

    /// Forget every key for which `pick` holds, as `invalidate` does.
    pub fn invalidate_where(&self, pick: impl Fn(&str) -> bool) {
        let mut st = self.state();
        self.epoch.fetch_add(1, Ordering::SeqCst);
        st.inflight.retain(|k, _| !pick(k));
        let keys: Vec<String> =
            st.entries.iter().map(|(k, _)| k.clone()).filter(|k| pick(k)).collect();
        for k in keys {
            self.remove(&mut st, &k);
        }
    }

    /// The outcome of `fetch()` for `key`, shared with every caller loading `key` meanwhile
    /// (only one runs its fetch; if that caller goes away, another runs its own). The first
    /// waiter to finish keeps what `keep` makes of a successful outcome (a value and its size),
    /// unless the cache was invalidated since the fetch began.
    pub async fn load<F, Fut>(
        &self,
        key: &str,
        fetch: F,
        keep: impl FnOnce(&T) -> Option<(V, u64)>,
    ) -> Result<T, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let flight = {
            let mut st = self.state();
            let epoch = self.epoch();
            st.inflight
                .entry(key.to_string())
                .or_insert_with(|| {
                    Arc::new(Flight { epoch, outcome: tokio::sync::OnceCell::new() })
                })
                .clone()
        };
        let outcome = flight.outcome.get_or_init(fetch).await.clone();
        let mut st = self.state();
        if st.inflight.get(key).is_some_and(|f| Arc::ptr_eq(f, &flight)) {
            st.inflight.remove(key);
            if let Ok(t) = &outcome {
                if self.epoch() == flight.epoch {
                    if let Some((v, size)) = keep(t) {
                        self.put(&mut st, key, v, size);
                    }
                }
            }
        }
        outcome
    }
}

impl<V, T, E> Drop for FlightLru<V, T, E> {
    fn drop(&mut self) {
        self.metrics.capacity.sub(self.budget as i64);
        self.metrics.held(-(lock(&self.state).bytes as i64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{global, CacheKind};
    use crate::store::StoreError;
    use crate::views::shared::error::FsError;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    fn cache(budget: u64) -> Arc<FlightLru<u64, u64, StoreError>> {
        Arc::new(FlightLru::new(budget, global().cache(CacheKind::Decoded)))
    }

    #[tokio::test]
    async fn bounded_by_bytes_least_recently_used_first() {
        let c = cache(100);
        for (k, size) in [("a", 40), ("b", 40)] {
            c.load(k, || async { Ok(size) }, |s| Some((*s, *s))).await.unwrap();
        }
        c.get_with("a", |_| ()); // a is now the most recently used
        c.load("c", || async { Ok(40) }, |s| Some((*s, *s))).await.unwrap();
        assert_eq!((c.bytes(), c.len()), (80, 2));
        assert!(c.contains("a") && c.contains("c") && !c.contains("b"));
        // Larger than the whole budget: returned, not kept.
        assert_eq!(c.load("huge", || async { Ok(500) }, |s| Some((*s, *s))).await.unwrap(), 500);
        assert!(!c.contains("huge"));
        assert_eq!(c.bytes(), 80);
    }

    /// Concurrent loads share one fetch, and a shared error keeps its kind (an ENOENT seen
    /// by eight waiters is ENOENT for each, not EIO), and is not cached.
    #[tokio::test(start_paused = true)]
    async fn a_shared_error_keeps_its_errno() {
        let c = cache(100);
        let fetches = Arc::new(AtomicUsize::new(0));
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let (c, fetches) = (c.clone(), fetches.clone());
                tokio::spawn(async move {
                    c.load(
                        "k",
                        || async {
                            fetches.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            Err(StoreError::NotFound("k".into()))
                        },
                        |s| Some((*s, 1)),
                    )
                    .await
                })
            })
            .collect();
        for w in waiters {
            let e = w.await.unwrap().unwrap_err();
            assert!(matches!(&e, StoreError::NotFound(k) if k == "k"), "{e:?}");
            assert_eq!(FsError::Store(e).errno(), libc::ENOENT);
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1, "one fetch for 8 waiters");
        assert!(!c.is_known("k"), "errors are not kept");
        let io = StoreError::Io { key: "k".into(), source: std::io::Error::from_raw_os_error(5) };
        let e = c.load("k", || async { Err(io) }, |s| Some((*s, 1))).await.unwrap_err();
        assert_eq!(FsError::Store(e).errno(), libc::EIO);
        let e = c
            .load("k", || async { Err(StoreError::PermissionDenied("k".into())) }, |_| None)
            .await
            .unwrap_err();
        assert_eq!(FsError::Store(e).errno(), libc::EACCES);
    }

    /// A fetch that overlapped an invalidation is returned but not kept, and later loads do
    /// not join it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_fetch_overlapping_an_invalidation_is_not_kept() {
        let c = cache(100);
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let slow = {
            let c = c.clone();
            tokio::spawn(async move {
                c.load(
                    "k",
                    || async {
                        wait.await.unwrap();
                        Ok(1)
                    },
                    |s| Some((*s, 1)),
                )
                .await
            })
        };
        while !c.is_known("k") {
            tokio::task::yield_now().await;
        }
        c.invalidate("k");
        assert_eq!(c.load("k", || async { Ok(2) }, |_| None).await.unwrap(), 2, "a new fetch");
        go.send(()).unwrap();
        assert_eq!(slow.await.unwrap().unwrap(), 1);
        assert!(!c.contains("k"));
        let e = c.epoch();
        c.insert_since(e, "k", 3, 1);
        assert_eq!(c.get_with("k", |v| *v), Some(3));
        c.insert_since(e, "j", 4, 1); // unchanged epoch: kept
        c.invalidate_where(|k| k == "j");
        c.insert_since(e, "i", 5, 1); // invalidated since: not kept
        assert_eq!((c.contains("j"), c.contains("i"), c.contains("k")), (false, false, true));
    }
}
