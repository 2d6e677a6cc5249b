//! From inodes and paths to nodes: what a path is now (an open write buffer, a fresh entry of
//! the metadata cache, or the namespace's answer), the attributes shown for it, and the answers
//! that need no I/O.

use crate::fs::write::write_buf::SharedBuf;
use crate::fs::{buf_node, Attr, FileKind, FsError, FsResult, Opened, ZarrFs, MAX_NAME_LEN};
use crate::locks::lock;
use crate::store::join_key;
use crate::views::shared::mapping::node::Node;

impl ZarrFs {
    // ---- paths, caches ----

    /// The path of a live inode. ESTALE for one whose name was unlinked or replaced through
    /// the mount: the name now leads elsewhere (or nowhere), so the kernel must look it up again.
    pub(super) fn path_of(&self, ino: u64) -> FsResult<String> {
        let inodes = lock(&self.inodes);
        let path = inodes.path(ino).ok_or(FsError::NotFound)?;
        if !inodes.is_linked(ino) {
            return Err(FsError::Stale);
        }
        Ok(path.to_string())
    }

    /// fstat() of a file unlinked (or replaced) while open: what the open handle holds, with no
    /// links. Without an open handle the inode is just stale.
    pub(super) async fn unlinked_attr(&self, ino: u64) -> FsResult<Attr> {
        let node = match self.handles.open_content(ino) {
            Some((Some(buf), _)) => buf_node(&*buf.lock().await),
            Some((None, Some(node))) => node,
            _ => return Err(FsError::Stale),
        };
        Ok(Attr { nlink: 0, ..self.attr_of(ino, &node) })
    }

    pub(super) fn child_path(&self, parent: u64, name: &str) -> FsResult<String> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(FsError::InvalidName("not a single path component"));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        Ok(join_key(&self.path_of(parent)?, name))
    }

    pub(super) async fn pending_node(&self, path: &str) -> Option<Node> {
        let buf = self.writes.bufs().get(path).cloned()?;
        let b = buf.lock().await;
        (!b.is_unlinked()).then(|| buf_node(&b))
    }

    /// What `path` is now: an open write buffer, a fresh cache entry, or the namespace's answer.
    pub(super) async fn resolve(&self, path: &str) -> FsResult<Option<Node>> {
        Ok(self.resolve_with_buf(path).await?.0)
    }

    /// `resolve`, with the open write buffer the node is, if it is one. Whoever reads the
    /// bytes must take them from that buffer, not through the node: a buffer's node names the
    /// path as a store key, where the store may hold another version or nothing at all (an
    /// inner chunk lives in its shard), and the buffer can be written back and closed between
    /// this answer and the read.
    pub(super) async fn resolve_with_buf(
        &self,
        path: &str,
    ) -> FsResult<(Option<Node>, Option<SharedBuf>)> {
        let buf = self.writes.bufs().get(path).cloned();
        if let Some(buf) = buf {
            let node = {
                let b = buf.lock().await;
                (!b.is_unlinked()).then(|| buf_node(&b))
            };
            if node.is_some() {
                return Ok((node, Some(buf)));
            }
        }
        Ok((self.resolve_stored(path).await?, None))
    }

    /// What the store holds at `path`: a fresh cache entry, or the namespace's answer.
    async fn resolve_stored(&self, path: &str) -> FsResult<Option<Node>> {
        if let Some(node) = self.cache.get(path) {
            return Ok(node);
        }
        // A change through the mount during the lookup may be newer than its answer: ask
        // again. After a few tries (the path keeps changing) the last answer goes uncached.
        let mut tries = 0;
        loop {
            let watch = self.cache.watch();
            let node = self.ns.lookup(path).await?;
            tries += 1;
            if self.cache.cache_node(&watch, path, node.clone()) || tries == 3 {
                return Ok(node);
            }
        }
    }

    pub(super) fn attr_of(&self, ino: u64, node: &Node) -> Attr {
        let kind = if node.is_dir() { FileKind::Dir } else { FileKind::File };
        let shown = self.cfg.perms.shown(node.is_dir(), node.perms);
        let perm = if self.cfg.read_only { shown.mode & !0o222 } else { shown.mode };
        let nlink = if kind == FileKind::Dir { 2 } else { 1 };
        let (uid, gid) = (shown.uid, shown.gid);
        Attr { ino, kind, size: node.size, mtime: node.modified, perm, uid, gid, nlink }
    }

    /// Without opens: the kernel is about to get (or has read) `node`'s content for `ino`. If
    /// it is not the version it saw last, its cached pages are stale: drop them.
    pub(super) fn note_version(&self, ino: u64, node: &Node) {
        if !self.is_openless() {
            return;
        }
        let Some(v) = node.content_version() else { return };
        if self.cache.note_version(ino, v) {
            self.ahead.forget_inode(ino);
            if let Some(invalidate) = self.invalidator.get() {
                invalidate(ino);
            }
        }
    }

    // ---- answers from memory alone ----
    // The adapter calls these on the FUSE dispatch thread: when the metadata cache already
    // knows the answer no I/O is needed, and skipping the hop to a tokio task roughly halves
    // the cost of opening a small chunk file. `None` means "not cached: ask the async path".

    /// The cached node at `path`, unless a write buffer (whose lock is async) is involved.
    pub(super) fn cached_node(&self, path: &str) -> Option<Option<Node>> {
        if self.writes.bufs().contains_key(path) {
            return None;
        }
        self.cache.get(path)
    }

    pub fn lookup_cached(&self, parent: u64, name: &str) -> Option<FsResult<Attr>> {
        let path = match self.child_path(parent, name) {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        Some(match self.cached_node(&path)? {
            None => Err(FsError::NotFound),
            Some(node) => Ok(self.named_attr(&path, &node, true, true)),
        })
    }

    pub fn getattr_cached(&self, ino: u64) -> Option<FsResult<Attr>> {
        let path = self.path_of(ino).ok()?;
        let node = self.cached_node(&path)??;
        // `None` when renumbered: the async path answers it from the open handles.
        self.inode_attr(ino, &path, &node).map(Ok)
    }

    pub fn open_cached(&self, ino: u64, flags: i32) -> Option<FsResult<Opened>> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return None;
        }
        let path = self.path_of(ino).ok()?;
        let node = self.cached_node(&path)??;
        // No write buffer (`cached_node`): the stored file, as a reader that opened before a
        // writer of it did.
        Some(self.open_for_reading(ino, path, node, None))
    }
}
