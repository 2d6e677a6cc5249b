//! Directory listings that stream: the first READDIR(PLUS) page goes to the kernel as soon as
//! the first page of the backend's listing is in, not after the whole directory was read.
//!
//! An open directory holds a `DirListing`. At its first readdir a task starts that reads the
//! namespace's pages (`Namespace::list_pages`; the local and object-store backends read one
//! page of the directory at a time) into a channel, at most `PAGES_AHEAD` ahead of the reader.
//! Each page, once taken, becomes a batch of entries: its inodes pinned until releasedir (so
//! a plain READDIR hands out numbers that go with the listing), its nodes put in the metadata
//! cache for the lookups that `ls -l` sends next. The kernel resumes at an offset: entry `i`
//! of the listing has offset `i + 1` and entries are kept until releasedir, so a rewind or a
//! seek within what was listed is served again. Releasing a listing midway stops the task
//! and unpins exactly what was handed out; pages in flight are never pinned.
//!
//! The kernel may cache a listing (FOPEN_CACHE_DIR); only a complete one is recorded as
//! listed (`NodeCache::listed`), so only a complete one is kept across opens.
//!
//! A plain READDIR needs names and kinds only (`find` sends nothing else), READDIRPLUS also
//! attributes. Each request says which it is (`MetaWanted`), and the pages read after it are
//! read accordingly: on the local backend a page for READDIR costs no `lstat` per entry. Its
//! files then have no attributes and go uncached; a READDIRPLUS that reaches such a batch
//! (the kernel switched modes, or rewound) first looks its files up.

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use futures::StreamExt;
use tokio::sync::mpsc;

use crate::fs::cache::changes::Watch;
use crate::fs::inodes::table::ROOT_INO;
use crate::fs::sizes::fingerprint;
use crate::fs::write::write_buf::SharedBuf;
use crate::fs::{buf_node, Attr, DirEntry, FileKind, FsError, FsResult, ZarrFs};
use crate::locks::lock;
use crate::store::{join_key, split_key, MetaWanted};
use crate::views::shared::mapping::node::Node;

/// Pages read ahead of the reader, besides the one being read.
const PAGES_AHEAD: usize = 1;
/// Lookups in flight while a batch listed without attributes is filled for READDIRPLUS.
const FILL_LOOKUPS: usize = 16;

/// An open directory and its listing so far.
pub(super) struct DirListing {
    pub(super) ino: u64,
    pub(super) path: String,
    state: Mutex<State>,
    /// Pages still to come; one reader takes them at a time.
    source: tokio::sync::Mutex<Option<Source>>,
    /// Whether the last request was a READDIRPLUS: pages read next carry attributes then.
    wanted: MetaWanted,
}

/// A page of the namespace's listing, with the watch taken before it was asked for.
type WatchedPage = (Watch, FsResult<Vec<(String, Option<Node>)>>);

/// Entries handed out together (a page of the listing).
struct Batch {
    entries: Arc<Vec<DirEntry>>,
    /// Every entry has its attributes, or was found gone when they were asked for.
    filled: bool,
}

/// A listing in progress.
struct Source {
    pages: mpsc::Receiver<WatchedPage>,
    /// Names of the files listed so far (for scan-ahead, once complete).
    files: Vec<String>,
    started: Instant,
}

#[derive(Default)]
struct State {
    /// The entries handed out, in batches (a page each; `.` and `..` lead the first).
    batches: Vec<Batch>,
    /// Entries in `batches`.
    len: usize,
    complete: bool,
    /// releasedir came: nothing more is pinned for this listing.
    released: bool,
    /// The listing failed after entries were handed out: it cannot be resumed.
    failed: Option<FsError>,
    /// The task reading pages.
    reader: Option<tokio::task::AbortHandle>,
}

impl State {
    /// The entries from offset `from`, if they are known (or the listing is complete);
    /// `Err(batch)` when READDIRPLUS (`plus`) needs the attributes of that batch first. For
    /// READDIRPLUS the entries end before the next batch without them.
    fn entries_from(&self, from: usize, plus: bool) -> Option<Result<DirEntries, usize>> {
        if from >= self.len && !self.complete {
            return None;
        }
        let mut start = 0;
        let mut batches = Vec::new();
        for (i, b) in self.batches.iter().enumerate() {
            let end = start + b.entries.len();
            if end > from {
                if plus && !b.filled {
                    if batches.is_empty() {
                        return Some(Err(i));
                    }
                    break;
                }
                batches.push((start, b.entries.clone()));
            }
            start = end;
        }
        Some(Ok(DirEntries { batches, from }))
    }
}

