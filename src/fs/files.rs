//! Open files: open, create, read, write, close (flush, release), fsync, truncate, and the
//! write-back that `write_buf::BufState` decides and this module does.
//!
//! A file open for writing is buffered whole (in memory, or a spill file once large) and
//! written to the namespace as one object on flush (close) and release, so the backend never
//! sees half a chunk.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;

use crate::fs::inodes::handles::{Handle, ReadFrom, ReadHandle, SharedReadAhead, WriteHandle};
use crate::fs::write::write_buf::{io_err, AfterPut, Put, SharedBuf, WriteBuf};
use crate::fs::{Attr, FileKind, FsError, FsResult, Opened, ZarrFs};
use crate::locks::lock;
use crate::prefetch::within_file;
use crate::store::{join_key, split_key};
use crate::views::shared::mapping::node::{Backing, Node};
use crate::views::shared::namespace;

/// Files smaller than this are read through the daemon even when a local copy exists: their
/// copy through FUSE costs little, and the daemon reads the next files of a directory scan
/// ahead (`prefetch::across_files`), which the kernel reading a copy would not (measured on 1 MiB files:
/// warm reads 0.54-0.80 of local disk with passthrough, 1.1-1.4 without).
const PASSTHROUGH_MIN: u64 = 2 << 20;

/// Another writer handle on an existing buffer; `None` when that buffer was retired (its
/// last handle closed it meanwhile, see `BufState::join`).
async fn join_buf(buf: SharedBuf, truncating: bool) -> Option<SharedBuf> {
    let joined = buf.lock().await.join(truncating);
    joined.then_some(buf)
}

impl ZarrFs {
    /// truncate() of a path: takes effect now (an open file's buffer is written back).
    pub(super) async fn truncate(&self, path: &str, size: u64) -> FsResult<()> {
        let existing = self.writes.bufs().get(path).cloned();
        if let Some(buf) = existing {
            return self.truncate_buf(&buf, size).await;
        }
        // Not open: rewrite the object now (`truncate -s`).
        self.ns.check_writable(path).await?;
        let (node, opened_since) = self.resolve_with_buf(path).await?;
        if let Some(buf) = opened_since {
            return self.truncate_buf(&buf, size).await;
        }
        let node = node.ok_or(FsError::NotFound)?;
        if node.is_dir() {
            return Err(FsError::IsADirectory);
        }
        let mut data = namespace::read_all(&*self.ns, path, &node).await?;
        data.resize(size as usize, 0);
        self.ns.write_file(path, Bytes::from(data)).await?;
        self.cache.invalidate(path);
        Ok(())
    }

    async fn truncate_buf(&self, buf: &SharedBuf, size: u64) -> FsResult<()> {
        buf.lock().await.truncate(size)?;
        self.write_back(buf).await
    }

    /// ftruncate() (also of a file unlinked while open): changes the handle's buffer, which
    /// that handle writes back. `None` when `fh` is no writer handle.
    pub(super) async fn truncate_handle(&self, fh: Option<u64>, size: u64) -> Option<FsResult<()>> {
        let buf = self.handles.dirty_writer_buf(fh?)?;
        let result = buf.lock().await.truncate(size);
        Some(result)
    }

