//! The one cache of values trusted for a fixed time (the metadata TTL): an LRU bounded by
//! entry count whose entries answer only while younger than the TTL. The namespaces keep what
//! each directory is (read from its metadata documents) in one; byte-bounded caches of fetched
//! data with single-flight loads are `flight_lru`.

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::locks::lock;

pub struct TtlCache<V> {
    ttl: Duration,
    entries: Mutex<LruCache<String, (V, Instant)>>,
}

impl<V: Clone> TtlCache<V> {
    /// At most `capacity` entries (at least one), each trusted for `ttl`.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        TtlCache { ttl, entries: Mutex::new(LruCache::new(capacity)) }
    }

    /// The value kept for `key`, if it is younger than the TTL.
    pub fn get(&self, key: &str) -> Option<V> {
        match lock(&self.entries).get(key) {
            Some((value, at)) if crate::clock::since(*at) < self.ttl => Some(value.clone()),
            _ => None,
        }
    }

    /// Keep `value` for `key` from now on (replacing what was kept).
    pub fn put(&self, key: String, value: V) {
        lock(&self.entries).put(key, (value, crate::clock::now()));
    }

    /// Forget `key` (it changed).
    pub fn forget(&self, key: &str) {
        lock(&self.entries).pop(key);
    }

    /// Forget everything (e.g. a directory moved, and with it every path below it).
    pub fn clear(&self) {
        lock(&self.entries).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_while_fresh() {
        let c = TtlCache::new(4, Duration::from_secs(3600));
        assert_eq!(c.get("a"), None);
        c.put("a".into(), 1);
        assert_eq!(c.get("a"), Some(1));
        c.put("a".into(), 2);
        assert_eq!(c.get("a"), Some(2));
        c.forget("a");
        assert_eq!(c.get("a"), None);
        c.put("a".into(), 3);
        c.put("b".into(), 4);
        c.clear();
        assert_eq!((c.get("a"), c.get("b")), (None, None));
    }

    #[tokio::test(start_paused = true)]
    async fn expired_entries_do_not_answer() {
        let c = TtlCache::new(4, Duration::ZERO);
        c.put("a".into(), 1);
        assert_eq!(c.get("a"), None);
        let c = TtlCache::new(4, Duration::from_millis(20));
        c.put("a".into(), 1);
        tokio::time::advance(Duration::from_millis(19)).await;
        assert_eq!(c.get("a"), Some(1));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(c.get("a"), None);
    }

    #[test]
    fn least_recently_used_leaves_first() {
        let c = TtlCache::new(2, Duration::from_secs(3600));
        c.put("a".into(), 1);
        c.put("b".into(), 2);
        assert_eq!(c.get("a"), Some(1)); // `b` is now the least recently used
        c.put("c".into(), 3);
        assert_eq!((c.get("a"), c.get("b"), c.get("c")), (Some(1), None, Some(3)));
        let tiny = TtlCache::new(0, Duration::from_secs(3600));
        tiny.put("a".into(), 1);
        assert_eq!(tiny.get("a"), Some(1), "a capacity of 0 keeps one entry");
    }
}
