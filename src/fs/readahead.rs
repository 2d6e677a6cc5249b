//! Sequential read-ahead for one open file: a read that continues where the previous one ended
//! fetches a window that grows fourfold each time (up to `MAX_WINDOW`), and later reads are served
//! from it; a random read fetches just what was asked. This turns a stream of 128 KiB kernel
//! reads of a large remote object into a few large ranged GETs.
//!
//! Every window is paid for from one `Budget` per mount, so the memory held in read-ahead stays
//! bounded however many files are read at once: when the budget is spent, reads fetch only what
//! they ask for until other files give their windows back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

const MIN_WINDOW: u64 = 1 << 20;
const MAX_WINDOW: u64 = 32 << 20;
/// Default read-ahead memory of one mount.
pub const DEFAULT_BUDGET: u64 = 128 << 20;

/// Bytes of read-ahead held by all the files of a mount.
#[derive(Debug)]
pub struct Budget {
    used: AtomicU64,
    limit: u64,
}

impl Budget {
    pub fn new(limit: u64) -> Arc<Budget> {
        Arc::new(Budget { used: AtomicU64::new(0), limit })
    }

    /// Bytes held now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn try_reserve(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u + n <= self.limit).then_some(u + n)
            })
            .is_ok()
    }

    fn release(&self, n: u64) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

#[derive(Debug)]
pub struct ReadAhead {
    /// Bytes `start .. start + data.len()` of the file.
    start: u64,
    data: Bytes,
    /// Where the previous read ended.
    next: u64,
    window: u64,
    budget: Arc<Budget>,
    /// Bytes reserved from the budget (for `data`, or for a fetch in flight).
    held: u64,
    /// Bytes of `data` fetched ahead of the read that fetched them and not served since
    /// (for the used/wasted read-ahead series).
    unread: u64,
}

fn metrics() -> &'static crate::metrics::AheadMetrics {
    crate::metrics::global().ahead(crate::metrics::Ahead::ReadAhead)
}

impl Default for ReadAhead {
    /// A read-ahead with a budget of its own (for tests and single files).
    fn default() -> Self {
        ReadAhead::new(Budget::new(DEFAULT_BUDGET))
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.budget.release(self.held);
        metrics().wasted.inc_by(self.unread);
    }
}

impl ReadAhead {
    pub fn new(budget: Arc<Budget>) -> Self {
        ReadAhead { start: 0, data: Bytes::new(), next: 0, window: 0, budget, held: 0, unread: 0 }
    }

    /// Drop the buffer and give its bytes back to the budget.
    fn clear(&mut self) {
        self.data = Bytes::new();
        self.budget.release(std::mem::take(&mut self.held));
        metrics().wasted.inc_by(std::mem::take(&mut self.unread));
    }

    /// Serve `offset .. offset + size` from the buffer, if it holds all of it.
    pub fn take(&mut self, offset: u64, size: u32, file_size: u64) -> Option<Bytes> {
        let end = (offset + size as u64).min(file_size);
        let buf_end = self.start + self.data.len() as u64;
        if offset >= self.start && end <= buf_end && offset <= end {
            self.next = end;
            let from = (offset - self.start) as usize;
            let answer = self.data.slice(from..from + (end - offset) as usize);
            let used = (answer.len() as u64).min(self.unread);
            self.unread -= used;
            metrics().used.inc_by(used);
            if end == buf_end {
                self.clear(); // all of it was read: the memory goes back now, not at close
            }
            return Some(answer);
        }
        None
    }

    /// How much to fetch for a read the buffer could not serve: (offset, length).
    pub fn plan(&mut self, offset: u64, size: u32, file_size: u64) -> (u64, u64) {
        self.clear(); // the old window is replaced whatever comes back
        let sequential = offset == self.next && offset > 0;
        self.window = if sequential { (self.window * 4).clamp(MIN_WINDOW, MAX_WINDOW) } else { 0 };
        let remaining = file_size.saturating_sub(offset);
        let want = (size as u64).max(self.window).min(remaining);
        if want > size as u64 {
            if self.budget.try_reserve(want) {
                self.held = want;
            } else {
                return (offset, (size as u64).min(remaining)); // over budget: no read-ahead this time
            }
        }
        (offset, want)
    }

