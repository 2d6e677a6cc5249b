//! The content of a file open for writing: in memory while small, in a spill file once it
//! passes a per-file threshold or once every write buffer together would pass the memory
//! budget. Spill files are anonymous (`O_TMPFILE`, or created and unlinked at once where the
//! filesystem lacks it): they have no name from the moment they exist, so closing the buffer
//! frees the space and a crashed daemon leaves nothing behind in the spill directory.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

pub use crate::views::shared::body::Body;

/// A file passes to disk once it is larger than this (unless configured otherwise).
pub const DEFAULT_THRESHOLD: u64 = 8 << 20;
/// Memory for all write buffers of a mount together (unless configured otherwise).
pub const DEFAULT_BUDGET: u64 = 256 << 20;

#[derive(Debug, Clone)]
pub struct SpillConfig {
    pub dir: PathBuf,
    /// Bytes one buffer may hold in memory.
    pub threshold: u64,
    /// Bytes all buffers together may hold in memory.
    pub budget: u64,
}

impl Default for SpillConfig {
    fn default() -> Self {
        SpillConfig {
            dir: std::env::temp_dir(),
            threshold: DEFAULT_THRESHOLD,
            budget: DEFAULT_BUDGET,
        }
    }
}

/// The spill directory and the memory all buffers hold, shared by every buffer of a mount.
#[derive(Debug)]
pub struct Spill {
    cfg: SpillConfig,
    held: AtomicU64,
    spilled: AtomicU64,
}

impl Spill {
    pub fn new(cfg: SpillConfig) -> Arc<Spill> {
        Arc::new(Spill { cfg, held: AtomicU64::new(0), spilled: AtomicU64::new(0) })
    }

    /// Check at mount time that spill files can be made in the directory (created if
    /// missing), so a bad `--spill-dir` fails the mount rather than the first large write.
    pub fn check(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.cfg.dir)?;
        anonymous_file(&self.cfg.dir).map(drop)
    }

    pub fn config(&self) -> &SpillConfig {
        &self.cfg
    }

    /// Bytes held in memory by write buffers now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Buffers that went to disk since the start.
    pub fn spilled(&self) -> u64 {
        self.spilled.load(Ordering::Relaxed)
    }

    /// Reserve `n` more bytes of memory if the budget allows.
    fn reserve(&self, n: u64) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| {
                h.checked_add(n).filter(|t| *t <= self.cfg.budget)
            })
            .is_ok()
    }

    fn release(&self, n: u64) {
        self.held.fetch_sub(n, Ordering::AcqRel);
    }
}

fn anonymous_file(dir: &Path) -> std::io::Result<File> {
    tempfile::tempfile_in(dir)
}

/// In-memory content is kept in pages of at most this size (each grown by doubling): no
/// reallocation of a whole large buffer, and freed pages are all alike, so the memory the
/// process really holds follows the budget.
const PAGE: usize = 1 << 20;

enum Content {
    /// In memory, in pages (page `i` holds bytes `i * PAGE ..`); capacities reserved in the budget.
    Mem(Vec<Vec<u8>>),
    /// One page, shared with a write-back in progress or done (no copy was made for it);
    /// taken back (without a copy once the store has let go of it) at the next change.
    Frozen(Bytes),
    File(Arc<File>, u64),
}

/// A copy of a multi-page buffer made for a write-back: its memory is in the budget until
/// the store lets go of it.
struct Reserved {
    data: Vec<u8>,
    spill: Arc<Spill>,
}

impl AsRef<[u8]> for Reserved {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.spill.release(self.data.len() as u64);
    }
}

/// The content of one open file.
pub struct Buffer {
    spill: Arc<Spill>,
    content: Content,
    /// Bytes of the budget this buffer holds (the capacity of its pages).
    reserved: u64,
}

fn mem_len(pages: &[Vec<u8>]) -> u64 {
    match pages.last() {
        Some(last) => ((pages.len() - 1) * PAGE + last.len()) as u64,
        None => 0,
    }
}

impl Buffer {
    /// A buffer holding `data` (spilled at once if it is too large to keep).
    pub fn new(spill: Arc<Spill>, data: Vec<u8>) -> std::io::Result<Buffer> {
        let mut b = Buffer { spill, content: Content::Mem(Vec::new()), reserved: 0 };
        if !data.is_empty() {
            b.write(0, &data)?;
        }
        Ok(b)
    }