    pub async fn open(&self, ino: u64, flags: i32) -> FsResult<Opened> {
        let path = self.path_of(ino)?;
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let truncating = flags & libc::O_TRUNC != 0;
        if !writing {
            let (node, buf) = self.resolve_with_buf(&path).await?;
            return self.open_for_reading(ino, path, node.ok_or(FsError::NotFound)?, buf);
        }
        self.check_rw()?;
        self.ns.check_writable(&path).await?;
        let buf = loop {
            let existing = self.writes.bufs().get(&path).cloned();
            let buf = match existing {
                Some(buf) => join_buf(buf, truncating).await,
                None => {
                    let (node, pending) = self.resolve_with_buf(&path).await?;
                    if let Some(buf) = pending {
                        // Another open made one since `bufs` was asked: join it.
                        if let Some(buf) = join_buf(buf, truncating).await {
                            break buf;
                        }
                        continue;
                    }
                    let node = node.ok_or(FsError::NotFound)?;
                    if node.is_dir() {
                        return Err(FsError::IsADirectory);
                    }
                    let data = if truncating {
                        Vec::new()
                    } else {
                        namespace::read_all(&*self.ns, &path, &node).await?
                    };
                    let mine = WriteBuf::new(self.writes.spill(), &path, data, truncating)?
                        .with_perms(node.perms)
                        .into_shared();
                    let buf = self
                        .writes
                        .bufs()
                        .entry(path.clone())
                        .or_insert_with(|| mine.clone())
                        .clone();
                    if Arc::ptr_eq(&buf, &mine) {
                        Some(buf)
                    } else {
                        join_buf(buf, truncating).await // another open made one meanwhile
                    }
                }
            };
            // A retired buffer has left `bufs` (see `release`): look again.
            if let Some(buf) = buf {
                break buf;
            }
        };
        self.cache.forget_version(ino);
        let following = self.handles.follow_writer(ino, &buf);
        if following > 0 {
            tracing::debug!(path, following, "readers of the inode follow its writer");
        }
        let fh = self.new_handle(Handle::Write(WriteHandle { ino, path, buf, dirty: truncating }));
        Ok(Opened { fh, keep_cache: false, read_only: false })
    }

    /// A reader's handle on `node`, read from `buf` when `node` is that open write buffer's
    /// (see `resolve_with_buf`).
    pub(super) fn open_for_reading(
        &self,
        ino: u64,
        path: String,
        node: Node,
        buf: Option<SharedBuf>,
    ) -> FsResult<Opened> {
        if node.is_dir() {
            return Err(FsError::IsADirectory);
        }
        // A reader of a write buffer counts too: once the buffer is written back and gone, a
        // reply must not tell its inode the size of another version (a stale answer of the
        // store), or the kernel would cut the buffer's content to it.
        self.admit_reader(ino, &node)?;
        let keep_cache = buf.is_none() && self.cache.keep_cache(ino, &node);
        // Which version a reader got, for tracing a stale read back to its open.
        tracing::debug!(path, size = node.size, version = ?node.content_version(), from_buffer = buf.is_some(), keep_cache, "opened for reading");
        let ra = self.ahead.for_file();
        let fh = self.new_handle(Handle::Read(ReadHandle { ino, path, node, buf, ra }));
        Ok(Opened { fh, keep_cache, read_only: true })
    }

