//! Open handles. A file is open either for reading or for writing, and each has its own
//! variant, so a reader that writes back or a writer without a buffer cannot be built.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::fs::write::write_buf::SharedBuf;
use crate::fs::{FsError, FsResult};
use crate::views::shared::mapping::node::Node;

pub type SharedReadAhead = crate::prefetch::per_mount::SharedReadAhead<FsError>;

/// The open handles of a mount by number; 0 is never one (reads without a handle carry it).
pub struct Handles {
    open: Mutex<HashMap<u64, Handle>>,
    next: AtomicU64,
    /// The kernel sends no OPEN/RELEASE (read-only mounts, see `ZarrFs::serve_without_open`):
    /// reads come with handle 0 and are served by inode.
    openless: AtomicBool,
}

impl Default for Handles {
    fn default() -> Self {
        Handles {
            open: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            openless: AtomicBool::new(false),
        }
    }
}

impl Handles {
    /// Open `h`: its number.
    pub fn insert(&self, h: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(fh, h);
        fh
    }

    pub fn lock(&self) -> MutexGuard<'_, HashMap<u64, Handle>> {
        crate::locks::lock(&self.open)
    }

    pub fn set_openless(&self) {
        self.openless.store(true, Ordering::Relaxed);
    }

    pub fn is_openless(&self) -> bool {
        self.openless.load(Ordering::Relaxed)
    }

    /// The write buffer of a handle open for writing, which is about to change it: the handle
    /// is marked dirty. `None` for a reader or an unknown handle.
    pub fn dirty_writer_buf(&self, fh: u64) -> Option<SharedBuf> {
        match self.lock().get_mut(&fh) {
            Some(Handle::Write(h)) => {
                h.dirty = true;
                Some(h.buf.clone())
            }
            _ => None,
        }
    }

    /// A writer handle's buffer and whether the handle was dirty; it is marked clean now,
    /// before the write-back, so a write during it marks it dirty again. `None` for a reader.
    pub fn take_dirty(&self, fh: u64) -> FsResult<Option<(SharedBuf, bool)>> {
        match self.lock().get_mut(&fh) {
            Some(Handle::Write(h)) => Ok(Some((h.buf.clone(), std::mem::take(&mut h.dirty)))),
            Some(Handle::Read(_)) => Ok(None),
            _ => Err(FsError::BadHandle),
        }
    }

    /// The content version of the file open as `fh` (see `Node::content_version`).
    pub fn version(&self, fh: u64) -> Option<String> {
        match self.lock().get(&fh)? {
            Handle::Read(h) => h.node.content_version(),
            _ => None,
        }
    }

    /// What a reader's handle reads: the node it was opened at. `None` for a writer (or a
    /// reader of a write buffer) and an unknown handle.
    pub fn reader_node(&self, fh: u64) -> Option<Node> {
        match self.lock().get(&fh)? {
            Handle::Read(h) if h.buf.is_none() => Some(h.node.clone()),
            _ => None,
        }
    }

    /// Every reader of inode `ino` reads `buf` from now on: a writer of this mount opened that
    /// inode, and one inode has one content, as on a local disk. A reader left on the version
    /// it opened would be read by the kernel up to the size the writer's writes give the inode,
    /// and past that version's end the kernel fills the page with zeros no version holds.
    /// Returns how many readers follow the buffer now.
    pub fn follow_writer(&self, ino: u64, buf: &SharedBuf) -> usize {
        let mut moved = 0;
        for h in self.lock().values_mut() {
            if let Handle::Read(r) = h {
                let already = r.buf.as_ref().is_some_and(|b| Arc::ptr_eq(b, buf));
                if r.ino == ino && !already {
                    r.buf = Some(buf.clone());
                    moved += 1;
                }
            }
        }
        moved
    }

    /// Close `fh` if it is a reader (nothing to write back): the inode it read, `None` if it
    /// was no reader.
    pub fn remove_reader(&self, fh: u64) -> Option<u64> {
        let mut handles = self.lock();
        if !handles.get(&fh).is_some_and(Handle::is_reader) {
            return None;
        }
        match handles.remove(&fh) {
            Some(Handle::Read(ReadHandle { ino, .. })) => Some(ino),
            _ => None,
        }
    }

    /// An open handle's view of an inode whose name is gone (see `ZarrFs::path_of`): its write
    /// buffer (a writer's, if any), or the node it was opened on.
    pub fn open_content(&self, ino: u64) -> Option<(Option<SharedBuf>, Option<Node>)> {
        let handles = self.lock();
        let mut found = None;
        for h in handles.values() {
            if let Some(content) = h.content_of(ino) {
                if found.is_none() || h.is_writer() {
                    found = Some(content);
                }
            }
        }
        found
    }
}

pub enum Handle {
    Read(ReadHandle),
    Write(WriteHandle),
    /// An open directory: its listing, read from the first readdir on (see `listing`).
    Dir(Arc<crate::fs::listing::DirListing>),
}

/// A file open for reading: the node it was opened on, read ahead of the reader.
pub struct ReadHandle {
    pub ino: u64,
    pub path: String,
    pub node: Node,
    /// The write buffer of the path at open, if it was open for writing, or of a writer that
    /// opened the inode since (`Handles::follow_writer`): readers see the writer's progress
    /// (and never write it back).
    pub buf: Option<SharedBuf>,
    pub ra: SharedReadAhead,
}

/// A file open for writing (or both): its path's write buffer.
pub struct WriteHandle {
    pub ino: u64,
    pub path: String,
    pub buf: SharedBuf,
    /// This handle wrote or truncated since its last flush: only then does its close write the
    /// buffer back, so the late RELEASE of a closed handle does not store the half-written
    /// buffer of the next open of the same file.
    pub dirty: bool,
}

/// What a read is served from.
pub enum ReadFrom {
    Buffer(SharedBuf),
    Node { ino: u64, node: Node, ra: SharedReadAhead },
}

impl Handle {
    /// The path of an open file and what to read it from; `None` for a directory.
    pub fn read_from(&self) -> Option<(String, ReadFrom)> {
        match self {
            Handle::Read(ReadHandle { buf: Some(buf), path, .. })
            | Handle::Write(WriteHandle { buf, path, .. }) => {
                Some((path.clone(), ReadFrom::Buffer(buf.clone())))
            }
            Handle::Read(ReadHandle { ino, path, node, ra, buf: None }) => Some((
                path.clone(),
                ReadFrom::Node { ino: *ino, node: node.clone(), ra: ra.clone() },
            )),
            Handle::Dir(_) => None,
        }
    }

    /// What an open file of `ino` holds: (its write buffer, the node it was opened on).
    pub fn content_of(&self, ino: u64) -> Option<(Option<SharedBuf>, Option<Node>)> {
        match self {
            Handle::Read(h) if h.ino == ino => Some((h.buf.clone(), Some(h.node.clone()))),
            Handle::Write(h) if h.ino == ino => Some((Some(h.buf.clone()), None)),
            _ => None,
        }
    }

    pub fn is_writer(&self) -> bool {
        matches!(self, Handle::Write(_))
    }

    pub fn is_reader(&self) -> bool {
        matches!(self, Handle::Read(_))
    }
}