    pub fn len(&self) -> u64 {
        match &self.content {
            Content::Mem(p) => mem_len(p),
            Content::Frozen(b) => b.len() as u64,
            Content::File(_, len) => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_spilled(&self) -> bool {
        matches!(self.content, Content::File(..))
    }

    /// Up to `size` bytes at `offset` (fewer at the end).
    pub fn read(&self, offset: u64, size: u32) -> std::io::Result<Bytes> {
        let len = self.len();
        let start = offset.min(len);
        let end = start.saturating_add(size as u64).min(len);
        let (s, e) = (start as usize, end as usize);
        match &self.content {
            Content::Mem(pages) => {
                let mut out = Vec::with_capacity(e - s);
                let mut at = s;
                while at < e {
                    let page = &pages[at / PAGE];
                    let from = at % PAGE;
                    let n = (PAGE - from).min(e - at);
                    out.extend_from_slice(&page[from..from + n]);
                    at += n;
                }
                Ok(Bytes::from(out))
            }
            Content::Frozen(b) => Ok(b.slice(s..e)),
            Content::File(f, _) => {
                let mut out = vec![0; e - s];
                f.read_exact_at(&mut out, start)?;
                Ok(Bytes::from(out))
            }
        }
    }

    /// Frozen content made writable again: the same memory if the store no longer holds it,
    /// else a copy (the shared one is freed when the store lets go of it).
    fn thaw(&mut self) {
        let Content::Frozen(b) = &mut self.content else { return };
        let b = std::mem::take(b);
        let page = match b.try_into_mut() {
            Ok(m) => Vec::from(m),
            Err(shared) => {
                let v = shared.to_vec();
                // The copy is accounted in place of the shared memory (which the store frees).
                let cap = v.capacity() as u64;
                if cap > self.reserved {
                    // Over budget only briefly: `fit` spills if it cannot reserve more.
                    let _ = self.spill.reserve(cap - self.reserved);
                    self.reserved = self.reserved.max(cap);
                }
                v
            }
        };
        self.content = Content::Mem(vec![page]);
    }

    /// Room for `new_len` bytes, in memory if the threshold and the budget allow, else in a
    /// spill file. Every page is reserved in the budget before it is allocated.
    fn fit(&mut self, new_len: u64) -> std::io::Result<()> {
        self.thaw();
        if let Content::Mem(_) = &self.content {
            if new_len > self.spill.cfg.threshold || !self.grow(new_len as usize) {
                return self.spill_to_file();
            }
        }
        Ok(())
    }

    /// Give the pages room for `new_len` bytes (zero-filled up to the current end); false
    /// when the budget does not allow it (nothing grown past what was reserved).
    fn grow(&mut self, new_len: usize) -> bool {
        let Content::Mem(pages) = &mut self.content else { return true };
        let n_pages = new_len.div_ceil(PAGE);
        while pages.len() < n_pages {
            pages.push(Vec::new());
        }
        for (i, page) in pages.iter_mut().enumerate() {
            let need = (new_len - (i * PAGE).min(new_len)).min(PAGE);
            if need <= page.capacity() {
                continue;
            }
            let cap = page.capacity();
            let want = need.max((cap * 2).min(PAGE));
            let ok = [want, need].into_iter().find(|t| self.spill.reserve((t - cap) as u64));
            let Some(target) = ok else { return false };
            self.reserved += (target - cap) as u64;
            page.reserve_exact(target - page.len());
        }
        true
    }

    /// Move in-memory content to a new spill file, giving its memory back to the budget.
    fn spill_to_file(&mut self) -> std::io::Result<()> {
        let Content::Mem(pages) = &self.content else { return Ok(()) };
        let file = anonymous_file(&self.spill.cfg.dir)?;
        let mut at = 0;
        for page in pages {
            file.write_all_at(page, at)?;
            at += page.len() as u64;
        }
        let len = mem_len(pages);
        self.content = Content::File(Arc::new(file), len);
        self.spill.release(self.reserved);
        self.reserved = 0;
        self.spill.spilled.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(dir = ?self.spill.cfg.dir, bytes = len, "write buffer spilled to disk");
        Ok(())
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| std::io::Error::from_raw_os_error(libc::EFBIG))?;
        let len = self.len();
        self.fit(end.max(len))?;
        match &mut self.content {
            Content::Mem(pages) => {
                let (mut at, total) = (offset as usize, end.max(len) as usize);
                let mut rest = data;
                // Pages between the old end and `offset` are zero-filled first.
                for (i, page) in pages.iter_mut().enumerate() {
                    let want = (total - (i * PAGE).min(total)).min(PAGE);
                    if page.len() < want {
                        page.resize(want, 0);
                    }
                }
                while !rest.is_empty() {
                    let page = &mut pages[at / PAGE];
                    let from = at % PAGE;
                    let n = (PAGE - from).min(rest.len());
                    page[from..from + n].copy_from_slice(&rest[..n]);
                    rest = &rest[n..];
                    at += n;
                }
            }
            Content::File(f, flen) => {
                f.write_all_at(data, offset)?;
                *flen = (*flen).max(end);
            }
            Content::Frozen(_) => unreachable!("thawed by fit"),
        }
        Ok(())
    }

    pub fn truncate(&mut self, size: u64) -> std::io::Result<()> {
        let len = self.len();
        if size > len {
            // Growing is a write of zeros, which also decides memory or disk.
            self.fit(size)?;
            if let Content::Mem(_) = self.content {
                return self.write(len, &vec![0; (size - len) as usize]);
            }
        }
        self.thaw();
        match &mut self.content {
            Content::Mem(pages) => {
                let size = size as usize;
                let keep = size.div_ceil(PAGE);
                let mut freed = 0;
                for page in pages.drain(keep..) {
                    freed += page.capacity();
                }
                if let Some(last) = pages.last_mut() {
                    last.truncate(size - (keep - 1) * PAGE);
                }
                self.spill.release(freed as u64);
                self.reserved -= freed as u64;
            }
            Content::File(f, flen) => {
                f.set_len(size)?;
                *flen = size;
            }
            Content::Frozen(_) => unreachable!("thawed above"),
        }
        Ok(())
    }

    /// Empty the buffer (O_TRUNC); a spill file is closed, which frees it.
    pub fn clear(&mut self) {
        self.content = Content::Mem(Vec::new());
        self.spill.release(self.reserved);
        self.reserved = 0;
    }

    /// What a write-back stores. One page: the bytes themselves, shared until the next change.
    /// More: one contiguous copy, in the budget until the store lets go of it, or, if the
    /// budget has no room for it, the buffer spills and the body is the spill file. Spilled:
    /// the file itself, which later writes change, so the caller keeps the buffer locked
    /// until the put is done.
    pub fn body(&mut self) -> std::io::Result<Body> {
        if let Content::Mem(pages) = &mut self.content {
            if pages.len() <= 1 {
                let page = pages.pop().unwrap_or_default();
                self.content = Content::Frozen(Bytes::from(page));
            } else {
                let len = mem_len(pages);
                if self.spill.reserve(len) {
                    let mut data = Vec::with_capacity(len as usize);
                    for page in pages.iter() {
                        data.extend_from_slice(page);
                    }
                    let copy = Reserved { data, spill: self.spill.clone() };
                    return Ok(Body::Bytes(Bytes::from_owner(copy)));
                }
                self.spill_to_file()?;
            }
        }
        Ok(match &self.content {
            Content::Frozen(b) => Body::Bytes(b.clone()),
            Content::File(f, len) => Body::File(f.clone(), *len),
            Content::Mem(_) => unreachable!("frozen or spilled above"),
        })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.spill.release(self.reserved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spill(dir: &Path, threshold: u64, budget: u64) -> Arc<Spill> {
        Spill::new(SpillConfig { dir: dir.to_path_buf(), threshold, budget })
    }

    fn entries(dir: &Path) -> usize {
        std::fs::read_dir(dir).unwrap().count()
    }

    #[test]
    fn small_stays_in_memory_large_spills_and_bytes_are_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let s = spill(tmp.path(), 100, 1000);
        let mut b = Buffer::new(s.clone(), b"hello".to_vec()).unwrap();
        assert!(!b.is_spilled());
        assert_eq!(s.held(), 5);
        b.write(90, b"0123456789").unwrap();
        assert!(!b.is_spilled());
        assert_eq!(s.held(), 100, "capacity doubles up to the threshold");
        b.write(100, b"!").unwrap();
        assert!(b.is_spilled(), "past the threshold");
        assert_eq!(s.held(), 0, "spilled bytes leave the budget");
        assert_eq!(b.len(), 101);
        assert_eq!(b.read(0, 5).unwrap(), &b"hello"[..]);
        assert_eq!(b.read(5, 3).unwrap(), &[0u8; 3][..]);
        assert_eq!(b.read(95, 100).unwrap(), &b"56789!"[..]);
        b.truncate(7).unwrap();
        assert_eq!(b.body().unwrap().into_bytes().unwrap(), &b"hello\0\0"[..]);
        assert_eq!(entries(tmp.path()), 0, "spill files have no name");
        b.clear();
        assert!(b.is_empty() && !b.is_spilled());
    }

    #[test]
    fn the_budget_is_shared_and_given_back() {
        let tmp = tempfile::tempdir().unwrap();
        let s = spill(tmp.path(), 100, 150);
        let mut a = Buffer::new(s.clone(), vec![1; 80]).unwrap();
        let mut b = Buffer::new(s.clone(), vec![2; 60]).unwrap();
        assert!(!a.is_spilled() && !b.is_spilled());
        assert_eq!(s.held(), 140);
        b.write(60, &[3; 20]).unwrap();
        assert!(b.is_spilled(), "80 + 80 is past the budget of 150");
        assert_eq!(s.held(), 80);
        a.truncate(10).unwrap();
        assert!(s.held() <= 80 && s.held() >= 10, "{}", s.held());
        drop(a);
        assert_eq!(s.held(), 0);
        let mut want = vec![2; 60];
        want.extend([3; 20]);
        assert_eq!(b.body().unwrap().into_bytes().unwrap(), want);
        assert_eq!(s.spilled(), 1);
    }

    /// A write-back shares the memory (no copy); the next write takes it back, or copies it
    /// while the store still holds it, and the budget follows.
    #[test]
    fn a_write_back_shares_memory_until_the_next_change() {
        let tmp = tempfile::tempdir().unwrap();
        let s = spill(tmp.path(), 1000, 1000);
        let mut b = Buffer::new(s.clone(), b"abc".to_vec()).unwrap();
        let Body::Bytes(sent) = b.body().unwrap() else { panic!("small bodies are in memory") };
        assert_eq!(sent, &b"abc"[..]);
        assert_eq!(b.read(1, 5).unwrap(), &b"bc"[..]);
        b.write(3, b"d").unwrap(); // the store still holds `sent`: a copy
        assert_eq!(sent, &b"abc"[..], "what was sent does not change");
        assert_eq!(b.read(0, 10).unwrap(), &b"abcd"[..]);
        drop(sent);
        let Body::Bytes(sent) = b.body().unwrap() else { panic!() };
        drop(sent);
        b.write(0, b"X").unwrap(); // nobody else holds it: the same memory
        assert_eq!(b.body().unwrap().into_bytes().unwrap(), &b"Xbcd"[..]);
        drop(b);
        assert_eq!(s.held(), 0);
    }

    /// Random writes, truncations, reads and write-backs, across page boundaries and through
    /// spilling, against a plain `Vec` model.
    #[test]
    fn matches_a_plain_vector() {
        let tmp = tempfile::tempdir().unwrap();
        for (threshold, budget) in [(8 * PAGE as u64, 64 << 20), (3 * PAGE as u64, 2 << 20)] {
            let s = spill(tmp.path(), threshold, budget);
            let mut b = Buffer::new(s.clone(), Vec::new()).unwrap();
            let mut model: Vec<u8> = Vec::new();
            let mut x: u64 = 0x2545F4914F6CDD1D;
            let mut next = |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            for step in 0..300u64 {
                match next(10) {
                    0..=5 => {
                        let off = next(5 * PAGE as u64);
                        let len = next(PAGE as u64 + 10) as usize;
                        let data = vec![step as u8 | 1; len];
                        b.write(off, &data).unwrap();
                        let end = off as usize + len;
                        if model.len() < end {
                            model.resize(end, 0);
                        }
                        model[off as usize..end].copy_from_slice(&data);
                    }
                    6 => {
                        let size = next(5 * PAGE as u64);
                        b.truncate(size).unwrap();
                        model.resize(size as usize, 0);
                    }
                    7 => {
                        let got = b.body().unwrap().into_bytes().unwrap();
                        assert!(got == model, "body at step {step}");
                    }
                    _ => {
                        let off = next(model.len() as u64 + 1);
                        let size = next(3 * PAGE as u64) as u32;
                        let want_end = (off as usize + size as usize).min(model.len());
                        let got = b.read(off, size).unwrap();
                        assert!(got == model[off as usize..want_end], "read at step {step}");
                    }
                }
                assert_eq!(b.len(), model.len() as u64, "step {step}");
                assert!(s.held() <= budget, "held {} over the budget", s.held());
            }
            drop(b);
            assert_eq!(s.held(), 0);
        }
    }

    #[test]
    fn a_bad_spill_dir_is_reported() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("f");
        std::fs::write(&file, b"").unwrap();
        assert!(spill(&file, 1, 1).check().is_err());
        assert!(spill(&tmp.path().join("new/sub"), 1, 1).check().is_ok());
    }
}
