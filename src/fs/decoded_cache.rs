//! Decoded chunks kept in memory, so the many small reads the kernel makes of one chunk file
//! decode it once. Keys name a stored chunk *version*, so entries never go stale; the LRU is
//! bounded by bytes, and concurrent readers of one chunk share one decode.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use lru::LruCache;

use super::error::{FsError, FsResult};

type Slot = Arc<tokio::sync::OnceCell<Result<Bytes, Arc<FsError>>>>;

pub struct DecodedCache {
    budget_bytes: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    entries: LruCache<String, Bytes>,
    bytes: usize,
    inflight: HashMap<String, Slot>,
}

fn metrics() -> &'static crate::metrics::CacheMetrics {
    crate::metrics::global().cache(crate::metrics::CacheKind::Decoded)
}

impl Drop for DecodedCache {
    fn drop(&mut self) {
        metrics().capacity.sub(self.budget_bytes as i64);
        metrics().held(-(self.lock().bytes as i64));
    }
}

impl DecodedCache {
    pub fn new(budget_bytes: usize) -> Self {
        metrics().capacity.add(budget_bytes as i64);
        DecodedCache {
            budget_bytes,
            inner: Mutex::new(Inner {
                entries: LruCache::unbounded(),
                bytes: 0,
                inflight: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached value for `key`, or `load()`'s, shared with everyone asking meanwhile.
    pub async fn get_or_load<F, Fut>(&self, key: &str, load: F) -> FsResult<Bytes>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = FsResult<Bytes>>,
    {
        let slot = {
            let mut inner = self.lock();
            if let Some(bytes) = inner.entries.get(key) {
                metrics().hit();
                return Ok(bytes.clone());
            }
            metrics().miss();
            inner.inflight.entry(key.to_string()).or_default().clone()
        };
        let result = slot.get_or_init(|| async { load().await.map_err(Arc::new) }).await.clone();
        let mut inner = self.lock();
        if inner.inflight.get(key).is_some_and(|s| Arc::ptr_eq(s, &slot)) {
            inner.inflight.remove(key);
            if let Ok(bytes) = &result {
                self.insert(&mut inner, key, bytes.clone());
            }
        }
        result.map_err(FsError::Shared)
    }

    fn insert(&self, inner: &mut Inner, key: &str, bytes: Bytes) {
        let size = bytes.len() + key.len();
        if size > self.budget_bytes {
            return; // larger than the whole cache: serve it, keep nothing
        }
        if let Some(old) = inner.entries.put(key.to_string(), bytes) {
            inner.bytes -= old.len() + key.len();
            metrics().held(-((old.len() + key.len()) as i64));
        }
        inner.bytes += size;
        metrics().held(size as i64);
        while inner.bytes > self.budget_bytes {
            match inner.entries.pop_lru() {
                Some((k, v)) => {
                    inner.bytes -= v.len() + k.len();
                    metrics().held(-((v.len() + k.len()) as i64));
                    metrics().evictions.inc();
                }
                None => break,
            }
        }
    }

    #[cfg(test)]
    fn cached_bytes(&self) -> usize {
        self.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn loads_once_and_bounds_bytes() {
        let cache = Arc::new(DecodedCache::new(100));
        let loads = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (cache, loads) = (cache.clone(), loads.clone());
            tasks.push(tokio::spawn(async move {
                cache
                    .get_or_load("a", || async {
                        loads.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        Ok(Bytes::from(vec![1u8; 40]))
                    })
                    .await
                    .unwrap()
            }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap().len(), 40);
        }
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        for k in ["b", "c"] {
            cache.get_or_load(k, || async { Ok(Bytes::from(vec![2u8; 40])) }).await.unwrap();
        }
        assert!(cache.cached_bytes() <= 100, "{}", cache.cached_bytes());
        // "a" was evicted (least recently used): loading again calls the loader.
        cache
            .get_or_load("a", || async {
                loads.fetch_add(1, Ordering::SeqCst);
                Ok(Bytes::new())
            })
            .await
            .unwrap();
        assert_eq!(loads.load(Ordering::SeqCst), 2);
        // Too big to keep at all.
        cache.get_or_load("huge", || async { Ok(Bytes::from(vec![0u8; 500])) }).await.unwrap();
        assert!(cache.cached_bytes() <= 100);
    }

    #[tokio::test]
    async fn errors_are_not_cached() {
        let cache = DecodedCache::new(100);
        let err = cache.get_or_load("x", || async { Err(FsError::Corrupt("bad".into())) }).await;
        assert_eq!(err.unwrap_err().errno(), libc::EIO);
        let ok = cache.get_or_load("x", || async { Ok(Bytes::from_static(b"ok")) }).await.unwrap();
        assert_eq!(&ok[..], b"ok");
    }
}
