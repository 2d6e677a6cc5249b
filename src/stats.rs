//! The `--stats-interval` log line: FUSE requests per operation, errors, bytes read and
//! written since start, what the disk cache served and confirmed, read from the metrics registry (`crate::metrics`), the same numbers
//! `/metrics` serves.

use std::fmt::Write as _;

use crate::metrics::{self, Op, Revalidation};

/// The counters now.
pub fn snapshot() -> Snapshot {
    let m = metrics::global();
    let not_found = m.fuse.errors_with(libc::ENOENT);
    // ENOSYS (to OPEN and FLUSH of a read-only mount) and ENOTTY (to terminal ioctls) are
    // answers by design that tell the kernel or a program to stop asking, not failures.
    let by_design = |e: &str| e == "ENOENT" || e == "ENOSYS" || e == "ENOTTY";
    Snapshot {
        ops: Op::ALL.iter().map(|op| (op.name(), m.fuse.requests(*op).get())).collect(),
        errors: m.fuse.error_counts(|_, e| !by_design(e)),
        not_found,
        bytes_read: m.fuse.read_bytes.get(),
        bytes_written: m.fuse.written_bytes.get(),
        conditional_writes: m.conditional_writes.get(),
        write_conflicts: m.create_conflicts.get() + m.shard_rewrite_conflicts.get(),
        write_retries: m.shard_rewrite_retries.get(),
        disk_cache: DiskCacheSnapshot {
            hits: m.disk_cache.hits.get(),
            misses: m.disk_cache.misses.get(),
            read_bytes: m.disk_cache.read_bytes.get(),
            unchanged: m.disk_cache.revalidations(Revalidation::Unchanged).get(),
            changed: m.disk_cache.revalidations(Revalidation::Changed).get()
                + m.disk_cache.revalidations(Revalidation::Deleted).get(),
            evictions: m.disk_cache.evictions.get(),
        },
    }
}

/// The disk cache's counters (all zero without `--cache-dir`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskCacheSnapshot {
    /// Blocks (or whole-object copies) read from disk, and fetched for lack of them.
    pub hits: u64,
    pub misses: u64,
    /// Bytes served from disk instead of the store.
    pub read_bytes: u64,
    /// Revalidations past the TTL that found the cached version, and another one (or none).
    pub unchanged: u64,
    pub changed: u64,
    pub evictions: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub ops: Vec<(&'static str, u64)>,
    /// Requests answered with an error other than ENOENT, ENOSYS and ENOTTY.
    pub errors: u64,
    /// Requests answered with ENOENT (a lookup of a name that is not there is everyday
    /// traffic, counted apart from real errors).
    pub not_found: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Puts and deletes made with a condition (create-if-absent, update/delete-if-version).
    pub conditional_writes: u64,
    /// Conditions another writer won: creates of a key that exists at the store, shard
    /// rewrites that found the shard changed.
    pub write_conflicts: u64,
    /// Shard rewrites read, spliced and written again after a conflict.
    pub write_retries: u64,
    pub disk_cache: DiskCacheSnapshot,
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
            conditional_writes = self.conditional_writes,
            write_conflicts = self.write_conflicts,
            write_retries = self.write_retries,
            disk_cache_hits = self.disk_cache.hits,
            disk_cache_misses = self.disk_cache.misses,
            disk_cache_read_bytes = self.disk_cache.read_bytes,
            disk_cache_unchanged = self.disk_cache.unchanged,
            disk_cache_changed = self.disk_cache.changed,
            disk_cache_evictions = self.disk_cache.evictions,
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
    fn formats() {
        let snap = Snapshot {
            ops: vec![("lookup", 1), ("read", 2), ("write", 0), ("other", 1)],
            errors: 1,
            not_found: 1,
            bytes_read: 100,
            bytes_written: 7,
            conditional_writes: 0,
            write_conflicts: 0,
            write_retries: 0,
            disk_cache: DiskCacheSnapshot::default(),
        };
        assert_eq!(snap.requests(), 4);
        assert_eq!(snap.ops_line(), "lookup=1 read=2 other=1");
        assert_eq!(snap.summary(), "4 requests, 1 errors, 100 bytes read, 7 bytes written");
        let none = Snapshot { ops: vec![("read", 0)], ..snap };
        assert_eq!(none.ops_line(), "none");
    }

    #[test]
    fn reads_the_metrics_registry() {
        // Other tests count into the same registry meanwhile: compare by lower bounds.
        let before = snapshot();
        let m = metrics::global();
        m.fuse.requests(Op::Rmdir).inc_by(2);
        m.fuse.error(Op::Rmdir, libc::ENOTEMPTY);
        m.fuse.error(Op::Lookup, libc::ENOENT);
        m.fuse.read_bytes.inc_by(10);
        m.disk_cache.read_bytes.inc_by(7);
        m.disk_cache.revalidations(Revalidation::Deleted).inc();
        let after = snapshot();
        let rmdir = |s: &Snapshot| s.ops.iter().find(|(n, _)| *n == "rmdir").unwrap().1;
        assert!(rmdir(&after) >= rmdir(&before) + 2);
        assert!(after.errors > before.errors);
        assert!(after.not_found > before.not_found);
        assert!(after.bytes_read >= before.bytes_read + 10);
        assert!(after.disk_cache.read_bytes >= before.disk_cache.read_bytes + 7);
        assert!(after.disk_cache.changed > before.disk_cache.changed);
    }
}
