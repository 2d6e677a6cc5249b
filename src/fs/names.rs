//! Changes of names: unlink, rename and link. Where a name has a write buffer, its state
//! (`write_buf::BufState`) decides what the store must do; the I/O is done here.

use bytes::Bytes;

use crate::fs::write::write_buf::{io_err, OldName, SharedBuf, WriteBuf};
use crate::fs::{Attr, FsError, FsResult, ZarrFs};
use crate::locks::lock;
use crate::store::split_key;
use crate::views::shared::mapping::node::Node;
use crate::views::shared::namespace::{self, is_staged_name};

impl ZarrFs {
    pub async fn unlink(&self, parent: u64, name: &str) -> FsResult<()> {
        self.check_rw()?;
        let path = self.child_path(parent, name)?;
        let buf = self.writes.bufs().get(&path).cloned();
        let mut old_name = OldName::Remove;
        if let Some(buf) = buf {
            old_name = buf.lock().await.st.unlink();
            self.writes.bufs().remove(&path);
        }
        match old_name {
            OldName::Remove => {
                let node = self.resolve(&path).await?.ok_or(FsError::NotFound)?;
                if node.is_dir() {
                    return Err(FsError::IsADirectory);
                }
                self.ns.remove_file(&path).await?;
            }
            // Open for writing with changes not yet stored: a new file is not in the store,
            // but one opened from the store is, and must not come back.
            OldName::RemoveIfPresent => {
                if self.ns.lookup(&path).await?.is_some() {
                    self.ns.remove_file(&path).await?;
                }
            }
            OldName::Keep => {}
        }
        self.cache.invalidate(&path);
        lock(&self.inodes).unlink_path(&path);
        Ok(())
    }

    pub async fn rename(
        &self,
        parent: u64,
        name: &str,
        newparent: u64,
        newname: &str,
        flags: u32,
    ) -> FsResult<()> {
        self.check_rw()?;
        if flags & libc::RENAME_EXCHANGE != 0 {
            return Err(FsError::NotSupported("RENAME_EXCHANGE"));
        }
        let from = self.child_path(parent, name)?;
        let to = self.child_path(newparent, newname)?;
        let node = self.resolve(&from).await?.ok_or(FsError::NotFound)?;
        let target = self.resolve(&to).await?;
        if flags & libc::RENAME_NOREPLACE != 0 && target.is_some() {
            return Err(FsError::Exists);
        }
        if from == to {
            return Ok(());
        }
        if node.is_dir() {
            self.rename_dir(&from, &to, target).await?;
        } else {
            self.rename_file(&from, &to, target).await?;
        }
        lock(&self.inodes).rename(&from, &to);
        Ok(())
    }

    async fn rename_dir(&self, from: &str, to: &str, target: Option<Node>) -> FsResult<()> {
        if let Some(t) = &target {
            if !t.is_dir() {
                return Err(FsError::NotADirectory);
            }
            if !self.ns.list(to).await?.is_empty() {
                return Err(FsError::NotEmpty);
            }
            self.ns.rmdir(to).await?;
        }
        if to.starts_with(&format!("{from}/")) {
            return Err(FsError::InvalidName("cannot move a directory into itself"));
        }
        self.ns.rename(from, to, true).await?;
        self.cache.invalidate_tree(from);
        self.cache.invalidate_tree(to);
        Ok(())
    }

    async fn rename_file(&self, from: &str, to: &str, target: Option<Node>) -> FsResult<()> {
        if target.as_ref().is_some_and(Node::is_dir) {
            return Err(FsError::IsADirectory);
        }
        self.ns.check_writable(to).await?;
        let buf = self.writes.bufs().get(from).cloned();
        let still_open = match buf {
            Some(buf) => self.move_buffer(from, to, buf).await?,
            None => {
                self.ns.rename(from, to, false).await?;
                None
            }
        };
        // A writer still open on the replaced file now writes nowhere: its file is
        // unlinked, as on POSIX (its close must not bring the old content back).
        let replaced = self.writes.bufs().remove(to);
        if let Some(old) = replaced {
            old.lock().await.st.replaced();
        }
        if let Some(buf) = still_open {
            self.writes.bufs().insert(to.to_string(), buf);
        }
        self.cache.invalidate(from);
        self.cache.invalidate(to);
        Ok(())
    }

