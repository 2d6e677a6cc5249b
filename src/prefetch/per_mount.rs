//! The read-ahead state of one mount, as the filesystem holds it: the budget every file's
//! window is paid from, the windows of reads that come without a handle (kept per inode, as
//! the kernel then sends no RELEASE to end them), and the scan across a directory's files.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;

use super::across_files::ScanAhead;
use super::within_file::{Budget, ReadAhead, DEFAULT_BUDGET};
use crate::locks::lock;

/// One file's read-ahead, shared by the reads of one handle (or inode); `E` is the reader's
/// error.
pub type SharedReadAhead<E> = Arc<tokio::sync::Mutex<ReadAhead<E>>>;

/// Read-ahead states kept per inode when the kernel sends no OPEN (and so no RELEASE).
const INODE_READAHEADS: usize = 64;
/// Files fetched ahead of a reader that reads a directory's files in listing order.
const SCAN_AHEAD_FILES: usize = 8;

pub struct MountReadAhead<E> {
    /// Memory for read-ahead, shared by every file of the mount.
    budget: Arc<Budget>,
    /// Read-ahead per inode for reads without a handle.
    by_inode: Mutex<LruCache<u64, SharedReadAhead<E>>>,
    scans: ScanAhead,
}

impl<E: Send + 'static> Default for MountReadAhead<E> {
    fn default() -> Self {
        MountReadAhead {
            budget: Budget::new(DEFAULT_BUDGET),
            by_inode: Mutex::new(LruCache::new(
                NonZeroUsize::new(INODE_READAHEADS).expect("nonzero"),
            )),
            scans: ScanAhead::new(SCAN_AHEAD_FILES),
        }
    }
}

impl<E: Send + 'static> MountReadAhead<E> {
    /// A read-ahead for a newly opened file.
    pub fn for_file(&self) -> SharedReadAhead<E> {
        Arc::new(tokio::sync::Mutex::new(ReadAhead::new(self.budget.clone())))
    }

    /// The read-ahead of reads of `ino` without a handle.
    pub fn for_inode(&self, ino: u64) -> SharedReadAhead<E> {
        lock(&self.by_inode).get_or_insert(ino, || self.for_file()).clone()
    }

    /// `ino` is gone or changed: its windows are of no use.
    pub fn forget_inode(&self, ino: u64) {
        lock(&self.by_inode).pop(&ino);
    }

    /// The scan-ahead across the files of directories.
    pub fn scans(&self) -> &ScanAhead {
        &self.scans
    }
}
