//! The version the kernel holds of each file, kept equal to the version its readers have
//! open.
//!
//! The kernel reads an open file up to the size it was last told of the inode (a lookup, a
//! getattr, a listing), whatever version the reader's handle holds, takes a short read before
//! that size for the end of the file, and shares its cached pages between every reader of the
//! inode. One inode per path means that another daemon's rewrite can leave them apart: told
//! the old size at a lookup, a reader whose open then resolves the new version reads the new
//! bytes cut to the old size; told the new size by another process's lookup while a reader
//! has the old version open, that reader gets the old bytes cut to the new size; two readers
//! of two versions of the same size fill one page cache with pages of both. None of those is
//! a version ever written.
//!
//! So (the counters live in the inode table, under its lock; replies carrying a write buffer
//! of this mount are the kernel's own doing and not checked, a file rewritten in place mixes
//! as on a local disk; but a reader of such a buffer counts, at the buffer's size, so that once
//! the buffer is stored and gone no stale answer of the store cuts it; and a writer's open
//! moves the inode's readers onto its buffer, `Handles::follow_writer`, since the kernel reads
//! them up to the size the writes give the inode):
//! - a reply never tells an inode held open by readers another version: the name gets a new
//!   inode instead, and the old one lives on for its readers as a file replaced by a rename
//!   does (`named_attr`, `inode_attr`);
//! - an open of another version than the kernel was told, or of an inode that was told several
//!   versions since the kernel last dropped its attributes (replies racing in flight may have
//!   left either), invalidates the kernel's attributes before it is answered: the kernel then
//!   asks again before it reads past the size it has, and is told the reader's
//!   (`admit_reader`);
//! - an open of an inode that other readers hold at another version is `ESTALE`: the kernel
//!   looks the name up again and gets the new inode.

use std::hash::{Hash, Hasher};

use crate::fs::inodes::table::ReaderOpened;
use crate::fs::{Attr, FsError, FsResult, ZarrFs};
use crate::locks::lock;
use crate::views::shared::mapping::node::Node;

/// What the inode table keeps of a stored file's version: its size and content version,
/// hashed (a slot holds 8 bytes, not the tag). `None` for a directory.
pub(super) fn fingerprint(node: &Node) -> Option<u64> {
    if node.is_dir() {
        return None;
    }
    let mut h = std::hash::DefaultHasher::new();
    node.size.hash(&mut h);
    node.hash_content_version(&mut h);
    Some(h.finish())
}

impl ZarrFs {
    /// The attributes to answer a lookup (or a listing entry, `lookup` false for none) of
    /// `path` at `node` with: its inode, or a new one when readers hold it at another version.
    /// `stored`: `node` is what the store holds, not this mount's write buffer.
    pub(super) fn named_attr(&self, path: &str, node: &Node, stored: bool, lookup: bool) -> Attr {
        let told = if stored { fingerprint(node) } else { None };
        let ino = self.named_ino(path, told, lookup);
        self.note_version(ino, node);
        self.attr_of(ino, node)
    }

    /// The inode to hand the kernel for `path`, a stored file at version `told` (`None`: a
    /// directory or a write buffer), with a kernel reference if `lookup`: see `named_attr`.
    pub(super) fn named_ino(&self, path: &str, told: Option<u64>, lookup: bool) -> u64 {
        let mut inodes = lock(&self.inodes);
        let mut ino = inodes.get_or_insert(path, false);
        if let Some(told) = told {
            if !inodes.tell(ino, told) {
                ino = inodes.renumber(path);
                inodes.tell(ino, told);
                tracing::debug!(path, "changed while open for reading: a new inode");
            }
        }
        if lookup {
            inodes.add_lookup(ino);
        }
        ino
    }

