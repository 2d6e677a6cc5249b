//! Directory trees dropped from the metadata cache without visiting its entries: a rename or
//! removal of a directory records the tree's path and the time, and a cached entry counts only
//! if neither its path nor an ancestor was dropped since it was cached. So the cost of the drop
//! is one insert, and each later cache hit checks one map entry per path component.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::store::split_key;

/// Most drops remembered within one TTL; past it the caller clears the whole cache instead.
const MAX_TREES: usize = 10_000;

pub struct DroppedTrees {
    ttl: Duration,
    at: HashMap<String, Instant>,
}

impl DroppedTrees {
    pub fn new(ttl: Duration) -> Self {
        DroppedTrees { ttl, at: HashMap::new() }
    }

    /// Record that everything at or below `path` is stale from now. Returns false when too
    /// many drops are remembered: the caller then clears its whole cache (and this record).
    #[must_use]
    pub fn drop_tree(&mut self, path: &str) -> bool {
        let now = crate::clock::now();
        if self.at.len() >= MAX_TREES {
            // Entries cached longer ago than the TTL are expired anyway: forget those drops.
            let ttl = self.ttl;
            self.at.retain(|_, at| now.duration_since(*at) < ttl);
            if self.at.len() >= MAX_TREES {
                self.at.clear();
                return false;
            }
        }
        self.at.insert(path.to_string(), now);
        true
    }

    /// Whether an entry for `path` cached at `cached_at` is still good.
    pub fn valid(&self, path: &str, cached_at: Instant) -> bool {
        if self.at.is_empty() {
            return true;
        }
        let mut p = path;
        loop {
            if self.at.get(p).is_some_and(|dropped| *dropped >= cached_at) {
                return false;
            }
            if p.is_empty() {
                return true;
            }
            p = split_key(p).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_drop_covers_the_tree_and_only_entries_cached_before_it() {
        let mut t = DroppedTrees::new(Duration::from_secs(60));
        let before = crate::clock::now();
        assert!(t.valid("a/b/c", before));
        assert!(t.drop_tree("a/b"));
        assert!(!t.valid("a/b", before));
        assert!(!t.valid("a/b/c/d", before));
        assert!(t.valid("a/bc", before), "a sibling with the same prefix");
        assert!(t.valid("a", before));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(t.valid("a/b/c", crate::clock::now()), "cached after the drop");
    }

    #[test]
    fn too_many_drops_ask_for_a_full_clear() {
        let mut t = DroppedTrees::new(Duration::from_secs(3600));
        for i in 0..MAX_TREES {
            assert!(t.drop_tree(&format!("d{i}")));
        }
        assert!(!t.drop_tree("one-more"));
        assert!(t.valid("d1/x", Instant::now() - Duration::from_secs(1)), "record cleared");
    }
}
