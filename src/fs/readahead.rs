//! Sequential read-ahead for one open file: a read that continues where the previous one ended
//! fetches a window that grows fourfold each time (up to `MAX_WINDOW`), and later reads are served
//! from it; a random read fetches just what was asked. This turns a stream of 128 KiB kernel
//! reads of a large remote object into a few large ranged GETs.
//!
//! Every window is paid for from one `Budget` per mount, so the memory held in read-ahead stays
//! bounded however many files are read at once: when the budget is spent, reads fetch only what
//! they ask for until other files give their windows back.
//!
//! `read` (for files backed by store objects) also overlaps and splits: while one window is
//! being consumed the next one is already being fetched, and a window larger than `PART_SIZE`
//! is fetched as concurrent part requests (at most `MAX_WINDOW / PART_SIZE` per window), so a
//! sequential reader of a remote object keeps several requests in flight instead of one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;

use super::error::FsResult;

/// Fetch `len` bytes of the file at `offset` (fewer at its end).
pub type Fetcher = Arc<dyn Fn(u64, u64) -> BoxFuture<'static, FsResult<Bytes>> + Send + Sync>;

/// Windows larger than this are fetched as concurrent parts of this size.
pub const PART_SIZE: u64 = 8 << 20;

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
    /// The next window, being fetched in the background.
    pending: Option<Pending>,
}

#[derive(Debug)]
struct Pending {
    start: u64,
    len: u64,
    /// Bytes reserved from the budget for it.
    held: u64,
    task: tokio::task::JoinHandle<FsResult<Bytes>>,
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
        self.cancel_pending();
    }
}

/// `len` bytes at `offset`, in concurrent parts of `PART_SIZE` when larger.
async fn fetch_parts(fetch: &Fetcher, offset: u64, len: u64) -> FsResult<Bytes> {
    if len <= PART_SIZE {
        return fetch(offset, len).await;
    }
    let parts = (0..len.div_ceil(PART_SIZE)).map(|i| {
        let at = offset + i * PART_SIZE;
        fetch(at, PART_SIZE.min(offset + len - at))
    });
    let parts = futures::future::try_join_all(parts).await?;
    let mut out = BytesMut::with_capacity(len as usize);
    for p in parts {
        let short = (p.len() as u64) < PART_SIZE;
        out.extend_from_slice(&p);
        if short {
            break; // the end of the file
        }
    }
    Ok(out.freeze())
}

impl ReadAhead {
    pub fn new(budget: Arc<Budget>) -> Self {
        ReadAhead {
            start: 0,
            data: Bytes::new(),
            next: 0,
            window: 0,
            budget,
            held: 0,
            unread: 0,
            pending: None,
        }
    }

    fn cancel_pending(&mut self) {
        if let Some(p) = self.pending.take() {
            p.task.abort();
            self.budget.release(p.held);
        }
    }

    /// A read of `offset .. offset + size` of a file of `file_size` bytes: from the current
    /// window, else from the next one (waiting for its fetch), else fetched now; then the
    /// window after is started in the background when the reader is sequential.
    pub async fn read(
        &mut self,
        offset: u64,
        size: u32,
        file_size: u64,
        fetch: &Fetcher,
    ) -> FsResult<Bytes> {
        if let Some(data) = self.take(offset, size, file_size) {
            self.fetch_next(file_size, fetch);
            return Ok(data);
        }
        if let Some(p) = self.pending.take() {
            if offset >= p.start && offset < p.start + p.len {
                match p.task.await {
                    Ok(Ok(data)) => {
                        self.clear();
                        self.start = p.start;
                        let keep = (data.len() as u64).min(p.held);
                        self.budget.release(p.held - keep);
                        self.held = keep;
                        self.unread = data.len() as u64;
                        metrics().fetched.inc_by(self.unread);
                        self.data = data;
                        if let Some(answer) = self.take(offset, size, file_size) {
                            self.fetch_next(file_size, fetch);
                            return Ok(answer);
                        }
                    }
                    // A failed read-ahead is retried as an ordinary read below.
                    _ => self.budget.release(p.held),
                }
            } else {
                p.task.abort();
                self.budget.release(p.held);
            }
        }
        let (from, len) = self.plan(offset, size, file_size);
        let fetched = fetch_parts(fetch, from, len.max(size as u64)).await?;
        let answer = self.fill(offset, size, fetched);
        self.fetch_next(file_size, fetch);
        Ok(answer)
    }