    /// The attributes to answer a getattr of `ino` (at `path`, now the stored `node`) with;
    /// `None` when readers hold `ino` at another version: the name then leads to a new inode
    /// from now on, and `ino` is answered as the file its readers have (`unlinked_attr`).
    pub(super) fn inode_attr(&self, ino: u64, path: &str, node: &Node) -> Option<Attr> {
        if let Some(told) = fingerprint(node) {
            let mut inodes = lock(&self.inodes);
            if !inodes.tell(ino, told) {
                inodes.renumber(path);
                tracing::debug!(path, "changed while open for reading: a new inode");
                return None;
            }
        }
        self.note_version(ino, node);
        Some(self.attr_of(ino, node))
    }

    /// A reader opens `ino` at `node` (a stored version, or this mount's write buffer).
    pub(super) fn admit_reader(&self, ino: u64, node: &Node) -> FsResult<()> {
        let Some(told) = fingerprint(node) else { return Ok(()) };
        let opened = lock(&self.inodes).open_reader(ino, told);
        match opened {
            ReaderOpened::Consistent => Ok(()),
            ReaderOpened::InvalidateAttrs => {
                // Before the open is answered: the kernel then reads no further than the end
                // of this version without asking (see the module's comment).
                if let Some(invalidate) = self.attr_invalidator.get() {
                    invalidate(ino);
                }
                Ok(())
            }
            ReaderOpened::Stale => {
                tracing::debug!(ino, "open of a file held open at another version: ESTALE");
                Err(FsError::Stale)
            }
        }
    }

    /// A reader of `ino` (admitted by `admit_reader`) closed.
    pub(super) fn release_reader_of(&self, ino: u64) {
        lock(&self.inodes).close_reader(ino);
    }

