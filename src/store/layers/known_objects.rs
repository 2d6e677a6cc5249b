//! The object versions a disk cache knows (`disk_cache/`), with when each was seen: an LRU
//! bounded by count, indexed by name as well, so that the objects of one directory are found
//! without a walk over every key (a listing page confirms them together).

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::time::SystemTime;

use lru::LruCache;

use crate::store::ObjectMeta;

/// An object's metadata and when the store said it (wall clock: an earlier daemon's too).
pub type Seen = (ObjectMeta, SystemTime);

pub struct KnownObjects {
    by_use: LruCache<String, Seen>,
    /// The same keys, sorted.
    names: BTreeSet<String>,
}

impl KnownObjects {
    pub fn new(cap: NonZeroUsize) -> Self {
        KnownObjects { by_use: LruCache::new(cap), names: BTreeSet::new() }
    }

    /// `key`'s entry, refreshing its place in the LRU order.
    pub fn get(&mut self, key: &str) -> Option<&Seen> {
        self.by_use.get(key)
    }

    pub fn peek(&self, key: &str) -> Option<&Seen> {
        self.by_use.peek(key)
    }

    /// Keep `seen` for `key`; the least recently used entry goes when full.
    pub fn put(&mut self, key: String, seen: Seen) {
        if let Some((gone, _)) = self.by_use.push(key.clone(), seen) {
            if gone != key {
                self.names.remove(&gone);
            }
        }
        self.names.insert(key);
    }

    pub fn pop(&mut self, key: &str) -> Option<Seen> {
        self.names.remove(key);
        self.by_use.pop(key)
    }

    /// The keys below `dir/` at any depth.
    pub fn keys_below(&self, dir: &str) -> Vec<String> {
        let from = format!("{dir}/");
        self.names.range(from.clone()..).take_while(|k| k.starts_with(&from)).cloned().collect()
    }

    /// Up to `max` keys directly in `dir` (`""`: the root) whose names sort after `after`, in
    /// name order, with their entries; the subdirectories' keys are stepped over, not walked.
    pub fn in_dir(&self, dir: &str, after: &str, max: usize) -> Vec<(String, Seen)> {
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let mut out = Vec::new();
        // "\0" sorts first: every name after `after`, and `after` itself not.
        let mut from = if after.is_empty() { prefix.clone() } else { format!("{prefix}{after}\0") };
        while out.len() < max {
            let Some(key) = self.names.range(from.clone()..).next() else { break };
            let Some(rest) = key.strip_prefix(&prefix) else { break };
            match rest.find('/') {
                // A subdirectory: on past every key below it ('0' follows '/').
                Some(i) => from = format!("{prefix}{}0", &rest[..i]),
                None => {
                    if let Some(seen) = self.by_use.peek(key) {
                        out.push((key.clone(), seen.clone()));
                    }
                    from = format!("{key}\0");
                }
            }
        }
        out
    }
}

impl KnownObjects {
    /// The first key known below directory `dir` (at any depth).
    pub fn first_key_below(&self, dir: &str) -> Option<String> {
        let from = format!("{dir}/");
        self.names.range(from.clone()..).next().filter(|k| k.starts_with(&from)).cloned()
    }

    /// For each of up to `max` subdirectories of `dir` whose names sort after `after`, in
    /// name order, the first key known below it (at any depth).
    pub fn first_keys_of_dirs_after(&self, dir: &str, after: &str, max: usize) -> Vec<String> {
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let mut out = Vec::new();
        // Past `after` and every key below it ('0' follows '/').
        let mut from = format!("{prefix}{after}0");
        while out.len() < max {
            let Some(key) = self.names.range(from.clone()..).next() else { break };
            let Some(rest) = key.strip_prefix(&prefix) else { break };
            match rest.find('/') {
                Some(i) => {
                    out.push(key.clone());
                    from = format!("{prefix}{}0", &rest[..i]);
                }
                None => from = format!("{key}\0"),
            }
        }
        out
    }

