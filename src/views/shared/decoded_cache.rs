//! Decoded chunks kept in memory, so the many small reads the kernel makes of one chunk file
//! decode it once. Keys name a stored chunk *version*, so entries never go stale; the LRU is
//! bounded by bytes, and concurrent readers of one chunk share one decode.
//!
//! Drop-behind: readers say what they read of an entry (`note_read`); once the reads have
//! covered its last byte and as much as the file holds of it, it leaves, so sequential readers
//! do not fill the cache. Counting, not the last byte alone, keeps an entry for the reads of
//! its earlier bytes that arrive after the last one (the kernel's read-ahead sends reads
//! concurrently, and they finish in any order).

use std::future::Future;

use bytes::Bytes;

use crate::flight_lru::FlightLru;
use crate::views::shared::error::{FsError, FsResult};

pub struct DecodedCache {
    cache: FlightLru<Held, Bytes, FsError>,
}

/// An entry, and what readers have read of it.
struct Held {
    bytes: Bytes,
    /// Units (bytes or elements, the reader's choice) read of it.
    read: u64,
    /// Whether a read covered its last unit.
    end_read: bool,
}

impl DecodedCache {
    pub fn new(budget_bytes: usize) -> Self {
        let metrics = crate::metrics::global().cache(crate::metrics::CacheKind::Decoded);
        DecodedCache { cache: FlightLru::new(budget_bytes as u64, metrics) }
    }

    /// The cached value for `key`, or `load()`'s, shared with everyone asking meanwhile.
    pub async fn get_or_load<F, Fut>(&self, key: &str, load: F) -> FsResult<Bytes>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = FsResult<Bytes>>,
    {
        if let Some(bytes) = self.cache.get_with(key, |h| h.bytes.clone()) {
            self.cache.hit();
            return Ok(bytes);
        }
        self.cache.miss();
        // Held bytes count the key too: many tiny chunks must not exceed the budget unseen.
        let keep = |b: &Bytes| {
            let held = Held { bytes: b.clone(), read: 0, end_read: false };
            Some((held, (b.len() + key.len()) as u64))
        };
        self.cache.load(key, load, keep).await
    }

    /// A reader read `units` more of entry `key`, of `total` the file holds (`last`: up to its
    /// last); the entry leaves once its last unit and `total` units were read (a decode of it
    /// under way goes on, and is kept when done). Nothing for an entry not held.
    pub fn note_read(&self, key: &str, units: u64, total: u64, last: bool) {
        let done = self.cache.peek_with(key, |h| {
            h.read = h.read.saturating_add(units);
            h.end_read |= last;
            h.end_read && h.read >= total
        });
        if done == Some(true) {
            self.cache.forget(key);
        }
    }

    #[cfg(test)]
    pub fn cached_bytes(&self) -> usize {
        self.cache.bytes() as usize
    }

    /// Entries held now.
    #[cfg(test)]
    pub fn entries(&self) -> usize {
        self.cache.len()
    }

    #[cfg(test)]
    pub fn holds(&self, key: &str) -> bool {
        self.cache.contains(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
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