    pub async fn create(&self, parent: u64, name: &str, flags: i32) -> FsResult<(Attr, Opened)> {
        self.check_rw()?;
        let path = self.child_path(parent, name)?;
        self.ns.check_writable(&path).await?;
        let buf = WriteBuf::new(self.writes.spill(), &path, Vec::new(), true)?.into_shared();
        let exclusive = flags & libc::O_EXCL != 0;
        if exclusive {
            // Ask the store, not the metadata cache: EEXIST at open when the key exists now.
            // (The write-back makes it exclusive at the store, see `Put::Create`.)
            self.cache.invalidate(&path);
            buf.lock().await.st.exclusive();
        }
        let exists = match self.resolve(&path).await? {
            Some(node) if node.is_dir() => return Err(FsError::IsADirectory),
            Some(_) => true,
            // Another create of the same name may have made its buffer since: join that one.
            None => {
                let mut bufs = self.writes.bufs();
                let taken = bufs.contains_key(&path);
                if !taken {
                    bufs.insert(path.clone(), buf.clone());
                }
                taken
            }
        };
        if exists {
            // The kernel thought the name was free (its view was out of date): open the file
            // as open(2) would, truncating only if asked to.
            if flags & libc::O_EXCL != 0 {
                return Err(FsError::Exists);
            }
            let ino = lock(&self.inodes).get_or_insert(&path, true);
            let opened = self.open(ino, flags).await?;
            return Ok((self.getattr(ino).await?, opened));
        }
        self.cache.invalidate(&path);
        let ino = lock(&self.inodes).get_or_insert(&path, true);
        self.cache.forget_version(ino);
        let fh = self.new_handle(Handle::Write(WriteHandle { ino, path, buf, dirty: true }));
        // A new file: what the store gives it at the write-back, the mount's file mode (a local
        // directory's 0644 less the daemon's umask) is what it shows meanwhile.
        let shown = self.cfg.perms.shown(false, None);
        let attr = Attr {
            ino,
            kind: FileKind::File,
            size: 0,
            mtime: SystemTime::now(),
            perm: shown.mode,
            uid: shown.uid,
            gid: shown.gid,
            nlink: 1,
        };
        Ok((attr, Opened { fh, keep_cache: false, read_only: false }))
    }

    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> FsResult<Bytes> {
        let from = self.handles.lock().get(&fh).and_then(Handle::read_from);
        match from.ok_or(FsError::BadHandle)? {
            (path, ReadFrom::Buffer(buf)) => {
                let b = buf.lock().await;
                b.data.read(offset, size).map_err(|e| io_err(&path, e))
            }
            (path, ReadFrom::Node { ino, node, ra }) => {
                if offset == 0 {
                    self.fetch_next_files(&path);
                }
                self.read_ahead(ino, &ra, &path, &node, offset, size).await
            }
        }
    }

    /// A read from the namespace. When the file changed since `node` was resolved (ESTALE),
    /// what this mount and the kernel know of it is dropped, so the next open sees the change.
    async fn read_node(
        &self,
        ino: u64,
        path: &str,
        node: &Node,
        offset: u64,
        size: u32,
    ) -> FsResult<Bytes> {
        let r = self.ns.read(path, node, offset, size).await;
        self.note_stale(ino, path, r)
    }

    /// A read that found the file changed since `node` was resolved (ESTALE): what this mount
    /// and the kernel know of it is dropped, so the next open sees the change.
    fn note_stale(&self, ino: u64, path: &str, r: FsResult<Bytes>) -> FsResult<Bytes> {
        if matches!(r, Err(FsError::Stale)) {
            tracing::debug!(path, "changed since it was opened: ESTALE");
            self.cache.invalidate(path);
            self.cache.forget_version(ino);
            if let Some(invalidate) = self.invalidator.get() {
                invalidate(ino);
            }
        }
        r
    }

    /// `path` is being read from its start: when that continues a scan of its directory in
    /// listing order, start fetching the next files (those whose node the listing cached).
    fn fetch_next_files(&self, path: &str) {
        let (dir, name) = split_key(path);
        let next = self.ahead.scans().reading(dir, name);
        if next.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        for name in next {
            let Some(Some(node)) = self.cached_node(&join_key(dir, &name)) else { continue };
            if node.is_dir() {
                continue;
            }
            let ns = self.ns.clone();
            rt.spawn(async move { ns.prefetch(&node).await });
        }
    }

    /// A read without a handle (the kernel sends no OPEN, see `serve_without_open`): by inode,
    /// from its current node.
    pub async fn read_inode(&self, ino: u64, offset: u64, size: u32) -> FsResult<Bytes> {
        let path = self.path_of(ino)?;
        let (node, buf) = self.resolve_with_buf(&path).await?;
        let node = node.ok_or(FsError::NotFound)?;
        if let Some(buf) = buf {
            let b = buf.lock().await;
            return b.data.read(offset, size).map_err(|e| io_err(&path, e));
        }
        if node.is_dir() {
            return Err(FsError::IsADirectory);
        }
        if let Err(stale) = self.check_told(ino, &node) {
            return self.note_stale(ino, &path, Err(stale));
        }
        self.note_version(ino, &node);
        if offset == 0 {
            self.fetch_next_files(&path);
        }
        let ra = self.ahead.for_inode(ino);
        self.read_ahead(ino, &ra, &path, &node, offset, size).await
    }