/// Entries of an open directory's listing from an offset on (sharing the listing's batches).
pub struct DirEntries {
    /// (offset of the batch's first entry, batch)
    batches: Vec<(usize, Arc<Vec<DirEntry>>)>,
    from: usize,
}

impl DirEntries {
    /// Each entry with the offset the kernel resumes at after it.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &DirEntry)> {
        self.batches.iter().flat_map(move |(start, batch)| {
            let skip = self.from.saturating_sub(*start);
            batch.iter().enumerate().skip(skip).map(move |(i, e)| ((start + i + 1) as u64, e))
        })
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }
}

/// A listing dropped without releasedir (the handle table goes at unmount) stops its reader.
impl Drop for DirListing {
    fn drop(&mut self) {
        if let Some(reader) = crate::locks::lock(&self.state).reader.take() {
            reader.abort();
        }
    }
}

impl DirListing {
    pub(super) fn new(ino: u64, path: String) -> Self {
        DirListing {
            ino,
            path,
            state: Mutex::new(State::default()),
            source: tokio::sync::Mutex::new(None),
            // The kernel's first request of a listing is READDIRPLUS.
            wanted: MetaWanted::new(true),
        }
    }

    fn check(&self, st: &State) -> FsResult<()> {
        if st.released {
            return Err(FsError::BadHandle);
        }
        match &st.failed {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Every entry handed out so far.
    fn all(&self) -> Vec<DirEntry> {
        let st = lock(&self.state);
        st.batches.iter().flat_map(|b| b.entries.iter().cloned()).collect()
    }
}

impl ZarrFs {
    /// The listing behind a directory handle.
    pub(super) fn dir_listing(&self, fh: u64) -> FsResult<Arc<DirListing>> {
        match self.handles.lock().get(&fh) {
            Some(crate::fs::Handle::Dir(listing)) => Ok(listing.clone()),
            _ => Err(FsError::BadHandle),
        }
    }

    /// The entries of an open directory from `offset` on, when they are in already (no
    /// I/O: the FUSE thread may answer from here); `None` when `readdir_at` must read on.
    /// `plus`: for READDIRPLUS, so with attributes.
    pub fn readdir_ready(&self, fh: u64, offset: u64, plus: bool) -> FsResult<Option<DirEntries>> {
        let listing = self.dir_listing(fh)?;
        listing.wanted.set(plus);
        let st = lock(&listing.state);
        listing.check(&st)?;
        Ok(st.entries_from(offset as usize, plus).and_then(Result::ok))
    }

    /// The entries of an open directory from `offset` on: at least one, unless the listing
    /// ends before it. Reads pages of the listing until then; for READDIRPLUS (`plus`) the
    /// entries have their attributes (a file gone since it was listed has none: skip it).
    pub async fn readdir_at(&self, fh: u64, offset: u64, plus: bool) -> FsResult<DirEntries> {
        let listing = self.dir_listing(fh)?;
        listing.wanted.set(plus);
        self.listed_to(&listing, offset as usize, plus).await
    }

    /// The whole listing of an open directory (read to its end now if it was not yet, with
    /// attributes; entries read earlier by a plain READDIR may lack them).
    pub async fn list_dir(&self, fh: u64) -> FsResult<Arc<Vec<DirEntry>>> {
        let listing = self.dir_listing(fh)?;
        listing.wanted.set(true);
        self.listed_to(&listing, usize::MAX, false).await?;
        Ok(Arc::new(listing.all()))
    }

    /// The whole listing, if it was read to its end already.
    pub fn readdir_listed(&self, fh: u64) -> FsResult<Option<Arc<Vec<DirEntry>>>> {
        let listing = self.dir_listing(fh)?;
        let complete = {
            let st = lock(&listing.state);
            listing.check(&st)?;
            st.complete
        };
        Ok(complete.then(|| Arc::new(listing.all())))
    }

    /// A directory handle is closed: stop its listing and unpin what it handed out.
    pub(super) fn release_listing(&self, listing: &DirListing) {
        let batches = {
            let mut st = lock(&listing.state);
            st.released = true;
            if let Some(reader) = st.reader.take() {
                reader.abort();
            }
            st.len = 0;
            std::mem::take(&mut st.batches)
        };
        for batch in batches {
            self.unpin_listing(&batch.entries);
        }
    }

    /// Read pages until the entry at `offset` is listed or the listing ends (and for
    /// READDIRPLUS, `plus`, until its batch has attributes).
    async fn listed_to(
        &self,
        listing: &DirListing,
        offset: usize,
        plus: bool,
    ) -> FsResult<DirEntries> {
        let mut source = listing.source.lock().await;
        loop {
            let unfilled = {
                let st = lock(&listing.state);
                listing.check(&st)?;
                match st.entries_from(offset, plus) {
                    Some(Ok(entries)) => return Ok(entries),
                    Some(Err(batch)) => Some(batch),
                    None => None,
                }
            };
            if let Some(batch) = unfilled {
                self.fill_batch(listing, batch).await?;
                continue;
            }
            let src = match source.as_mut() {
                Some(src) => src,
                None => source.insert(self.start_listing(listing)),
            };
            match src.pages.recv().await {
                Some((watch, Ok(page))) => {
                    let page = self.page_entries(&listing.path, &watch, page).await?;
                    let files = page.iter().filter(|e| !e.1.as_ref().is_some_and(Node::is_dir));
                    src.files.extend(files.map(|e| e.0.clone()));
                    // The watch lives until the page is cached: a write-back between
                    // `page_entries` and here must keep its old node out of the cache.
                    self.add_batch(listing, page, Some(&watch))?;
                    drop(watch);
                }
                Some((_, Err(e))) => {
                    let mut st = lock(&listing.state);
                    if st.len == 0 {
                        // Nothing handed out: the next readdir may try again from the start.
                        *source = None;
                    } else {
                        st.failed = Some(e.clone());
                    }
                    return Err(e);
                }
                None => {
                    let src = source.take().expect("a listing in progress");
                    self.finish_listing(listing, src).await?;
                }
            }
        }
    }

    /// Look up the files of batch `i` that were listed without attributes (READDIRPLUS
    /// asks for them). One found gone keeps none and is not sent; one that became a
    /// directory is sent as one.
    async fn fill_batch(&self, listing: &DirListing, i: usize) -> FsResult<()> {
        use futures::stream::{FuturesUnordered, StreamExt};
        let batch = {
            let st = lock(&listing.state);
            listing.check(&st)?;
            st.batches[i].entries.clone()
        };
        let mut missing = batch.iter().enumerate().filter(|(_, e)| e.attr.is_none());
        let mut found: Vec<(usize, Option<Node>, bool)> = Vec::new();
        let mut asking = FuturesUnordered::new();
        loop {
            while asking.len() < FILL_LOOKUPS {
                let Some((j, e)) = missing.next() else { break };
                let path = join_key(&listing.path, &e.name);
                asking.push(async move {
                    let (node, buf) = self.resolve_with_buf(&path).await?;
                    Ok::<_, FsError>((j, node, buf.is_none()))
                });
            }
            match asking.next().await {
                Some(answer) => found.push(answer?),
                None => break,
            }
        }
        let mut filled = (*batch).clone();
        for (j, node, stored) in found {
            if let Some(node) = node {
                let e = &mut filled[j];
                e.kind = if node.is_dir() { FileKind::Dir } else { FileKind::File };
                e.attr = Some(self.attr_of(e.ino, &node));
                e.version = if stored { fingerprint(&node) } else { None };
            }
        }
        let mut st = lock(&listing.state);
        listing.check(&st)?;
        st.batches[i] = Batch { entries: Arc::new(filled), filled: true };
        Ok(())
    }

    /// Start the task that reads the listing's pages.
    fn start_listing(&self, listing: &DirListing) -> Source {
        let (tx, rx) = mpsc::channel(PAGES_AHEAD);
        let (ns, changes, path) = (self.ns.clone(), self.cache.change_log(), listing.path.clone());
        let wanted = listing.wanted.clone();
        let reader = tokio::spawn(async move {
            let mut pages = ns.list_pages(&path, wanted);
            loop {
                // Taken before the page is asked for: a change through the mount that the
                // page may predate is then seen (see `changes`).
                let watch = changes.watch();
                let Some(page) = pages.next().await else { break };
                let failed = page.is_err();
                if tx.send((watch, page)).await.is_err() || failed {
                    break;
                }
            }
        });
        let mut st = lock(&listing.state);
        if st.released {
            reader.abort();
        } else {
            st.reader = Some(reader.abort_handle());
        }
        Source { pages: rx, files: Vec::new(), started: crate::clock::now() }
    }

    /// A page as the kernel must see it: entries this mount changed while the store listed
    /// them asked for again (the kernel takes READDIRPLUS attributes as current, and cuts
    /// reads at their size), files open for writing shown as their buffers. Each entry says
    /// whether it may be cached (a file listed without attributes has no node to cache).
    async fn page_entries(
        &self,
        dir: &str,
        watch: &Watch,
        mut page: Vec<(String, Option<Node>)>,
    ) -> FsResult<Vec<(String, Option<Node>, bool)>> {
        let mut asked_again = Vec::new();
        // Most pages are listed while nothing changes: one check instead of a path each.
        let names = if watch.quiet() { &page[..0] } else { &page[..] };
        for (i, (name, _)) in names.iter().enumerate() {
            let child = join_key(dir, name);
            if watch.changed(&child) {
                asked_again.push((i, self.ns.lookup(&child).await?));
            }
        }
        let mut gone = Vec::new();
        let mut cacheable = vec![true; page.len()];
        for (i, node) in asked_again {
            cacheable[i] = false;
            match node {
                Some(node) => page[i].1 = Some(node),
                None => gone.push(i),
            }
        }
        let buffered: Vec<(usize, SharedBuf)> = {
            let bufs = self.writes.bufs();
            if bufs.is_empty() {
                Vec::new()
            } else {
                let names = page.iter().enumerate();
                names
                    .filter_map(|(i, (n, _))| Some((i, bufs.get(&join_key(dir, n))?.clone())))
                    .collect()
            }
        };
        for (i, buf) in buffered {
            let b = buf.lock().await;
            if !b.is_unlinked() {
                page[i].1 = Some(buf_node(&b));
                cacheable[i] = false;
            }
        }
        let mut out: Vec<(String, Option<Node>, bool)> =
            page.into_iter().zip(cacheable).map(|((n, node), c)| (n, node, c)).collect();
        for i in gone.into_iter().rev() {
            out.remove(i);
        }
        Ok(out)
    }

    /// Hand out a page: pin its inodes (with `.` and `..` before the first page), cache its
    /// nodes. Nothing is pinned once the listing was released.
    fn add_batch(
        &self,
        listing: &DirListing,
        page: Vec<(String, Option<Node>, bool)>,
        watch: Option<&Watch>,
    ) -> FsResult<()> {
        let mut st = lock(&listing.state);
        listing.check(&st)?;
        let mut batch = Vec::with_capacity(page.len() + 2);
        let mut inodes = lock(&self.inodes);
        if st.len == 0 {
            let (path, ino) = (&listing.path, listing.ino);
            let parent_ino = if path.is_empty() { ROOT_INO } else { inodes.pin(split_key(path).0) };
            inodes.pin_ino(ino);
            // The kernel ignores these for `.` and `..` (it has their own attributes).
            let shown = self.cfg.perms.shown(true, None);
            let dir_attr = |ino| Attr {
                ino,
                kind: FileKind::Dir,
                size: 0,
                mtime: SystemTime::UNIX_EPOCH,
                perm: shown.mode,
                uid: shown.uid,
                gid: shown.gid,
                nlink: 2,
            };
            batch.push(DirEntry {
                ino,
                name: ".".into(),
                kind: FileKind::Dir,
                attr: Some(dir_attr(ino)),
                version: None,
            });
            let parent = dir_attr(parent_ino);
            batch.push(DirEntry {
                ino: parent_ino,
                name: "..".into(),
                kind: FileKind::Dir,
                attr: Some(parent),
                version: None,
            });
        }
        let now = crate::clock::now();
        let mut nodes = self.cache.lock_entries();
        // One listing answers the lookups that `ls -l` sends next. As in `cache_node`, a
        // change noted since the watch (checked under the cache lock, which `invalidate`
        // takes after noting) keeps the listed node out. With nothing noted since the watch
        // at this point, nothing noted later is missed: its `invalidate` waits for the lock.
        let quiet = watch.map(Watch::quiet);
        let mut filled = true;
        for (name, node, cacheable) in page {
            let child = join_key(&listing.path, &name);
            let is_dir = node.as_ref().is_some_and(Node::is_dir);
            let kind = if is_dir { FileKind::Dir } else { FileKind::File };
            let cache = cacheable
                && node.is_some()
                && match quiet {
                    Some(true) => true,
                    Some(false) => watch.is_some_and(|w| !w.changed(&child)),
                    None => false,
                };
            let version = node.as_ref().and_then(fingerprint);
            let (child_ino, attr) = match node {
                Some(node) if cache => {
                    let ino = inodes.pin(&child);
                    let attr = self.attr_of(ino, &node);
                    nodes.put(child, (Some(node), now));
                    (ino, Some(attr))
                }
                Some(node) => {
                    let ino = inodes.pin_path(child);
                    (ino, Some(self.attr_of(ino, &node)))
                }
                // A plain READDIR page: only the number is needed; the path the inode
                // table keeps is this one, not a copy.
                None => (inodes.pin_path(child), None),
            };
            filled &= attr.is_some();
            batch.push(DirEntry { ino: child_ino, name, kind, attr, version });
        }
        st.len += batch.len();
        st.batches.push(Batch { entries: Arc::new(batch), filled });
        Ok(())
    }

    /// The store's listing is complete: files open for writing here that it did not show
    /// (some are not in the store yet) join as a last batch; the listing is then recorded.
    async fn finish_listing(&self, listing: &DirListing, src: Source) -> FsResult<()> {
        let path = &listing.path;
        let prefix = if path.is_empty() { String::new() } else { format!("{path}/") };
        let pending: Vec<(String, SharedBuf)> = self
            .writes
            .bufs()
            .iter()
            .filter_map(|(p, b)| {
                p.strip_prefix(&prefix)
                    .filter(|n| !n.contains('/'))
                    .map(|n| (n.to_string(), b.clone()))
            })
            .collect();
        let mut extra = Vec::new();
        if !pending.is_empty() {
            let listed = listing.all();
            for (name, buf) in pending {
                if listed.iter().any(|e| e.name == name) {
                    continue;
                }
                let b = buf.lock().await;
                if !b.is_unlinked() {
                    extra.push((name, Some(buf_node(&b)), false));
                }
            }
        }
        extra.sort_by(|a, b| a.0.cmp(&b.0));
        let mut files = src.files;
        files.extend(extra.iter().map(|e| e.0.clone()));
        // A first (empty) batch carries `.` and `..` for an empty directory.
        if !extra.is_empty() || lock(&listing.state).len == 0 {
            self.add_batch(listing, extra, None)?;
        }
        {
            let mut st = lock(&listing.state);
            listing.check(&st)?;
            st.complete = true;
            st.reader = None;
        }
        self.ahead.scans().listed(path, files);
        self.cache.listed(listing.ino, src.started);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::ops::Range;
    use std::time::Duration;

    use async_trait::async_trait;
    use bytes::Bytes;
    use tokio::sync::Semaphore;

    use super::*;
    use crate::fs::inodes::table::ROOT_INO;
    use crate::fs::tests::fs_over;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::{
        ListPages, ListStore, Listing, Lookup, ObjectMeta, PutMode, ReadStore, StoreHints,
        StoreResult, WriteStore,
    };

    /// A store whose listings come in pages of `page` names (files, then directories), every
    /// page after the first held back until the test adds a permit to `gate`: a backend in
    /// the middle of a long listing.
    struct GatedPages {
        inner: MemoryStore,
        page: usize,
        gate: Arc<Semaphore>,
        /// Pages handed out so far.
        served: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl StoreHints for GatedPages {
        fn describe(&self) -> String {
            "gated".into()
        }
        fn has_real_dirs(&self) -> bool {
            false
        }
    }

    #[async_trait]
    impl ReadStore for GatedPages {
        async fn get(&self, key: &str) -> StoreResult<Bytes> {
            self.inner.get(key).await
        }
        async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
            self.inner.get_range(key, range).await
        }
        async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
            self.inner.head(key).await
        }
    }

    #[async_trait]
    impl ListStore for GatedPages {
        async fn list(&self, prefix: &str) -> StoreResult<Listing> {
            self.inner.list(prefix).await
        }
        fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
            use futures::stream::{self, StreamExt};
            let pages = stream::once(self.inner.list(prefix)).flat_map(move |whole| {
                let whole = match whole {
                    Ok(whole) => whole,
                    Err(e) => return stream::iter(vec![Err(e)]),
                };
                let files = whole
                    .files
                    .chunks(self.page)
                    .map(|c| Listing { files: c.to_vec(), ..Default::default() });
                let dirs = whole
                    .dirs
                    .chunks(self.page)
                    .map(|c| Listing { dirs: c.to_vec(), ..Default::default() });
                stream::iter(files.chain(dirs).map(Ok).collect::<Vec<_>>())
            });
            pages
                .enumerate()
                .then(move |(i, page)| async move {
                    if i > 0 {
                        self.gate.acquire().await.expect("gate open").forget();
                    }
                    self.served.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    page
                })
                .boxed()
        }
        async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
            self.inner.lookup(key).await
        }
    }

