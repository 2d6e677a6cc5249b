//! Recent walks of one view, by URL, kept for the filesystem's metadata TTL: a request for a
//! path walked a moment ago skips its lookups (one per component) and forgets, as a mount's
//! kernel skips them with its dentry cache. Only walks that led to a successful open or
//! listing are kept, and the handler walks again, uncached, whenever a kept walk leads to a
//! failure: a kept walk can make an answer faster, never different. The walks hold their
//! inodes until they leave (expired, or pushed out of the `CAPACITY` most recent ones).

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;

use super::walk::Walked;
use crate::locks::lock;

/// Walks kept per view: each holds an inode per component in the filesystem's table.
const CAPACITY: usize = 4096;

pub struct Walks {
    ttl: Duration,
    kept: Mutex<LruCache<String, (Arc<Walked>, Instant)>>,
}

impl Walks {
    /// Walks kept for `ttl` (the filesystem's metadata TTL; zero keeps none).
    pub fn new(ttl: Duration) -> Self {
        let capacity = NonZeroUsize::new(CAPACITY).expect("nonzero");
        Walks { ttl, kept: Mutex::new(LruCache::new(capacity)) }
    }

    /// The walk to `url` kept within the TTL, if any.
    pub fn get(&self, url: &str) -> Option<Arc<Walked>> {
        let mut kept = lock(&self.kept);
        // `peek`, not `get`: a walk lives for the metadata TTL whatever its use, and moving it
        // to the front on every request would write the list's links from both HTTP threads.
        let found =
            kept.peek(url).map(|(walked, at)| (at.elapsed() < self.ttl).then(|| walked.clone()));
        match found {
            Some(Some(walked)) => Some(walked),
            Some(None) => {
                // Forgotten outside the lock: the drop calls into the filesystem.
                let expired = kept.pop(url);
                drop(kept);
                drop(expired);
                None
            }
            None => None,
        }
    }

    /// Keep `walked`, the walk to `url` that was just opened or listed.
    pub fn keep(&self, url: &str, walked: Arc<Walked>) {
        if self.ttl.is_zero() {
            return;
        }
        let pushed_out = lock(&self.kept).push(url.to_string(), (walked, Instant::now()));
        drop(pushed_out);
    }

    /// Drop the walk to `url`: it led to a failure, which a fresh walk must confirm.
    pub fn drop_walk(&self, url: &str) {
        let gone = lock(&self.kept).pop(url);
        drop(gone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{FsConfig, ZarrFs};
    use crate::perms::ShownPerms;
    use crate::serve::walk::walk;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::prelude::*;
    use crate::views::raw::namespace::RawNamespace;

    async fn fs_with_a_file(ttl: Duration) -> Arc<ZarrFs> {
        let store = Arc::new(MemoryStore::new());
        store.put("a/b/c", bytes::Bytes::from_static(b"chunk")).await.unwrap();
        let cfg = FsConfig {
            metadata_ttl: ttl,
            read_only: true,
            passthrough: false,
            perms: ShownPerms::of_this_process(),
        };
        Arc::new(ZarrFs::new(Arc::new(RawNamespace::new(store)), cfg))
    }

    fn path(s: &str) -> Vec<String> {
        s.split('/').map(String::from).collect()
    }

    /// A kept walk holds its inodes; once it leaves (dropped, or expired and asked for), they
    /// are forgotten: the table holds only the root again.
    #[tokio::test]
    async fn kept_walks_hold_their_inodes_until_they_leave() {
        let fs = fs_with_a_file(Duration::from_secs(60)).await;
        let walks = Walks::new(Duration::from_secs(60));
        let walked = Arc::new(walk(&fs, &path("a/b/c")).await.unwrap());
        let ino = walked.attr.ino;
        walks.keep("/raw/a/b/c", walked);
        assert_eq!(fs.gauges().known_inodes, 4, "the root and three components");
        assert_eq!(walks.get("/raw/a/b/c").map(|w| w.attr.ino), Some(ino));
        assert!(walks.get("/raw/a/b").is_none());
        walks.drop_walk("/raw/a/b/c");
        assert!(walks.get("/raw/a/b/c").is_none());
        assert_eq!(fs.gauges().known_inodes, 1);

        let short = Walks::new(Duration::from_millis(20));
        short.keep("/raw/a/b/c", Arc::new(walk(&fs, &path("a/b/c")).await.unwrap()));
        std::thread::sleep(Duration::from_millis(30));
        assert!(short.get("/raw/a/b/c").is_none(), "kept past the TTL");
        assert_eq!(fs.gauges().known_inodes, 1);
    }

    /// Without a metadata TTL nothing is kept: every request walks.
    #[tokio::test]
    async fn a_zero_ttl_keeps_nothing() {
        let fs = fs_with_a_file(Duration::ZERO).await;
        let walks = Walks::new(Duration::ZERO);
        walks.keep("/raw/a/b/c", Arc::new(walk(&fs, &path("a/b/c")).await.unwrap()));
        assert!(walks.get("/raw/a/b/c").is_none());
        assert_eq!(fs.gauges().known_inodes, 1);
    }
}