    async fn read_ahead(
        &self,
        ino: u64,
        ra: &SharedReadAhead,
        path: &str,
        node: &Node,
        offset: u64,
        size: u32,
    ) -> FsResult<Bytes> {
        let stored = matches!(node.backing, Backing::Object { .. } | Backing::Slice { .. });
        // A read of a whole stored file from its start (a chunk file read in one go, by the
        // kernel or by `serve`) leaves nothing within the file to read ahead.
        if stored && offset == 0 && u64::from(size) >= node.size {
            return self.read_node(ino, path, node, offset, size).await;
        }
        let mut ra = ra.lock().await;
        // Store objects and ranges of them: overlapped, split windows (see `prefetch::within_file`).
        if stored {
            let (ns, p, n) = (self.ns.clone(), path.to_string(), node.clone());
            let fetch: within_file::Fetcher<FsError> = Arc::new(move |off, len| {
                let (ns, p, n) = (ns.clone(), p.clone(), n.clone());
                Box::pin(async move { ns.read(&p, &n, off, len as u32).await })
            });
            let r = ra.read(offset, size, node.size, &fetch).await;
            return self.note_stale(ino, path, r);
        }
        // A flat file's read costs the chunks under it: a window past it would fetch chunks
        // the reader may never ask for (two adjacent pages of a memmap window look
        // sequential); the kernel's own read-ahead serves sequential readers.
        if matches!(node.backing, Backing::Flat(_)) {
            return self.read_node(ino, path, node, offset, size).await;
        }
        if let Some(data) = ra.take(offset, size, node.size) {
            return Ok(data);
        }
        let (from, len) = ra.plan(offset, size, node.size);
        let fetched = self.read_node(ino, path, node, from, len.max(size as u64) as u32).await?;
        Ok(ra.fill(offset, size, fetched))
    }

    pub async fn write(&self, fh: u64, offset: u64, data: &[u8]) -> FsResult<u32> {
        let buf = self.handles.dirty_writer_buf(fh).ok_or(FsError::BadHandle)?;
        buf.lock().await.write(offset, data)?;
        Ok(data.len() as u32)
    }

    /// Write a buffer back to the namespace if its state asks for it. Errors reach the caller
    /// of close()/fsync().
    pub(super) async fn write_back(&self, buf: &SharedBuf) -> FsResult<()> {
        let mut b = buf.lock().await;
        let Some(put) = b.st.write_back() else { return Ok(()) };
        let path = b.path.clone();
        // A spilled body is the spill file itself: the buffer stays locked until it is stored.
        let body = b.data.body().map_err(|e| io_err(&path, e))?;
        let result = match put {
            Put::Replace => self.ns.write_file_body(&path, body).await,
            Put::Create => {
                crate::metrics::global().conditional_writes.inc();
                let data = body.into_bytes().map_err(|e| io_err(&path, e))?;
                self.ns.create_file(&path, data).await
            }
        };
        match b.st.stored(put, &result) {
            AfterPut::Nothing => {}
            AfterPut::Invalidate => self.cache.invalidate(&path),
            AfterPut::Forget => {
                // Another writer (another daemon) created the key after our open: this file
                // lost the race. Nothing of it is stored, and its name now means the winner's.
                crate::metrics::global().create_conflicts.inc();
                tracing::info!(path = ?path, "exclusive create lost to another writer: EEXIST");
                drop(b);
                self.writes.drop_buf(&path, buf);
                self.cache.invalidate(&path);
            }
        }
        result
    }

    /// close(): the buffer goes to the store if this handle changed it since its last flush,
    /// or an earlier write-back of it failed. A reader's close never stores a writer's
    /// unfinished data.
    pub async fn flush(&self, fh: u64) -> FsResult<()> {
        self.write_back_from(fh, false).await
    }