    /// A read without a handle (openless mode) of `ino` at the stored `node`: `ESTALE` when
    /// the kernel was told another version (it would cut this one to that one's size, or stop
    /// short of its end).
    pub(super) fn check_told(&self, ino: u64, node: &Node) -> FsResult<()> {
        match (lock(&self.inodes).told(ino), fingerprint(node)) {
            (Some(told), Some(now)) if told != now => Err(FsError::Stale),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use bytes::Bytes;

    use crate::fs::inodes::table::ROOT_INO;
    use crate::fs::{Attr, FsConfig, FsError, ZarrFs};
    use crate::locks::lock;
    use crate::perms::ShownPerms;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::prelude::*;
    use crate::views::shared::namespace::Namespace;
    use crate::views::{build, ViewKind, ViewOptions};

    /// Each view over `store`, with no metadata TTL: every lookup and open asks the store,
    /// so another daemon's write lands between any two of them, as it can past a TTL.
    fn views(store: Arc<MemoryStore>) -> Vec<(&'static str, Arc<dyn Namespace>)> {
        [ViewKind::Raw, ViewKind::Unsharded, ViewKind::Decoded, ViewKind::V2, ViewKind::Flat]
            .into_iter()
            .map(|kind| (kind.name(), build(kind, store.clone(), &ViewOptions::default())))
            .collect()
    }

    /// What the kernel does with the attributes it is told: one size per inode, read up to
    /// without asking unless its attributes were invalidated (then a getattr at the end).
    #[derive(Default)]
    struct Kernel {
        sizes: HashMap<u64, u64>,
        invalidated: Arc<Mutex<HashSet<u64>>>,
    }

    impl Kernel {
        fn over(ns: Arc<dyn Namespace>) -> (Self, ZarrFs) {
            let fs = ZarrFs::new(
                ns,
                FsConfig {
                    metadata_ttl: Duration::ZERO,
                    read_only: false,
                    passthrough: false,
                    perms: ShownPerms::of_this_process(),
                },
            );
            let kernel = Kernel::default();
            let invalidated = kernel.invalidated.clone();
            fs.set_attr_invalidator(Box::new(move |ino| {
                lock(&invalidated).insert(ino);
            }));
            (kernel, fs)
        }

        fn told(&mut self, a: Attr) -> Attr {
            self.sizes.insert(a.ino, a.size);
            lock(&self.invalidated).remove(&a.ino);
            a
        }

        async fn lookup(&mut self, fs: &ZarrFs, path: &str) -> Attr {
            let mut at = ROOT_INO;
            let mut attr = None;
            for name in path.split('/') {
                let a = self.told(fs.lookup(at, name).await.unwrap());
                at = a.ino;
                attr = Some(a);
            }
            attr.unwrap()
        }

        /// open(2) and read(2) to the end, as the kernel serves them: ESTALE from OPEN makes
        /// it look the name up again once.
        async fn read_file(
            &mut self,
            fs: &ZarrFs,
            path: &str,
            ino: u64,
        ) -> Result<Vec<u8>, FsError> {
            let (mut ino, mut retried) = (ino, false);
            let fh = loop {
                match fs.open(ino, libc::O_RDONLY).await {
                    Ok(o) => break o.fh,
                    Err(FsError::Stale) if !retried => {
                        retried = true;
                        ino = self.lookup(fs, path).await.ino;
                    }
                    Err(e) => return Err(e),
                }
            };
            let mut out = Vec::new();
            loop {
                if out.len() as u64 >= self.sizes[&ino] {
                    if !lock(&self.invalidated).contains(&ino) {
                        break;
                    }
                    self.told(fs.getattr(ino).await?);
                    continue;
                }
                let want = (self.sizes[&ino] - out.len() as u64).min(4096) as u32;
                let got = fs.read(fh, out.len() as u64, want).await?;
                if got.is_empty() {
                    break;
                }
                out.extend_from_slice(&got);
            }
            fs.release(fh).await.unwrap();
            Ok(out)
        }
    }

    fn version(n: u8, len: usize) -> Bytes {
        Bytes::from(vec![n; len])
    }

    /// Read a version whole, or fail with ESTALE: anything else is bytes never written.
    fn assert_one_version(view: &str, got: &Result<Vec<u8>, FsError>, versions: &[Bytes]) {
        match got {
            Ok(data) => assert!(
                versions.iter().any(|v| v[..] == data[..]),
                "{view}: read {} bytes of version {:?}, a version that has {:?} bytes",
                data.len(),
                data.first(),
                versions.iter().map(|v| v.len()).collect::<Vec<_>>(),
            ),
            Err(e) => assert!(matches!(e, FsError::Stale), "{view}: {e:?}"),
        }
    }

    /// A lookup tells the kernel one version's size; another daemon's rewrite lands before the
    /// open, which resolves the new version: the reader gets the new version whole, not its
    /// bytes cut to the old size (nor read on past it). Longer and shorter, in every view.
    #[tokio::test]
    async fn an_open_after_another_daemons_rewrite_reads_one_whole_version() {
        for (old_len, new_len) in [(5000, 9000), (9000, 5000)] {
            let store = Arc::new(MemoryStore::new());
            for (view, ns) in views(store.clone()) {
                let (v1, v2) = (version(1, old_len), version(2, new_len));
                store.put("files/f", v1.clone()).await.unwrap();
                let (mut kernel, fs) = Kernel::over(ns);
                let attr = kernel.lookup(&fs, "files/f").await;
                assert_eq!(attr.size, old_len as u64, "{view}");
                store.put("files/f", v2.clone()).await.unwrap(); // the other daemon's write
                let got = kernel.read_file(&fs, "files/f", attr.ino).await;
                assert_one_version(view, &got, &[v1, v2.clone()]);
                assert_eq!(got.unwrap(), v2[..], "{view}");
            }
        }
    }

    /// A reader has one version open; another process's lookup sees the rewrite: the name
    /// gets a new inode, so the kernel never cuts the open reader's version to the new size
    /// (or the new reader's to the old), nor fills one page cache with pages of both (a new
    /// version of the same size), and both read whole versions.
    #[tokio::test]
    async fn a_lookup_while_a_reader_has_the_old_version_gives_the_name_a_new_inode() {
        for (old_len, new_len) in [(9000, 5000), (5000, 9000), (7000, 7000)] {
            let store = Arc::new(MemoryStore::new());
            for (view, ns) in views(store.clone()) {
                let (v1, v2) = (version(1, old_len), version(2, new_len));
                store.put("files/f", v1.clone()).await.unwrap();
                let (mut kernel, fs) = Kernel::over(ns);
                let old = kernel.lookup(&fs, "files/f").await;
                let reader = fs.open(old.ino, libc::O_RDONLY).await.unwrap().fh;
                let first = fs.read(reader, 0, 4096).await.unwrap();
                assert_eq!(first[..], v1[..4096], "{view}");

                store.put("files/f", v2.clone()).await.unwrap();
                let new = kernel.lookup(&fs, "files/f").await;
                assert_ne!(
                    new.ino, old.ino,
                    "{view}: the open reader's inode was told another size"
                );
                assert_eq!(new.size, new_len as u64, "{view}");
                let old_now = kernel.told(fs.getattr(old.ino).await.unwrap());
                assert_eq!((old_now.size, old_now.nlink), (old_len as u64, 0), "{view}");
                // The first reader goes on: the rest of its version, or ESTALE (the store
                // no longer has it), never the new bytes nor a cut.
                let rest = fs.read(reader, 4096, (old_len - 4096) as u32).await;
                if let Ok(rest) = rest {
                    assert_eq!(rest[..], v1[4096..], "{view}");
                } else {
                    assert!(matches!(rest, Err(FsError::Stale)), "{view}: {rest:?}");
                }
                fs.release(reader).await.unwrap();
                let got = kernel.read_file(&fs, "files/f", new.ino).await;
                assert_eq!(got.unwrap(), v2[..], "{view}");
                // An open of the old inode is ESTALE: the kernel looks the name up again.
                assert!(matches!(fs.open(old.ino, libc::O_RDONLY).await, Err(FsError::Stale)));
            }
        }
    }

    /// Readers of one version share its inode (no renumbering while nothing changed), and an
    /// unchanged file is opened without invalidating anything.
    #[tokio::test]
    async fn an_unchanged_file_keeps_its_inode_and_the_kernels_attributes() {
        let store = Arc::new(MemoryStore::new());
        store.put("files/f", version(1, 100)).await.unwrap();
        for (view, ns) in views(store.clone()) {
            let (mut kernel, fs) = Kernel::over(ns);
            let a = kernel.lookup(&fs, "files/f").await;
            let r1 = fs.open(a.ino, libc::O_RDONLY).await.unwrap().fh;
            assert_eq!(kernel.lookup(&fs, "files/f").await.ino, a.ino, "{view}");
            let r2 = fs.open(a.ino, libc::O_RDONLY).await.unwrap().fh;
            assert!(lock(&kernel.invalidated).is_empty(), "{view}");
            fs.release(r1).await.unwrap();
            fs.release(r2).await.unwrap();
        }
    }

    /// A flat file's size and layout follow the array's metadata: a chunk that another daemon
    /// rewrites shows in it, whole, at the next open, and never changes the file's size.
    #[tokio::test]
    async fn a_flat_file_keeps_its_size_and_shows_each_chunk_whole() {
        let store = Arc::new(MemoryStore::new());
        let meta = serde_json::json!({
            "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "bytes"}],
        });
        store.put("a/zarr.json", Bytes::from(meta.to_string())).await.unwrap();
        store.put("a/c/0", Bytes::from_static(&[1, 1])).await.unwrap();
        store.put("a/c/1", Bytes::from_static(&[2, 2])).await.unwrap();
        let flat = build(ViewKind::Flat, store.clone(), &ViewOptions::default());
        let (mut kernel, fs) = Kernel::over(flat);
        let npy = kernel.lookup(&fs, "a.npy").await;
        let first = kernel.read_file(&fs, "a.npy", npy.ino).await.unwrap();
        assert_eq!(first[first.len() - 4..], [1, 1, 2, 2]);
        store.put("a/c/1", Bytes::from_static(&[3, 3])).await.unwrap(); // the other daemon
        let again = kernel.lookup(&fs, "a.npy").await;
        assert_eq!(again.size, npy.size);
        let second = kernel.read_file(&fs, "a.npy", again.ino).await.unwrap();
        assert_eq!(second.len(), first.len());
        assert_eq!(second[second.len() - 4..], [1, 1, 3, 3]);
    }

    /// A reader of this mount's write buffer holds its inode at the buffer's size: once the
    /// buffer is written back and gone, a getattr that finds another version at the store (a
    /// later write elsewhere, or an answer from before the write) must not tell the kernel
    /// that version's size, which would cut the reader's content to it.
    #[tokio::test]
    async fn a_reader_of_a_write_buffer_keeps_its_size_after_the_buffer_is_gone() {
        let store = Arc::new(MemoryStore::new());
        let (mut kernel, fs) =
            Kernel::over(build(ViewKind::Raw, store.clone(), &ViewOptions::default()));
        let (attr, w) = fs.create(ROOT_INO, "k", 0).await.unwrap();
        fs.write(w.fh, 0, b"the new version").await.unwrap();
        fs.flush(w.fh).await.unwrap();
        let r = fs.open(attr.ino, libc::O_RDONLY).await.unwrap().fh; // from the buffer
        fs.release(w.fh).await.unwrap();
        store.put("k", Bytes::from_static(b"other")).await.unwrap();
        let now = kernel.told(fs.getattr(attr.ino).await.unwrap());
        assert_eq!(now.size, 15, "the buffer reader's inode was told another version's size");
        assert_eq!(&fs.read(r, 0, 64).await.unwrap()[..], b"the new version");
        fs.release(r).await.unwrap();
        let again = kernel.lookup(&fs, "k").await;
        assert_ne!(again.ino, attr.ino);
        assert_eq!(again.size, 5);
    }

    /// A reader has one version open through the mount that then rewrites the file in place
    /// (open with O_TRUNC, write, close): one inode has one content, as on a local disk. The
    /// kernel reads that inode up to the size the writes gave it, so the reader gets the
    /// writer's bytes, during the rewrite and after it; left on its own version it got that
    /// version's bytes and, past its end, a page the kernel filled with zeros (the contention
    /// soak's "pages: v108x53 ?x1" on s3s-fs). Longer and shorter rewrites.
    #[tokio::test]
    async fn a_reader_follows_an_in_place_rewrite_through_its_own_mount() {
        for (old_len, new_len) in [(5000, 9000), (9000, 5000)] {
            let store = Arc::new(MemoryStore::new());
            let (v1, v2) = (version(1, old_len), version(2, new_len));
            store.put("files/f", v1.clone()).await.unwrap();
            let (mut kernel, fs) =
                Kernel::over(build(ViewKind::Raw, store.clone(), &ViewOptions::default()));
            let a = kernel.lookup(&fs, "files/f").await;
            let r = fs.open(a.ino, libc::O_RDONLY).await.unwrap().fh;
            assert_eq!(fs.read(r, 0, 4096).await.unwrap()[..], v1[..4096]);

            let w = fs.open(a.ino, libc::O_WRONLY | libc::O_TRUNC).await.unwrap().fh;
            fs.write(w, 0, &v2[..4500]).await.unwrap();
            let during = fs.read(r, 4096, 4096).await.unwrap();
            assert_eq!(during[..], v2[4096..4500], "{old_len} -> {new_len}: during the rewrite");
            fs.write(w, 4500, &v2[4500..]).await.unwrap();
            fs.flush(w).await.unwrap();
            fs.release(w).await.unwrap();
            let after = fs.read(r, 4096, new_len as u32).await.unwrap();
            assert_eq!(after[..], v2[4096..], "{old_len} -> {new_len}: after the rewrite");
            fs.release(r).await.unwrap();
            assert_eq!(store.get("files/f").await.unwrap(), v2);
        }
    }
}