    /// A buffered file (a staged temp file, or open for writing): its content goes to the new
    /// name in one write, and the old name leaves the store if it is there. Returns the buffer
    /// if it is still open (it follows the rename, see `BufState::renamed`).
    async fn move_buffer(
        &self,
        from: &str,
        to: &str,
        buf: SharedBuf,
    ) -> FsResult<Option<SharedBuf>> {
        let mut b = buf.lock().await;
        let body = b.data.body().map_err(|e| io_err(from, e))?;
        let old_name = b.st.rename_source();
        self.ns.write_file_body(to, body).await?;
        let remove = match old_name {
            OldName::Remove => true,
            OldName::RemoveIfPresent => self.ns.lookup(from).await?.is_some(),
            OldName::Keep => false,
        };
        if remove {
            self.ns.remove_file(from).await?;
        }
        self.writes.bufs().remove(from);
        let open = b.renamed(to);
        drop(b);
        Ok(open.then_some(buf))
    }

    /// link(2) as an atomic create: `newname` gets the content the file `ino` has now (its
    /// write buffer if it is open or a staged temp file, which is not uploaded for this), stored
    /// with one create-if-absent put, so EEXIST comes from the store itself when the key exists,
    /// also if another daemon made it a moment ago. The two names are then independent files
    /// (a store has no hard links): the new one gets its own inode, and later writes to either
    /// do not show in the other.
    pub async fn link(&self, ino: u64, newparent: u64, newname: &str) -> FsResult<Attr> {
        self.check_rw()?;
        let from = self.path_of(ino)?;
        let to = self.child_path(newparent, newname)?;
        self.ns.check_writable(&to).await?;
        let (node, buf) = self.resolve_with_buf(&from).await?;
        let node = node.ok_or(FsError::NotFound)?;
        let data = match buf {
            Some(buf) => {
                let mut b = buf.lock().await;
                b.data.body().and_then(|b| b.into_bytes()).map_err(|e| io_err(&from, e))?
            }
            None => {
                if node.is_dir() {
                    return Err(FsError::NotPermitted("hard links to directories"));
                }
                Bytes::from(namespace::read_all(&*self.ns, &from, &node).await?)
            }
        };
        if self.pending_node(&to).await.is_some() {
            return Err(FsError::Exists);
        }
        if is_staged_name(split_key(&to).1) {
            // A temp-file name lives in memory until renamed, like one made by create().
            if self.resolve(&to).await?.is_some() {
                return Err(FsError::Exists);
            }
            let staged = WriteBuf::new(self.writes.spill(), &to, data.to_vec(), true)?
                .without_handles()
                .into_shared();
            let mut bufs = self.writes.bufs();
            if bufs.contains_key(&to) {
                return Err(FsError::Exists);
            }
            bufs.insert(to.clone(), staged);
        } else {
            match self.ns.create_file(&to, data).await {
                Err(FsError::Exists) => {
                    crate::metrics::global().create_conflicts.inc();
                    self.cache.invalidate(&to);
                    return Err(FsError::Exists);
                }
                r => r?,
            }
            crate::metrics::global().conditional_writes.inc();
        }
        self.cache.invalidate(&to);
        let (node, buf) = self.resolve_with_buf(&to).await?;
        let node = node.ok_or(FsError::NotFound)?;
        Ok(self.named_attr(&to, &node, buf.is_none(), true))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::fs::inodes::table::ROOT_INO;
    use crate::fs::FsConfig;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::prelude::*;
    use crate::views::{ViewKind, ViewOptions};

    /// unlink() of a stored file that is open for writing with changes not yet stored: the
    /// stored object goes too (the name must not come back with the old content).
    #[tokio::test]
    async fn unlinking_a_changed_open_file_removes_the_stored_object() {
        let store = Arc::new(MemoryStore::new());
        store.put("k", Bytes::from_static(b"old")).await.unwrap();
        let ns = crate::views::build(ViewKind::Raw, store.clone(), &ViewOptions::default());
        let fs = ZarrFs::new(
            ns,
            FsConfig {
                metadata_ttl: Duration::from_secs(3600),
                read_only: false,
                passthrough: false,
                perms: crate::perms::ShownPerms::of_this_process(),
            },
        );
        let k = fs.lookup(ROOT_INO, "k").await.unwrap();
        let o = fs.open(k.ino, libc::O_WRONLY).await.unwrap();
        fs.write(o.fh, 0, b"new").await.unwrap();
        fs.unlink(ROOT_INO, "k").await.unwrap();
        fs.release(o.fh).await.unwrap();
        assert!(store.head("k").await.unwrap().is_none(), "the old content is still stored");
        assert_eq!(fs.lookup(ROOT_INO, "k").await.unwrap_err().errno(), libc::ENOENT);
    }
}