    /// fsync(): like close(), and also whatever other writers left unstored.
    pub async fn fsync(&self, fh: u64) -> FsResult<()> {
        self.write_back_from(fh, true).await
    }

    async fn write_back_from(&self, fh: u64, whole_file: bool) -> FsResult<()> {
        let Some((buf, handle_dirty)) = self.handles.take_dirty(fh)? else { return Ok(()) };
        if !buf.lock().await.st.wants_write_back(handle_dirty, whole_file) {
            return Ok(());
        }
        let result = self.write_back(&buf).await;
        if result.is_err() && handle_dirty {
            self.handles.dirty_writer_buf(fh); // still this handle's to write
        }
        result
    }

    /// Whether opens look for a local copy for the kernel to read directly (FUSE passthrough).
    pub fn wants_passthrough(&self) -> bool {
        self.cfg.read_only && self.cfg.passthrough
    }

    /// A local file of exactly the bytes of the file open as `fh`, for the kernel to read
    /// directly: a whole store object whose store keeps a copy of that version (the disk
    /// cache). A file with a write buffer has none (its bytes are the buffer's).
    pub async fn local_copy(&self, fh: u64) -> Option<std::fs::File> {
        let node = match self.handles.lock().get(&fh)? {
            Handle::Read(h) if h.buf.is_none() && h.node.size >= PASSTHROUGH_MIN => h.node.clone(),
            _ => return None,
        };
        let ns = self.ns.clone();
        tokio::task::spawn_blocking(move || ns.local_copy(&node)).await.ok().flatten()
    }

    /// The content version of the file open as `fh` (see `Node::content_version`).
    pub fn handle_version(&self, fh: u64) -> Option<String> {
        self.handles.version(fh)
    }

    /// The stored node a reader's handle reads (the version it was opened at: its size, date
    /// and content version), for a front door that answers with them (`serve`).
    pub fn opened_node(&self, fh: u64) -> Option<Node> {
        self.handles.reader_node(fh)
    }

    /// Release a handle that has no write buffer (nothing to write back), without I/O.
    /// Returns false when the handle needs the async `release`.
    pub fn release_reader(&self, fh: u64) -> bool {
        match self.handles.remove_reader(fh) {
            Some(ino) => {
                self.release_reader_of(ino);
                true
            }
            None => false,
        }
    }

    pub async fn release(&self, fh: u64) -> FsResult<()> {
        let Some(handle) = self.handles.lock().remove(&fh) else { return Err(FsError::BadHandle) };
        let Handle::Write(WriteHandle { buf, dirty, .. }) = handle else {
            if let Handle::Read(ReadHandle { ino, .. }) = handle {
                self.release_reader_of(ino);
            }
            return Ok(());
        };
        let retry = buf.lock().await.st.wants_write_back(dirty, false);
        let result = if retry { self.write_back(&buf).await } else { Ok(()) };
        let mut b = buf.lock().await;
        if b.st.close_handle(result.is_ok()) {
            // Out of `bufs` before its lock is let go: an open waiting on that lock finds it
            // retired, looks again, and no longer finds it there.
            let path = b.path.clone();
            self.writes.drop_buf(&path, &buf);
        }
        result
    }

    /// Write back every dirty buffer and keep staged temp files under their own names (so
    /// nothing written through the mount is lost at unmount). Returns how many failed.
    pub async fn flush_all(&self) -> usize {
        let bufs: Vec<SharedBuf> = self.writes.bufs().values().cloned().collect();
        let mut failed = 0;
        for buf in bufs {
            buf.lock().await.st.unstage();
            if let Err(e) = self.write_back(&buf).await {
                let path = buf.lock().await.path.clone();
                tracing::error!(path = ?path, error = %e, "could not write back at unmount");
                failed += 1;
            }
        }
        failed
    }
}
