//! Writes under way through a cache layer, for the reads that overlap them. A read sent
//! before a write of its key can be answered after it, with the version before the write;
//! and some servers (s3s-fs 0.14: it opens the data file, then reads the ETag from a file of
//! its own) answer a read that overlaps a put with the bytes of one version and the tag of
//! the other. A cache keeps nothing such a read brought: neither its version as the current
//! one nor its bytes under its tag; and a read of bytes asks again once the writes it
//! overlapped are done (`writes_done`), so that its caller is not handed such an answer.
//!
//! Keys are counted in stripes (by hash): a write makes only the reads of keys in its stripe
//! count as overlapping; a write of a whole directory, every read.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

const STRIPES: usize = 256;

#[derive(Default)]
struct Stripe {
    started: AtomicU64,
    ended: AtomicU64,
    /// Told at the end of each write.
    ends: tokio::sync::Notify,
}

pub struct WriteWatch {
    stripes: Box<[Stripe]>,
}

/// A read's start: its key's stripe and the writes that had ended in it by then.
pub struct ReadStart {
    stripe: usize,
    ended: u64,
}

/// A listing's start: the writes that had ended in every stripe by then.
pub struct ListingStart {
    ended: Box<[u64]>,
}

/// A write under way until dropped (also when its future is dropped half way).
pub struct Writing<'a> {
    watch: &'a WriteWatch,
    stripes: Vec<usize>,
}

impl Default for WriteWatch {
    fn default() -> Self {
        WriteWatch { stripes: (0..STRIPES).map(|_| Stripe::default()).collect() }
    }
}

impl ListingStart {
    /// The listing's start as a read of `key` would have taken it.
    pub fn of(&self, key: &str) -> ReadStart {
        let stripe = WriteWatch::stripe_of(key);
        ReadStart { stripe, ended: self.ended[stripe] }
    }
}

impl WriteWatch {
    fn stripe_of(key: &str) -> usize {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        (h.finish() % STRIPES as u64) as usize
    }

    /// Before a request about `key` is sent.
    pub fn read_starts(&self, key: &str) -> ReadStart {
        let stripe = Self::stripe_of(key);
        ReadStart { stripe, ended: self.stripes[stripe].ended.load(SeqCst) }
    }

    /// Once its answer is in: whether a write of its stripe was under way at any time since
    /// `start` (then nothing of the answer may be kept).
    pub fn overlapped(&self, start: &ReadStart) -> bool {
        let s = &self.stripes[start.stripe];
        let started = s.started.load(SeqCst);
        let ended = s.ended.load(SeqCst);
        started != ended || ended != start.ended
    }

    /// Once the writes of `start`'s stripe under way now have ended (as many as have started
    /// by now: a stream of later writes does not keep the caller waiting).
    pub async fn writes_done(&self, start: &ReadStart) {
        let s = &self.stripes[start.stripe];
        let target = s.started.load(SeqCst);
        loop {
            let ends = s.ends.notified();
            tokio::pin!(ends);
            ends.as_mut().enable();
            if s.ended.load(SeqCst) >= target {
                return;
            }
            ends.await;
        }
    }

    /// Before a listing is sent.
    pub fn listing_starts(&self) -> ListingStart {
        ListingStart { ended: self.stripes.iter().map(|s| s.ended.load(SeqCst)).collect() }
    }

    /// A write of each of `keys`, under way until the guard drops.
    pub fn writing(&self, keys: &[&str]) -> Writing<'_> {
        self.start(keys.iter().map(|k| Self::stripe_of(k)).collect())
    }

    /// A write of a whole directory (any key may change), under way until the guard drops.
    pub fn writing_all(&self) -> Writing<'_> {
        self.start((0..STRIPES).collect())
    }

    fn start(&self, stripes: Vec<usize>) -> Writing<'_> {
        for &i in &stripes {
            self.stripes[i].started.fetch_add(1, SeqCst);
        }
        Writing { watch: self, stripes }
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        for &i in &self.stripes {
            let s = &self.watch.stripes[i];
            s.ended.fetch_add(1, SeqCst);
            s.ends.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_waits_for_the_writes_under_way_when_it_asks() {
        let w = std::sync::Arc::new(WriteWatch::default());
        let start = w.read_starts("a");
        w.writes_done(&start).await; // none under way
        let writing = w.writing(&["a"]);
        let waiting = tokio::spawn({
            let w = w.clone();
            async move { w.writes_done(&w.read_starts("a")).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "the write is under way");
        drop(writing);
        waiting.await.unwrap();
    }

    #[test]
    fn a_read_overlaps_the_writes_of_its_key_under_way_or_ended_since_it_started() {
        let w = WriteWatch::default();
        let before = w.read_starts("a");
        assert!(!w.overlapped(&before));
        let writing = w.writing(&["a"]);
        let during = w.read_starts("a");
        assert!(w.overlapped(&before) && w.overlapped(&during));
        drop(writing);
        assert!(w.overlapped(&before) && w.overlapped(&during), "ended since they started");
        assert!(!w.overlapped(&w.read_starts("a")), "a read after the write");
        let other = (0..1000)
            .map(|i| format!("k{i}"))
            .find(|k| WriteWatch::stripe_of(k) != WriteWatch::stripe_of("a"));
        let other = other.expect("a key in another stripe");
        let read = w.read_starts(&other);
        drop(w.writing(&["a"]));
        assert!(!w.overlapped(&read), "a write of another stripe");
        let listing = w.listing_starts();
        drop(w.writing(&["a"]));
        assert!(w.overlapped(&listing.of("a")));
        assert!(!w.overlapped(&listing.of(&other)));
        drop(w.writing_all());
        assert!(w.overlapped(&read), "a directory's write");
    }
}