    /// The first of the run of keys directly in `dir` just before `key` (in name order) that
    /// all pass `keep`, at most `max` of them; `key` when the one before it does not pass.
    pub fn run_start(
        &self,
        dir: &str,
        key: &str,
        max: usize,
        keep: impl Fn(&str, &Seen) -> bool,
    ) -> String {
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let mut first = key.to_string();
        let mut below = key.to_string();
        for _ in 0..max {
            let Some(k) = self.names.range(..below.clone()).next_back() else { break };
            let Some(rest) = k.strip_prefix(&prefix) else { break };
            if let Some(i) = rest.find('/') {
                // A subdirectory's key: on before all of that subdirectory.
                below = format!("{prefix}{}/", &rest[..i]);
                continue;
            }
            match self.by_use.peek(k) {
                Some(seen) if keep(k, seen) => first = k.clone(),
                _ => break,
            }
            below = k.clone();
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn seen(version: &str) -> Seen {
        (
            ObjectMeta { size: 1, modified: UNIX_EPOCH, version: version.into(), perms: None },
            UNIX_EPOCH,
        )
    }

    fn names(found: &[(String, Seen)]) -> Vec<&str> {
        found.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn a_directory_holds_its_own_keys_only() {
        let mut k = KnownObjects::new(NonZeroUsize::new(100).unwrap());
        for key in ["a/zarr.json", "a/c/0/0", "a/c/0/1", "a/c/1/0", "a/c.x", "a/d", "ab/x", "top"] {
            k.put(key.into(), seen(key));
        }
        assert_eq!(names(&k.in_dir("a", "", 10)), ["a/c.x", "a/d", "a/zarr.json"]);
        assert_eq!(names(&k.in_dir("a/c/0", "", 10)), ["a/c/0/0", "a/c/0/1"]);
        assert_eq!(names(&k.in_dir("a", "", 2)), ["a/c.x", "a/d"]);
        assert_eq!(names(&k.in_dir("a", "c", 10)), ["a/c.x", "a/d", "a/zarr.json"]);
        assert_eq!(names(&k.in_dir("a", "c.x", 10)), ["a/d", "a/zarr.json"]);
        assert_eq!(names(&k.in_dir("a", "d", 10)), ["a/zarr.json"]);
        assert_eq!(names(&k.in_dir("", "", 10)), ["top"]);
        assert!(k.in_dir("a/c", "", 10).is_empty());
        assert_eq!(k.in_dir("a/c/0", "", 10)[1].1 .0.version, "a/c/0/1");
        assert_eq!(k.keys_below("a/c"), ["a/c/0/0", "a/c/0/1", "a/c/1/0"]);
        k.pop("a/c/0/0");
        assert_eq!(names(&k.in_dir("a/c/0", "", 10)), ["a/c/0/1"]);
    }

    #[test]
    fn the_directories_after_one_by_their_first_keys() {
        let mut k = KnownObjects::new(NonZeroUsize::new(100).unwrap());
        let keys =
            ["a/c/0/0", "a/c/0/1", "a/c/1/0", "a/c/10/5", "a/c/2/3/0", "a/c/x", "a/d/0", "b/0"];
        for key in keys {
            k.put(key.into(), seen(key));
        }
        assert_eq!(
            k.first_keys_of_dirs_after("a/c", "0", 10),
            ["a/c/1/0", "a/c/10/5", "a/c/2/3/0"]
        );
        assert_eq!(k.first_keys_of_dirs_after("a/c", "0", 2), ["a/c/1/0", "a/c/10/5"]);
        assert_eq!(k.first_keys_of_dirs_after("a/c", "10", 10), ["a/c/2/3/0"]);
        assert!(k.first_keys_of_dirs_after("a/c", "2", 10).is_empty(), "a file is no directory");
        assert_eq!(k.first_keys_of_dirs_after("a", "c", 10), ["a/d/0"]);
        assert_eq!(k.first_keys_of_dirs_after("", "a", 10), ["b/0"]);
        assert_eq!(k.first_key_below("a/c/2").as_deref(), Some("a/c/2/3/0"));
        assert_eq!(k.first_key_below("a/c/1").as_deref(), Some("a/c/1/0"), "not a/c/10");
        assert_eq!(k.first_key_below("a/c/3"), None);
    }

    #[test]
    fn a_run_of_keys_before_one() {
        let mut k = KnownObjects::new(NonZeroUsize::new(100).unwrap());
        for key in ["a/0", "a/1", "a/2", "a/2x/0", "a/2x/1", "a/3", "a/4", "b"] {
            k.put(key.into(), seen(if key == "a/1" { "fresh" } else { "stale" }));
        }
        let stale = |_: &str, s: &Seen| s.0.version == "stale";
        assert_eq!(k.run_start("a", "a/4", 10, stale), "a/2", "a/1 ends the run");
        assert_eq!(k.run_start("a", "a/4", 1, stale), "a/3");
        assert_eq!(k.run_start("a", "a/2", 10, stale), "a/2");
        assert_eq!(k.run_start("a", "a/0", 10, stale), "a/0");
        assert_eq!(k.run_start("a", "a/4", 10, |_, _| true), "a/0");
        assert_eq!(
            k.run_start("", "b", 10, |_, _| true),
            "b",
            "the keys below a/ are not the root's"
        );
    }

    #[test]
    fn the_index_follows_evictions() {
        let mut k = KnownObjects::new(NonZeroUsize::new(2).unwrap());
        k.put("d/x".into(), seen("1"));
        k.put("d/y".into(), seen("1"));
        k.get("d/x");
        k.put("d/y".into(), seen("2")); // replaced, not evicted
        k.put("d/z".into(), seen("1")); // evicts d/x
        assert_eq!(names(&k.in_dir("d", "", 10)), ["d/y", "d/z"]);
        assert_eq!(k.peek("d/y").unwrap().0.version, "2");
        assert!(k.peek("d/x").is_none());
    }
}
