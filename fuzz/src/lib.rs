//! Shared by the fuzz targets: an allocation guard and a small byte reader.
//!
//! Built with `cargo fuzz build --sanitizer none` (see scripts/fuzz.sh), libFuzzer's own
//! `-malloc_limit_mb` has no effect: it needs a sanitizer's allocator hooks. So every target
//! runs under [`Guard`], a global allocator that aborts (a crash libFuzzer reports, with the
//! reproducer) on any single allocation above `FUZZ_ALLOC_LIMIT_MB` (default 256 MiB). A
//! parser that allocates what its input merely claims fails here even when the kernel would
//! have handed out the untouched pages.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes one allocation may ask for.
static LIMIT: AtomicUsize = AtomicUsize::new(256 << 20);

pub struct Guard;

impl Guard {
    #[inline]
    fn check(size: usize) {
        if size > LIMIT.load(Ordering::Relaxed) {
            // No allocation here: a fixed message straight to stderr, then abort (SIGABRT is
            // a crash to libFuzzer, which saves the input).
            let _ = std::io::stderr().write_all(b"fuzz: allocation above FUZZ_ALLOC_LIMIT_MB\n");
            std::process::abort();
        }
    }
}

// SAFETY: forwards every call to the system allocator unchanged; only adds a size check.
unsafe impl GlobalAlloc for Guard {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::check(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Guard = Guard;

/// Call once from each target's `init`: reads `FUZZ_ALLOC_LIMIT_MB`.
pub fn init() {
    if let Some(mb) =
        std::env::var("FUZZ_ALLOC_LIMIT_MB").ok().and_then(|v| v.parse::<usize>().ok())
    {
        if mb > 0 {
            LIMIT.store(mb << 20, Ordering::Relaxed);
        }
    }
}

/// Reads fixed-size fields off the front of a fuzz input; missing bytes read as zero.
pub struct Reader<'a> {
    pub rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { rest: data }
    }

    pub fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.rest.len());
        out[..n].copy_from_slice(&self.rest[..n]);
        self.rest = &self.rest[n..];
        out
    }

    pub fn u8(&mut self) -> u8 {
        self.bytes::<1>()[0]
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.bytes())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes())
    }
}
