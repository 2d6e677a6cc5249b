//! Sequential read-ahead for one open file: a read that continues where the previous one ended
//! fetches a window that grows fourfold each time (up to `MAX_WINDOW`), and later reads are served
//! from it; a random read fetches just what was asked. This turns a stream of 128 KiB kernel
//! reads of a large remote object into a few large ranged GETs.
//!
//! Every window is paid for from one `Budget` per mount, so the memory held in read-ahead stays
//! bounded however many files are read at once: when the budget is spent, reads fetch only what
//! they ask for until other files give their windows back.
//!
//! `read` (for files backed by store objects) also overlaps and splits: a sequential reader
//! has a queue of parts (at most `PART_SIZE` each) fetched in the background ahead of it, kept
//! topped up to the window (up to `MAX_WINDOW` ahead of the reader) as it reads, so several
//! requests are in flight all the time instead of one window at a time. Each part is kept as
//! fetched (never copied into a larger buffer) and gives its budget back once read.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::future::BoxFuture;

/// Fetch `len` bytes of the file at `offset` (fewer at its end); `E` is the caller's error.
pub type Fetcher<E> = Arc<dyn Fn(u64, u64) -> BoxFuture<'static, Result<Bytes, E>> + Send + Sync>;

/// Windows larger than this are fetched as concurrent parts of this size.
pub const PART_SIZE: u64 = 8 << 20;

const MIN_WINDOW: u64 = 1 << 20;
/// A read that ends at most this far behind the reader is a straggler: the kernel sends its
/// read-ahead requests concurrently and they can reach us out of order, so such a read is
/// served on its own and the parts in flight are kept (treating it as a jump cancelled them
/// and fetched them again).
const STRAGGLER: u64 = 4 << 20;
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
pub struct ReadAhead<E> {
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
    /// The parts after `data` (or after `next` when it is empty), in file order and contiguous,
    /// fetched in the background.
    pending: VecDeque<Pending<E>>,
}

#[derive(Debug)]
struct Pending<E> {
    start: u64,
    len: u64,
    /// Bytes reserved from the budget for it.
    held: u64,
    task: tokio::task::JoinHandle<Result<Bytes, E>>,
}

fn metrics() -> &'static crate::metrics::AheadMetrics {
    crate::metrics::global().ahead(crate::metrics::Ahead::ReadAhead)
}

impl<E: Send + 'static> Default for ReadAhead<E> {
    /// A read-ahead with a budget of its own (for tests and single files).
    fn default() -> Self {
        ReadAhead::new(Budget::new(DEFAULT_BUDGET))
    }
}

impl<E> Drop for ReadAhead<E> {
    fn drop(&mut self) {
        self.budget.release(self.held);
        metrics().wasted.inc_by(self.unread);
        self.cancel_pending();
    }
}

/// The end of a fetch of up to `len` bytes at `offset`: cut back to a whole MiB when that
/// leaves something, so that fetches after the first start and end on MiB boundaries (a block
/// cache below keeps them whole, and no block is fetched by two of them).
fn aligned_end(offset: u64, len: u64, file_size: u64) -> u64 {
    let end = (offset + len).min(file_size);
    let cut = end / MIN_WINDOW * MIN_WINDOW;
    if end < file_size && cut > offset {
        cut
    } else {
        end
    }
}