    #[async_trait]
    impl WriteStore for GatedPages {
        async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
            self.inner.put_opts(key, data, mode).await
        }
        async fn delete(&self, key: &str) -> StoreResult<()> {
            self.inner.delete(key).await
        }
        async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
            self.inner.delete_if_version(key, version).await
        }
    }

    async fn gated(
        files: usize,
        page: usize,
    ) -> (ZarrFs, Arc<Semaphore>, Arc<std::sync::atomic::AtomicUsize>) {
        let inner = MemoryStore::new();
        for i in 0..files {
            inner.put(&format!("d/f{i:05}"), Bytes::from_static(b"x")).await.unwrap();
        }
        inner.put("d/sub/k", Bytes::from_static(b"y")).await.unwrap();
        let gate = Arc::new(Semaphore::new(0));
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let store = GatedPages { inner, page, gate: gate.clone(), served: served.clone() };
        (fs_over(Arc::new(store), false, Duration::from_secs(3600)), gate, served)
    }

    fn names(entries: &DirEntries) -> Vec<String> {
        entries.iter().map(|(_, e)| e.name.clone()).collect()
    }

    /// How long a step that must not finish is given to show it does not. The tests run on
    /// the paused clock, which moves only when every task waits: the step has had every chance
    /// to run by then.
    const NOT_YET: Duration = Duration::from_millis(200);

    #[tokio::test(start_paused = true)]
    async fn the_first_page_is_answered_before_the_backend_listing_completes() {
        let (fs, gate, served) = gated(250, 100).await;
        let d = fs.lookup(ROOT_INO, "d").await.unwrap();
        let fh = fs.opendir_lazy(d.ino).unwrap().fh;
        assert!(fs.readdir_ready(fh, 0, true).unwrap().is_none(), "nothing listed at opendir");

        let first = tokio::time::timeout(Duration::from_secs(10), fs.readdir_at(fh, 0, true))
            .await
            .expect("the first page is answered while the backend holds the second")
            .unwrap();
        let first = names(&first);
        assert_eq!(first.len(), 102, "`.`, `..` and the first page: {first:?}");
        assert_eq!(&first[..3], [".", "..", "f00000"]);
        // The next page is read ahead but still held by the backend: the reader waits.
        let mut next = Box::pin(fs.readdir_at(fh, 102, true));
        assert!(
            tokio::time::timeout(NOT_YET, &mut next).await.is_err(),
            "answered past the backend"
        );
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(fs.readdir_listed(fh).unwrap().is_none(), "not complete yet");
        // A rewind within what was listed is answered at once, without the backend.
        let again = fs.readdir_ready(fh, 50, true).unwrap().expect("listed already");
        assert_eq!(names(&again)[0], "f00048");

        gate.add_permits(1);
        let second = names(&next.await.unwrap());
        assert_eq!(second[0], "f00100", "the second page follows on from the first");
        gate.add_permits(10);
        let mut all = Vec::new();
        let mut offset = 0;
        loop {
            let page: Vec<(u64, String)> = fs
                .readdir_at(fh, offset, true)
                .await
                .unwrap()
                .iter()
                .map(|(next, e)| (next, e.name.clone()))
                .collect();
            let Some(&(last, _)) = page.last() else { break };
            offset = last;
            all.extend(page.into_iter().map(|(_, n)| n));
        }
        let expected: Vec<String> = [".".to_string(), "..".to_string()]
            .into_iter()
            .chain((0..250).map(|i| format!("f{i:05}")))
            .chain(["sub".to_string()])
            .collect();
        assert_eq!(all, expected, "every name once, in the backend's order");
        assert_eq!(fs.readdir_listed(fh).unwrap().expect("complete").len(), 253);
        // A complete listing is recorded: the next open may keep the kernel's cached copy.
        fs.releasedir(fh);
        assert!(fs.opendir_lazy(d.ino).unwrap().keep_cache);
    }

    #[tokio::test(start_paused = true)]
    async fn a_listing_released_midway_leaves_nothing_pinned() {
        let (fs, gate, _) = gated(250, 100).await;
        let d = fs.lookup(ROOT_INO, "d").await.unwrap();
        let before = fs.gauges().known_inodes;
        let fh = fs.opendir_lazy(d.ino).unwrap().fh;
        let first = fs.readdir_at(fh, 0, true).await.unwrap();
        assert_eq!(names(&first).len(), 102);
        assert_eq!(fs.gauges().known_inodes, before + 100, "held while the listing is open");
        // One entry handed to the kernel by READDIRPLUS is a lookup: it outlives the listing.
        let (_, e) = first.iter().nth(5).unwrap();
        let plus = fs.readdirplus_entry("d", e).unwrap();
        // A reader waits for the held page when the directory is closed.
        let fs = Arc::new(fs);
        let waiting = tokio::spawn({
            let fs = fs.clone();
            async move { fs.readdir_at(fh, 102, true).await.map(|e| names(&e)) }
        });
        tokio::time::sleep(NOT_YET).await;
        fs.releasedir(fh);
        gate.add_permits(10); // the backend answers after all
        let late = waiting.await.unwrap();
        assert!(matches!(late, Err(FsError::BadHandle)), "{late:?}");
        tokio::time::sleep(NOT_YET).await;
        assert_eq!(fs.gauges().known_inodes, before + 1, "only the looked-up entry is left");
        fs.forget(plus.ino, 1);
        assert_eq!(fs.gauges().known_inodes, before);
        assert!(!fs.opendir_lazy(d.ino).unwrap().keep_cache, "an incomplete listing is not kept");
    }

    #[tokio::test]
    async fn files_being_written_show_in_a_paged_listing_once() {
        let (fs, gate, _) = gated(150, 100).await;
        gate.add_permits(100);
        let d = fs.lookup(ROOT_INO, "d").await.unwrap();
        // One new file (not in the store yet) and one rewrite of a listed file.
        let (_, new) = fs.create(d.ino, "new", 0).await.unwrap();
        fs.write(new.fh, 0, b"abc").await.unwrap();
        let old = fs.lookup(d.ino, "f00120").await.unwrap();
        let o = fs.open(old.ino, libc::O_WRONLY | libc::O_TRUNC).await.unwrap();
        fs.write(o.fh, 0, b"longer").await.unwrap();
        let fh = fs.opendir(d.ino).await.unwrap();
        let all = fs.readdir(fh).unwrap();
        let seen: HashSet<&str> = all.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(seen.len(), all.len(), "a name twice");
        assert_eq!(all.len(), 2 + 150 + 1 + 1);
        let size = |n: &str| all.iter().find(|e| e.name == n).unwrap().attr.unwrap().size;
        assert_eq!(size("new"), 3);
        assert_eq!(size("f00120"), 6, "the buffer, not the store");
        fs.releasedir(fh);
    }

    /// On the local backend a plain READDIR lists names and kinds only: entries of pages
    /// read for it have no attributes and are not cached, so a later lookup asks the store
    /// (and sees a change on disk that a cached entry would hide). A READDIRPLUS that comes
    /// back to such a batch looks its files up first: right sizes, and a file gone since is
    /// left without attributes, so never sent.
    #[tokio::test]
    async fn plain_readdir_lists_names_only_and_readdirplus_fills_them_in() {
        use crate::store::backends::local::LocalStore;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        let n = 6 * 1024; // six pages of the local backend
        for i in 0..n {
            std::fs::write(dir.join(format!("f{i:05}")), vec![b'x'; i % 7]).unwrap();
        }
        let size_of = |name: &str| (name[1..].parse::<usize>().unwrap() % 7) as u64;
        let store = Arc::new(LocalStore::open(tmp.path()).unwrap());
        let fs = fs_over(store, false, Duration::from_secs(3600));
        let d = fs.lookup(ROOT_INO, "d").await.unwrap();
        let fh = fs.opendir_lazy(d.ino).unwrap().fh;

        // The kernel opens with READDIRPLUS, then (`find`) sends plain READDIRs.
        let plus = fs.readdir_at(fh, 0, true).await.unwrap();
        let first: Vec<DirEntry> = plus.iter().map(|(_, e)| e.clone()).take(100).collect();
        for e in &first[2..] {
            assert_eq!(e.attr.map(|a| a.size), Some(size_of(&e.name)), "{}", e.name);
        }
        let mut all: Vec<(u64, DirEntry)> = Vec::new();
        let mut offset = first.len() as u64;
        loop {
            let page = fs.readdir_at(fh, offset, false).await.unwrap();
            let page: Vec<(u64, DirEntry)> = page.iter().map(|(o, e)| (o, e.clone())).collect();
            let Some(&(last, _)) = page.last() else { break };
            offset = last;
            all.extend(page);
        }
        assert_eq!(all.len() + first.len(), n + 2, "every name once");
        let bare: Vec<&(u64, DirEntry)> = all.iter().filter(|(_, e)| e.attr.is_none()).collect();
        // Pages read ahead while READDIRPLUS was the last request keep attributes; the rest
        // (at least the last two pages) have none.
        assert!(bare.len() >= 2048, "{} entries listed without attributes", bare.len());
        assert!(bare.iter().all(|(_, e)| e.kind == FileKind::File));

        // Not cached: a lookup asks the store. A file of the first page was cached.
        let (changed, gone) = (&bare[0].1.name, &bare[1].1.name);
        let cached = &first[2].name;
        for name in [changed, cached] {
            std::fs::write(dir.join(name), vec![b'y'; 100]).unwrap();
        }
        std::fs::remove_file(dir.join(gone)).unwrap();
        assert_eq!(fs.lookup(d.ino, changed).await.unwrap().size, 100);
        assert_eq!(fs.lookup(d.ino, cached).await.unwrap().size, size_of(cached), "cached");

        // READDIRPLUS from the first bare entry on: its batch is looked up first.
        let from = bare[0].0 - 1;
        assert!(fs.readdir_ready(fh, from, true).unwrap().is_none(), "needs lookups first");
        let filled = fs.readdir_at(fh, from, true).await.unwrap();
        let filled: Vec<DirEntry> = filled.iter().map(|(_, e)| e.clone()).collect();
        assert_eq!(&filled[0].name, changed);
        assert!(filled.len() > 2);
        for e in &filled {
            let want = if &e.name == changed {
                Some(100)
            } else if &e.name == gone {
                None
            } else {
                Some(size_of(&e.name))
            };
            assert_eq!(e.attr.map(|a| a.size), want, "{}", e.name);
        }
        let gone_entry = filled.iter().find(|e| &e.name == gone).expect("still listed");
        assert!(fs.readdirplus_entry("d", gone_entry).is_none(), "a gone file is not sent");
        // Filled once: the same request is now answered from memory.
        assert!(fs.readdir_ready(fh, from, true).unwrap().is_some());
        fs.releasedir(fh);
    }
}
