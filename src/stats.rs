//! Counters since start: FUSE requests per operation, errors, bytes read and written. Plain
//! relaxed atomics in one process-wide table, bumped by the FUSE adapter and logged by
//! `--stats-interval` as one INFO line.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The operations counted, in the order they are printed. Anything else counts as "other".
pub const OPS: &[&str] = &[
    "lookup",
    "getattr",
    "setattr",
    "open",
    "read",
    "write",
    "flush",
    "release",
    "fsync",
    "create",
    "mkdir",
    "unlink",
    "rmdir",
    "rename",
    "opendir",
    "readdir",
    "readdirplus",
    "ioctl",
    "other",
];

pub struct Stats {
    ops: [AtomicU64; OPS.len()],
    errors: AtomicU64,
    not_found: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

static GLOBAL: Stats = Stats::new();

/// Conditional writes to the store (#20): kept apart from `Stats` so they can move into a
/// metrics registry as they are. Bumped by the fs layer, printed in the stats line.
#[derive(Default)]
pub struct WriteCounters {
    /// Puts and deletes made with a condition (create-if-absent, update/delete-if-version).
    pub conditional_writes: AtomicU64,
    /// Conditions that failed because another writer got there first (shard rewrites that must
    /// be redone, creates of a key that exists at the store).
    pub write_conflicts: AtomicU64,
    /// Shard rewrites read, spliced and written again after a conflict.
    pub write_retries: AtomicU64,
}

pub static WRITES: WriteCounters = WriteCounters {
    conditional_writes: AtomicU64::new(0),
    write_conflicts: AtomicU64::new(0),
    write_retries: AtomicU64::new(0),
};

impl WriteCounters {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// `conditional_writes=N write_conflicts=N write_retries=N`.
    pub fn line(&self) -> String {
        format!(
            "conditional_writes={} write_conflicts={} write_retries={}",
            self.conditional_writes.load(Relaxed),
            self.write_conflicts.load(Relaxed),
            self.write_retries.load(Relaxed)
        )
    }
}

pub fn global() -> &'static Stats {
    &GLOBAL
}

fn op_index(op: &str) -> usize {
    OPS.iter().position(|o| *o == op).unwrap_or(OPS.len() - 1)
}

/// The fuser callback an adapter closure was written in, from its type name
/// (`...FuseAdapter>::lookup::{{closure}}` -> `lookup`); "other" when it cannot be told.
pub fn op_of_closure<W>() -> &'static str {
    let name = std::any::type_name::<W>();
    let head = name.split("::{{closure}}").next().unwrap_or(name);
    head.rsplit("::").next().unwrap_or("other")
}

impl Stats {
    pub const fn new() -> Self {
        Stats {
            ops: [const { AtomicU64::new(0) }; OPS.len()],
            errors: AtomicU64::new(0),
            not_found: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
        }
    }

    pub fn request(&self, op: &str) {
        self.ops[op_index(op)].fetch_add(1, Relaxed);
    }

    /// A request answered with `errno`. ENOENT (a lookup of a name that is not there) is
    /// everyday traffic, counted apart from real errors.
    pub fn error(&self, errno: i32) {
        if errno == libc::ENOENT {
            self.not_found.fetch_add(1, Relaxed);
        } else {
            self.errors.fetch_add(1, Relaxed);
        }
    }

    pub fn read(&self, n: u64) {
        self.bytes_read.fetch_add(n, Relaxed);
    }

    pub fn written(&self, n: u64) {
        self.bytes_written.fetch_add(n, Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            ops: OPS.iter().zip(&self.ops).map(|(n, c)| (*n, c.load(Relaxed))).collect(),
            errors: self.errors.load(Relaxed),
            not_found: self.not_found.load(Relaxed),
            bytes_read: self.bytes_read.load(Relaxed),
            bytes_written: self.bytes_written.load(Relaxed),
        }
    }
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub ops: Vec<(&'static str, u64)>,
    pub errors: u64,
    pub not_found: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

impl Snapshot {
    pub fn requests(&self) -> u64 {
        self.ops.iter().map(|(_, n)| n).sum()
    }

    /// Non-zero per-op counts as `lookup=3 read=10`, or `none`.
    pub fn ops_line(&self) -> String {
        let mut s = String::new();
        for (name, n) in self.ops.iter().filter(|(_, n)| *n > 0) {
            if !s.is_empty() {
                s.push(' ');
            }
            let _ = write!(s, "{name}={n}");
        }
        if s.is_empty() {
            s.push_str("none");
        }
        s
    }

    pub fn log(&self, uptime_secs: u64) {
        tracing::info!(
            uptime_secs,
            requests = self.requests(),
            errors = self.errors,
            not_found = self.not_found,
            bytes_read = self.bytes_read,
            bytes_written = self.bytes_written,
            ops = ?self.ops_line(),
            writes = %WRITES.line(),
            "stats"
        );
    }

    /// Short form for systemd's STATUS= line.
    pub fn summary(&self) -> String {
        format!(
            "{} requests, {} errors, {} bytes read, {} bytes written",
            self.requests(),
            self.errors,
            self.bytes_read,
            self.bytes_written
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_formats() {
        let s = Stats::new();
        s.request("read");
        s.request("read");
        s.request("lookup");
        s.request("bogus");
        s.error(libc::EIO);
        s.error(libc::ENOENT);
        s.read(100);
        s.written(7);
        let snap = s.snapshot();
        assert_eq!(snap.requests(), 4);
        assert_eq!((snap.errors, snap.not_found), (1, 1));
        assert_eq!(snap.ops_line(), "lookup=1 read=2 other=1");
        assert_eq!(snap.summary(), "4 requests, 1 errors, 100 bytes read, 7 bytes written");
        assert_eq!(Stats::new().snapshot().ops_line(), "none");
    }

    #[test]
    fn op_names_from_closures() {
        struct Adapter;
        impl Adapter {
            fn lookup(&self) -> &'static str {
                fn name_of<W>(_: &W) -> &'static str {
                    op_of_closure::<W>()
                }
                let c = || 1;
                name_of(&c)
            }
        }
        assert_eq!(Adapter.lookup(), "lookup");
    }
}