    /// A sequential reader: start fetching the window after the current one, from the budget.
    fn fetch_next(&mut self, file_size: u64, fetch: &Fetcher) {
        if self.pending.is_some() || self.window == 0 {
            return;
        }
        let start =
            if self.data.is_empty() { self.next } else { self.start + self.data.len() as u64 };
        let window = (self.window * 4).clamp(MIN_WINDOW, MAX_WINDOW);
        let len = window.min(file_size.saturating_sub(start));
        if len == 0 || !self.budget.try_reserve(len) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.budget.release(len);
            return;
        };
        self.window = window;
        let fetch = fetch.clone();
        let task = rt.spawn(async move { fetch_parts(&fetch, start, len).await });
        self.pending = Some(Pending { start, len, held: len, task });
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

    /// A fetcher over `file` that records (offset, len) and the most requests in flight.
    struct Remote {
        file: Bytes,
        calls: std::sync::Mutex<Vec<(u64, u64)>>,
        in_flight: AtomicU64,
        most: AtomicU64,
    }

    fn remote(file: Bytes, delay: std::time::Duration) -> (Arc<Remote>, Fetcher) {
        let r = Arc::new(Remote {
            file,
            calls: Default::default(),
            in_flight: AtomicU64::new(0),
            most: AtomicU64::new(0),
        });
        let rr = r.clone();
        let fetch: Fetcher = Arc::new(move |off, len| {
            let r = rr.clone();
            Box::pin(async move {
                r.calls.lock().unwrap().push((off, len));
                let now = r.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                r.most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                r.in_flight.fetch_sub(1, Ordering::SeqCst);
                let total = r.file.len() as u64;
                Ok(r.file.slice(off.min(total) as usize..(off + len).min(total) as usize))
            })
        });
        (r, fetch)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sequential_reads_overlap_and_split_large_windows() {
        let f = file(48 << 20);
        let (r, fetch) = remote(f.clone(), std::time::Duration::from_millis(20));
        let budget = Budget::new(DEFAULT_BUDGET);
        let mut ra = ReadAhead::new(budget.clone());
        let size = 128u32 << 10;
        for i in 0..(f.len() as u64 / size as u64) + 1 {
            let off = i * size as u64;
            let got = ra.read(off, size, f.len() as u64, &fetch).await.unwrap();
            let end = (off + size as u64).min(f.len() as u64) as usize;
            assert_eq!(got, f.slice(off as usize..end), "read at {off}");
            assert!(budget.used() <= DEFAULT_BUDGET);
            // Overlap: from the second read on, the window after the current one is always
            // on its way while the current one is consumed (until the end of the file).
            let covered =
                if ra.data.is_empty() { ra.next } else { ra.start + ra.data.len() as u64 };
            let next_end = ra.pending.as_ref().map(|p| p.start + p.len).unwrap_or(covered);
            if i >= 1 && next_end < f.len() as u64 {
                assert!(ra.pending.is_some(), "no next window after the read at {off}");
            }
        }
        let calls = r.calls.lock().unwrap().clone();
        assert!(calls.iter().all(|(_, len)| *len <= PART_SIZE), "{calls:?}");
        assert!(r.most.load(Ordering::SeqCst) >= 4, "parts and the next window in flight together");
        assert!(calls.len() >= 8, "48 MiB in parts of at most 8 MiB: {calls:?}");
        // Nothing was fetched twice.
        let fetched: u64 = calls.iter().map(|(_, l)| *l).sum();
        assert!(fetched <= f.len() as u64 + (size as u64), "{fetched} bytes fetched");
        drop(ra);
        assert_eq!(budget.used(), 0);
    }

    #[tokio::test]
    async fn a_jump_cancels_the_next_window_and_random_reads_fetch_only_what_is_asked() {
        let f = file(12 << 20);
        let (r, fetch) = remote(f.clone(), std::time::Duration::from_millis(5));
        let budget = Budget::new(DEFAULT_BUDGET);
        let mut ra = ReadAhead::new(budget.clone());
        for off in [0u64, 4096, 8192] {
            ra.read(off, 4096, f.len() as u64, &fetch).await.unwrap();
        }
        assert!(ra.pending.is_some(), "a sequential reader gets the next window started");
        let got = ra.read(10 << 20, 4096, f.len() as u64, &fetch).await.unwrap();
        assert_eq!(got, f.slice(10 << 20..(10 << 20) + 4096));
        assert!(ra.pending.is_none());
        r.calls.lock().unwrap().clear();
        for off in [3u64 << 20, 1 << 20, 11 << 20] {
            let got = ra.read(off, 4096, f.len() as u64, &fetch).await.unwrap();
            assert_eq!(got, f.slice(off as usize..off as usize + 4096));
        }
        assert_eq!(
            r.calls.lock().unwrap().clone(),
            vec![(3 << 20, 4096), (1 << 20, 4096), (11 << 20, 4096)]
        );
        assert_eq!(budget.used(), 0, "random reads hold nothing");
    }

    #[test]
    fn reads_at_and_past_the_end_are_short() {
        let f = file(1000);
        run(&f, 4096, &[0, 900, 1000, 5000]);
    }
}
