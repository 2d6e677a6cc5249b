//! Which paths this mount changed (write-back, unlink, rename, mkdir, rmdir) while a lookup or
//! listing was asking the store. The store's answer may predate the change; cached, or handed to
//! the kernel as attributes, it would bring back the old size or a deleted name (and the kernel
//! cuts reads at the size it was told). So a lookup or listing takes a `Watch` before it asks,
//! and afterwards asks the log which of its paths changed meanwhile, to answer those again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// Past this many entries, entries no running watch can need are dropped.
const PRUNE_AT: usize = 1024;

#[derive(Default)]
pub struct ChangeLog {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Number of the last change.
    seq: u64,
    /// Path -> number of its last change.
    changed: HashMap<String, u64>,
    /// Start numbers of the watches running now -> how many started there.
    watching: BTreeMap<u64, usize>,
}

/// A lookup or listing in progress; changes numbered above `start` happened during it.
pub struct Watch {
    log: Arc<ChangeLog>,
    start: u64,
}

impl ChangeLog {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        crate::locks::lock(&self.inner)
    }

    /// `path` (a file, or a directory with everything below it) changed through the mount.
    pub fn note(&self, path: &str) {
        let mut inner = self.lock();
        inner.seq += 1;
        let seq = inner.seq;
        inner.changed.insert(path.to_string(), seq);
        if inner.changed.len() > PRUNE_AT {
            // Only changes after the oldest running watch's start can still matter.
            let oldest = inner.watching.keys().next().copied().unwrap_or(seq);
            inner.changed.retain(|_, s| *s > oldest);
        }
    }

    pub fn watch(self: &Arc<Self>) -> Watch {
        let mut inner = self.lock();
        let start = inner.seq;
        *inner.watching.entry(start).or_default() += 1;
        Watch { log: self.clone(), start }
    }
}

impl Watch {
    /// Whether nothing at all changed through the mount since the watch began: then no path
    /// did, and a listing can skip asking per entry.
    pub fn quiet(&self) -> bool {
        self.log.lock().seq == self.start
    }

    /// Whether `path`, or a directory above it, changed since the watch began.
    pub fn changed(&self, path: &str) -> bool {
        let inner = self.log.lock();
        if inner.changed.is_empty() {
            return false;
        }
        let after = |p: &str| inner.changed.get(p).is_some_and(|&s| s > self.start);
        after(path) || path.match_indices('/').any(|(i, _)| after(&path[..i]))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut inner = self.log.lock();
        if let Some(n) = inner.watching.get_mut(&self.start) {
            *n -= 1;
            if *n == 0 {
                inner.watching.remove(&self.start);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_sees_changes_after_its_start_to_a_path_or_its_directories() {
        let log = Arc::new(ChangeLog::default());
        log.note("d/a");
        let w = log.watch();
        assert!(!w.changed("d/a"), "changed before the watch began");
        log.note("d/b");
        log.note("x");
        assert!(w.changed("d/b"));
        assert!(w.changed("x/y/z"), "a directory above it changed");
        assert!(!w.changed("d/a") && !w.changed("d") && !w.changed("xy"));
    }

    #[test]
    fn pruning_keeps_what_running_watches_need() {
        let log = Arc::new(ChangeLog::default());
        let w = log.watch();
        for i in 0..3 * PRUNE_AT {
            log.note(&format!("k{i}"));
        }
        assert!(w.changed("k0"), "pruned a change a running watch needs");
        drop(w);
        for i in 0..PRUNE_AT + 1 {
            log.note(&format!("m{i}"));
        }
        let inner = log.lock();
        assert!(inner.changed.len() <= PRUNE_AT + 1, "{} entries kept", inner.changed.len());
        assert!(inner.watching.is_empty());
    }
}