    /// Keep what was fetched and return the part the read asked for.
    pub fn fill(&mut self, offset: u64, size: u32, fetched: Bytes) -> Bytes {
        let n = (size as usize).min(fetched.len());
        let answer = fetched.slice(..n);
        self.next = offset + n as u64;
        if fetched.len() > n && self.held > 0 {
            self.start = offset;
            let keep = fetched.len() as u64;
            if keep < self.held {
                self.budget.release(self.held - keep);
                self.held = keep;
            }
            self.unread = (fetched.len() - n) as u64;
            metrics().fetched.inc_by(self.unread);
            self.data = fetched;
        } else {
            self.clear();
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(len: usize) -> Bytes {
        Bytes::from((0..len).map(|i| (i % 251) as u8).collect::<Vec<_>>())
    }

    /// Drive the read-ahead over `file` with reads of `size` at `offsets`; return the fetches.
    fn run(file: &Bytes, size: u32, offsets: &[u64]) -> Vec<(u64, u64)> {
        let mut ra = ReadAhead::default();
        let mut fetches = Vec::new();
        let total = file.len() as u64;
        for &off in offsets {
            let expect =
                file.slice(off.min(total) as usize..(off + size as u64).min(total) as usize);
            let got = match ra.take(off, size, total) {
                Some(b) => b,
                None => {
                    let (o, l) = ra.plan(off, size, total);
                    fetches.push((o, l));
                    ra.fill(
                        off,
                        size,
                        file.slice(o.min(total) as usize..(o + l).min(total) as usize),
                    )
                }
            };
            assert_eq!(got, expect, "read at {off}");
        }
        fetches
    }

    #[test]
    fn sequential_reads_fetch_growing_windows() {
        let f = file(8 << 20);
        let offsets: Vec<u64> = (0..64).map(|i| i * (128 << 10)).collect();
        let fetches = run(&f, 128 << 10, &offsets);
        assert!(fetches.len() <= 7, "{} fetches for 8 MiB: {fetches:?}", fetches.len());
        assert!(fetches.windows(2).all(|w| w[1].1 >= w[0].1 || w[1].0 + w[1].1 == f.len() as u64));
    }

    #[test]
    fn random_reads_fetch_only_what_is_asked() {
        let f = file(4 << 20);
        let fetches = run(&f, 4096, &[3 << 20, 1 << 20, 2 << 20, 5000]);
        assert_eq!(fetches, vec![(3 << 20, 4096), (1 << 20, 4096), (2 << 20, 4096), (5000, 4096)]);
    }

    #[test]
    fn windows_stay_within_the_budget_and_are_given_back() {
        let f = file(8 << 20);
        let budget = Budget::new(2 << 20);
        let offsets: Vec<u64> = (0..64).map(|i| i * (128 << 10)).collect();
        let mut a = ReadAhead::new(budget.clone());
        let mut b = ReadAhead::new(budget.clone());
        for &off in &offsets {
            for ra in [&mut a, &mut b] {
                let got = match ra.take(off, 128 << 10, f.len() as u64) {
                    Some(d) => d,
                    None => {
                        let (o, l) = ra.plan(off, 128 << 10, f.len() as u64);
                        ra.fill(off, 128 << 10, f.slice(o as usize..(o + l) as usize))
                    }
                };
                assert_eq!(got, f.slice(off as usize..off as usize + (128 << 10)));
                assert!(budget.used() <= 2 << 20, "{} bytes held", budget.used());
            }
        }
        drop(a);
        drop(b);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn reads_at_and_past_the_end_are_short() {
        let f = file(1000);
        run(&f, 4096, &[0, 900, 1000, 5000]);
    }
}
