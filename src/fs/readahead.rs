//! Sequential read-ahead for one open file: a read that continues where the previous one ended
//! fetches a window that grows fourfold each time (up to `MAX_WINDOW`), and later reads are served
//! from it; a random read fetches just what was asked. This turns a stream of 128 KiB kernel
//! reads of a large remote object into a few large ranged GETs.

use bytes::Bytes;

const MIN_WINDOW: u64 = 1 << 20;
const MAX_WINDOW: u64 = 32 << 20;

#[derive(Debug, Default)]
pub struct ReadAhead {
    /// Bytes `start .. start + data.len()` of the file.
    start: u64,
    data: Bytes,
    /// Where the previous read ended.
    next: u64,
    window: u64,
}

impl ReadAhead {
    /// Serve `offset .. offset + size` from the buffer, if it holds all of it.
    pub fn take(&mut self, offset: u64, size: u32, file_size: u64) -> Option<Bytes> {
        let end = (offset + size as u64).min(file_size);
        let buf_end = self.start + self.data.len() as u64;
        if offset >= self.start && end <= buf_end && offset <= end {
            self.next = end;
            let from = (offset - self.start) as usize;
            return Some(self.data.slice(from..from + (end - offset) as usize));
        }
        None
    }

    /// How much to fetch for a read the buffer could not serve: (offset, length).
    pub fn plan(&mut self, offset: u64, size: u32, file_size: u64) -> (u64, u64) {
        let sequential = offset == self.next && offset > 0;
        self.window = if sequential { (self.window * 4).clamp(MIN_WINDOW, MAX_WINDOW) } else { 0 };
        let want = (size as u64).max(self.window);
        (offset, want.min(file_size.saturating_sub(offset)))
    }

    /// Keep what was fetched and return the part the read asked for.
    pub fn fill(&mut self, offset: u64, size: u32, fetched: Bytes) -> Bytes {
        let n = (size as usize).min(fetched.len());
        let answer = fetched.slice(..n);
        self.next = offset + n as u64;
        if fetched.len() > n {
            self.start = offset;
            self.data = fetched;
        } else {
            self.data = Bytes::new();
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
            let expect = file.slice(off.min(total) as usize..(off + size as u64).min(total) as usize);
            let got = match ra.take(off, size, total) {
                Some(b) => b,
                None => {
                    let (o, l) = ra.plan(off, size, total);
                    fetches.push((o, l));
                    ra.fill(off, size, file.slice(o.min(total) as usize..(o + l).min(total) as usize))
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
    fn reads_at_and_past_the_end_are_short() {
        let f = file(1000);
        run(&f, 4096, &[0, 900, 1000, 5000]);
    }
}