/// `len` bytes at `offset`, in concurrent parts of `PART_SIZE` when larger.
async fn fetch_parts<E>(fetch: &Fetcher<E>, offset: u64, len: u64) -> Result<Bytes, E> {
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

impl<E> ReadAhead<E> {
    fn cancel_pending(&mut self) {
        for p in self.pending.drain(..) {
            p.task.abort();
            self.budget.release(p.held);
        }
    }
}

impl<E: Send + 'static> ReadAhead<E> {
    pub fn new(budget: Arc<Budget>) -> Self {
        ReadAhead {
            start: 0,
            data: Bytes::new(),
            next: 0,
            window: 0,
            budget,
            held: 0,
            unread: 0,
            pending: VecDeque::new(),
        }
    }

    /// A read of `offset .. offset + size` of a file of `file_size` bytes: from the current
    /// buffer and the parts fetched ahead (waiting for them), else fetched now; then, for a
    /// sequential reader, the parts ahead are topped up in the background.
    pub async fn read(
        &mut self,
        offset: u64,
        size: u32,
        file_size: u64,
        fetch: &Fetcher<E>,
    ) -> Result<Bytes, E> {
        let answer = match self.take(offset, size, file_size) {
            Some(data) => Some(data),
            None => self.read_parts(offset, size, file_size).await,
        };
        let answer = match answer {
            Some(a) => a,
            None if self.is_straggler(offset, size) => {
                let len = (size as u64).min(file_size.saturating_sub(offset));
                return fetch(offset, len).await;
            }
            None => {
                // Not ahead of us (a jump, or a part failed): the parts ahead are useless.
                self.cancel_pending();
                let (from, len) = self.plan(offset, size, file_size);
                let fetched = fetch_parts(fetch, from, len.max(size as u64)).await?;
                self.fill(offset, size, fetched)
            }
        };
        self.top_up(file_size, fetch);
        Ok(answer)
    }

    /// Just behind a reader with parts in flight (see `STRAGGLER`).
    fn is_straggler(&self, offset: u64, size: u32) -> bool {
        !self.pending.is_empty()
            && offset < self.next
            && self.next - (offset + size as u64).min(self.next) <= STRAGGLER
    }

    /// Serve a read that runs past the current buffer from the parts after it, each awaited in
    /// turn and then made the current buffer. `None` when the read does not continue into the
    /// parts, they do not reach its end, or one failed (the caller reads it directly). A read
    /// a little ahead of the reader (inside the first part: the kernel's concurrent reads
    /// arriving out of order) is served too; the bytes it skipped stay in the buffer for the
    /// read that comes late.
    async fn read_parts(&mut self, offset: u64, size: u32, file_size: u64) -> Option<Bytes> {
        let end = (offset + size as u64).min(file_size);
        let buf_end = self.start + self.data.len() as u64;
        let in_buffer = !self.data.is_empty() && offset >= self.start && offset < buf_end;
        let first = self.pending.front().map(|p| p.start..p.start + p.len)?;
        let covered = if self.data.is_empty() { self.next } else { buf_end };
        let at_parts = offset >= covered && first.start == covered && offset < first.end;
        let tail = self.pending.back().map(|p| p.start + p.len)?;
        if !(in_buffer || at_parts) || tail < end {
            return None;
        }
        let mut pieces = Vec::new();
        let mut pos = offset;
        if in_buffer {
            let piece = self.data.slice((offset - self.start) as usize..);
            pos = buf_end;
            self.consumed(piece.len() as u64);
            pieces.push(piece);
        }
        while pos < end {
            let p = self.pending.pop_front().expect("the parts reach the end of the read");
            match p.task.await {
                Ok(Ok(data)) => {
                    self.clear();
                    self.start = p.start;
                    let keep = (data.len() as u64).min(p.held);
                    self.budget.release(p.held - keep);
                    self.held = keep;
                    self.unread = data.len() as u64;
                    metrics().fetched.inc_by(self.unread);
                    let skip = pos - p.start; // 0 but for a read ahead of the reader
                    let n = (end - pos).min((data.len() as u64).saturating_sub(skip));
                    pieces.push(data.slice(skip as usize..(skip + n) as usize));
                    self.consumed(n);
                    let short = (data.len() as u64) < p.len;
                    self.data = data;
                    pos += n;
                    if short {
                        break; // the object ended early: a short read, as from the store
                    }
                }
                _ => {
                    // Retried as an ordinary read by the caller. (Bytes of the old buffer
                    // counted as used above are read again: the series may be off by one read.)
                    self.budget.release(p.held);
                    return None;
                }
            }
        }
        self.next = pos;
        if pos >= self.start + self.data.len() as u64 {
            self.clear();
        }
        Some(if pieces.len() == 1 {
            pieces.pop().expect("one piece")
        } else {
            let mut out = BytesMut::with_capacity(pieces.iter().map(Bytes::len).sum());
            for p in &pieces {
                out.extend_from_slice(p);
            }
            out.freeze()
        })
    }

    /// `n` bytes of the buffer were served.
    fn consumed(&mut self, n: u64) {
        let used = n.min(self.unread);
        self.unread -= used;
        metrics().used.inc_by(used);
    }

    /// A sequential reader: keep parts in flight up to the window ahead of it, the window
    /// growing fourfold with each part started (up to `MAX_WINDOW`), from the budget.
    fn top_up(&mut self, file_size: u64, fetch: &Fetcher<E>) {
        if self.window == 0 {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        let buf_end =
            if self.data.is_empty() { self.next } else { self.start + self.data.len() as u64 };
        let mut tail = self.pending.back().map_or(buf_end, |p| p.start + p.len);
        while tail.saturating_sub(self.next) < self.window && tail < file_size {
            let window = (self.window * 4).clamp(MIN_WINDOW, MAX_WINDOW);
            let len = aligned_end(tail, PART_SIZE.min(window), file_size) - tail;
            if !self.budget.try_reserve(len) {
                return;
            }
            self.window = window;
            let (fetch, start) = (fetch.clone(), tail);
            let task = rt.spawn(async move { fetch(start, len).await });
            self.pending.push_back(Pending { start, len, held: len, task });
            tail += len;
        }
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
            // A straggler served from the buffer does not move the reader back.
            self.next = if self.pending.is_empty() { end } else { self.next.max(end) };
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
        let want = if want > size as u64 {
            (aligned_end(offset, want, file_size) - offset).max(size as u64)
        } else {
            want
        };
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

    type ReadAhead = super::ReadAhead<&'static str>;
    type Fetcher = super::Fetcher<&'static str>;

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

    /// A backend whose every answer takes `delay` (on the tests' paused clock).
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

    #[tokio::test(start_paused = true)]
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
            let next_end = ra.pending.back().map(|p| p.start + p.len).unwrap_or(covered);
            if i >= 1 && next_end < f.len() as u64 {
                assert!(!ra.pending.is_empty(), "nothing ahead after the read at {off}");
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

    #[tokio::test(start_paused = true)]
    async fn a_jump_cancels_the_next_window_and_random_reads_fetch_only_what_is_asked() {
        let f = file(12 << 20);
        let (r, fetch) = remote(f.clone(), std::time::Duration::from_millis(5));
        let budget = Budget::new(DEFAULT_BUDGET);
        let mut ra = ReadAhead::new(budget.clone());
        for off in [0u64, 4096, 8192] {
            ra.read(off, 4096, f.len() as u64, &fetch).await.unwrap();
        }
        assert!(!ra.pending.is_empty(), "a sequential reader gets the next window started");
        let got = ra.read(10 << 20, 4096, f.len() as u64, &fetch).await.unwrap();
        assert_eq!(got, f.slice(10 << 20..(10 << 20) + 4096));
        assert!(ra.pending.is_empty());
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

    #[tokio::test(start_paused = true)]
    async fn parts_are_kept_topped_up_and_a_failed_part_is_read_again() {
        let f = file(24 << 20);
        let (r, good) = remote(f.clone(), std::time::Duration::from_millis(2));
        // The part over 12 MiB fails once (a background fetch that errors).
        let failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let fl = failed.clone();
        let fetch: Fetcher = Arc::new(move |off, len| {
            if off <= 12 << 20 && off + len > 12 << 20 && !fl.swap(true, Ordering::SeqCst) {
                return Box::pin(async { Err("not found") });
            }
            good(off, len)
        });
        let budget = Budget::new(DEFAULT_BUDGET);
        let mut ra = ReadAhead::new(budget.clone());
        // Odd-sized reads straddle part boundaries.
        let size = 300_000u32;
        let mut off = 0;
        while off < f.len() as u64 {
            let got = ra.read(off, size, f.len() as u64, &fetch).await.unwrap();
            let end = (off + size as u64).min(f.len() as u64) as usize;
            assert_eq!(got, f.slice(off as usize..end), "read at {off}");
            // Never more than the window ahead, plus the part being read and one more part.
            assert!(budget.used() <= MAX_WINDOW + 2 * PART_SIZE, "{} held", budget.used());
            off = end as u64;
        }
        assert!(failed.load(Ordering::SeqCst), "the failing part was asked for");
        assert!(r.most.load(Ordering::SeqCst) >= 3, "several parts in flight at once");
        drop(ra);
        assert_eq!(budget.used(), 0);
    }

    /// The kernel's concurrent read-ahead requests can arrive swapped: the parts in flight are
    /// kept (a swap used to look like a jump, cancelling them all and fetching them again).
    #[tokio::test(start_paused = true)]
    async fn reads_arriving_out_of_order_keep_the_parts_in_flight() {
        let f = file(48 << 20);
        let (r, fetch) = remote(f.clone(), std::time::Duration::from_millis(5));
        let budget = Budget::new(DEFAULT_BUDGET);
        let mut ra = ReadAhead::new(budget.clone());
        let size = 128u32 << 10;
        let n = f.len() as u64 / size as u64;
        // In order at first, then every pair swapped: 15, 17, 16, 19, 18, ... (pairs
        // straddle part boundaries too).
        let order: Vec<u64> =
            (0..n).map(|i| if i < 16 { i } else { ((i - 16) ^ 1) + 16 }).collect();
        for i in order {
            let off = i * size as u64;
            let got = ra.read(off, size, f.len() as u64, &fetch).await.unwrap();
            assert_eq!(got, f.slice(off as usize..off as usize + size as usize), "read at {off}");
            assert!(budget.used() <= MAX_WINDOW + 2 * PART_SIZE, "{} held", budget.used());
        }
        let calls = r.calls.lock().unwrap().clone();
        let fetched: u64 = calls.iter().map(|(_, l)| *l).sum();
        // Stragglers fetched on their own are the only bytes asked twice.
        let twice = calls.iter().filter(|(_, l)| *l == size as u64).count() as u64;
        assert!(twice <= 12, "{twice} reads fetched on their own: {calls:?}");
        assert!(fetched <= f.len() as u64 + twice * size as u64, "{fetched} bytes: {calls:?}");
        drop(ra);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn reads_at_and_past_the_end_are_short() {
        let f = file(1000);
        run(&f, 4096, &[0, 900, 1000, 5000]);
    }
}
