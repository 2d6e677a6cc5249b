//! The storage layer: one async key/value trait over every backend.
//!
//! Keys are `/`-separated relative paths without a leading slash (`group/array/c/0/1`).
//! The store knows nothing about Zarr or FUSE; directories are key prefixes, except that a
//! backend with real directories (the local filesystem) may also hold empty ones.

pub mod backends;
#[cfg(test)]
mod conditional_tests;
pub mod egress;
pub mod layers;
pub mod location;
pub mod read_only;

use std::ops::Range;
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;

/// What a store knows about one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub size: u64,
    pub modified: SystemTime,
    /// An opaque version tag (ETag, or mtime+size for local files); changes whenever the content does.
    pub version: String,
}

/// One level of a delimiter listing below a prefix.
#[derive(Debug, Default, Clone)]
pub struct Listing {
    /// Objects directly below the prefix: (name without the prefix, metadata).
    pub files: Vec<(String, ObjectMeta)>,
    /// Sub-prefixes ("directories") directly below the prefix, names only.
    pub dirs: Vec<String>,
}

/// The bytes of an answer, piece by piece in order (see `Store::get_streamed`).
pub type Body = futures::stream::BoxStream<'static, StoreResult<Bytes>>;

/// `data` as a body of one piece.
pub fn one_piece(data: Bytes) -> Body {
    Box::pin(futures::stream::once(async move { Ok(data) }))
}

/// A `get_ranged` answer as a `get_streamed` one: its bytes as one piece.
pub fn as_one_piece(got: Option<(Bytes, ObjectMeta)>) -> Option<(ObjectMeta, Body)> {
    got.map(|(data, meta)| (meta, one_piece(data)))
}

/// A listing read page by page (see `Store::list_pages`).
pub type ListPages<'a> = futures::stream::BoxStream<'a, StoreResult<Listing>>;

/// A page of a listing whose files may come without their metadata (see
/// `Store::list_entry_pages`).
#[derive(Debug, Default, Clone)]
pub struct EntryListing {
    /// Objects directly below the prefix, with their metadata, or `None` where the page was
    /// read without it (the local backend would have had to `lstat` each file for it).
    pub files: Vec<(String, Option<ObjectMeta>)>,
    /// Sub-prefixes ("directories") directly below the prefix.
    pub dirs: Vec<String>,
}

impl From<Listing> for EntryListing {
    fn from(l: Listing) -> Self {
        EntryListing {
            files: l.files.into_iter().map(|(name, meta)| (name, Some(meta))).collect(),
            dirs: l.dirs,
        }
    }
}

/// A listing read page by page, files' metadata where wanted (see `Store::list_entry_pages`).
pub type EntryPages<'a> = futures::stream::BoxStream<'a, StoreResult<EntryListing>>;

/// `pages` as entry pages, every file with its metadata: `list_entry_pages` of a store that
/// gets the metadata with the listing anyway.
pub fn with_all_metadata(pages: ListPages<'_>) -> EntryPages<'_> {
    use futures::StreamExt;
    Box::pin(pages.map(|page| page.map(EntryListing::from)))
}

/// Whether the next pages of a listing in progress need the metadata of their files; the
/// reader of the listing may change it between pages (see `Store::list_entry_pages`).
#[derive(Debug, Clone)]
pub struct MetaWanted(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl MetaWanted {
    pub fn new(wanted: bool) -> Self {
        MetaWanted(std::sync::Arc::new(std::sync::atomic::AtomicBool::new(wanted)))
    }
    pub fn set(&self, wanted: bool) {
        self.0.store(wanted, std::sync::atomic::Ordering::Relaxed);
    }
    pub fn get(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A byte range to fetch: `Range(a..b)` or the last `Suffix(n)` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ByteRange {
    Range(Range<u64>),
    Suffix(u64),
}

impl ByteRange {
    /// The part of an object of `size` bytes this range covers (empty, never inverted, when
    /// it lies past the end).
    pub fn clip(&self, size: u64) -> Range<u64> {
        match self {
            ByteRange::Range(r) => {
                let start = r.start.min(size);
                start..r.end.min(size).max(start)
            }
            ByteRange::Suffix(n) => size.saturating_sub(*n)..size,
        }
    }
}

/// How a put treats an object already at the key. Every backend and every wrapper must carry
/// the mode through (`Store::put_opts` has no default): a wrapper that turned a conditional put
/// into an overwrite would silently lose other writers' data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutMode {
    /// Replace whatever is there.
    Overwrite,
    /// Only if no object is at the key; otherwise `StoreError::AlreadyExists` and nothing written.
    Create,
    /// Only if the object at the key is still at this version (`ObjectMeta::version`, as read);
    /// otherwise (changed or gone) `StoreError::Conflict` and nothing written.
    Update(String),
}

/// What a name in the store is. A key can be both an object and a prefix on object stores.
#[derive(Debug, Clone, Default)]
pub struct Lookup {
    pub file: Option<ObjectMeta>,
    pub dir: bool,
}

/// Keys are printed escaped (`{:?}`): a key is untrusted text, and a newline in it must not
/// forge a log line.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found: {0:?}")]
    NotFound(String),
    #[error("permission denied: {0:?}")]
    PermissionDenied(String),
    #[error("directory not empty: {0:?}")]
    DirectoryNotEmpty(String),
    #[error("not a directory: {0:?}")]
    NotADirectory(String),
    #[error("is a directory: {0:?}")]
    IsADirectory(String),
    #[error("already exists: {0:?}")]
    AlreadyExists(String),
    /// A conditional write or delete found another version than it expected.
    #[error("changed by another writer: {0:?}")]
    Conflict(String),
    #[error("invalid key {0:?}: {1}")]
    InvalidKey(String, &'static str),
    #[error("{0} is not supported by this store")]
    Unsupported(&'static str),
    #[error("no space left on the backing device")]
    NoSpace,
    #[error("the store is read-only")]
    ReadOnly,
    #[error("backend timed out: {0}")]
    Timeout(String),
    #[error("i/o error on {key:?}: {source}")]
    Io { key: String, source: std::io::Error },
    #[error("backend error on {key:?}: {message}")]
    Backend { key: String, message: String },
}

/// A copy for each waiter of a shared fetch: every variant keeps its kind, and an I/O error
/// its OS error code, so the errno a client sees does not depend on whether its fetch was
/// shared (`std::io::Error` itself cannot be cloned).
impl Clone for StoreError {
    fn clone(&self) -> Self {
        match self {
            StoreError::NotFound(k) => StoreError::NotFound(k.clone()),
            StoreError::PermissionDenied(k) => StoreError::PermissionDenied(k.clone()),
            StoreError::DirectoryNotEmpty(k) => StoreError::DirectoryNotEmpty(k.clone()),
            StoreError::NotADirectory(k) => StoreError::NotADirectory(k.clone()),
            StoreError::IsADirectory(k) => StoreError::IsADirectory(k.clone()),
            StoreError::AlreadyExists(k) => StoreError::AlreadyExists(k.clone()),
            StoreError::Conflict(k) => StoreError::Conflict(k.clone()),
            StoreError::InvalidKey(k, why) => StoreError::InvalidKey(k.clone(), why),
            StoreError::Unsupported(what) => StoreError::Unsupported(what),
            StoreError::NoSpace => StoreError::NoSpace,
            StoreError::ReadOnly => StoreError::ReadOnly,
            StoreError::Timeout(m) => StoreError::Timeout(m.clone()),
            StoreError::Io { key, source } => StoreError::Io {
                key: key.clone(),
                source: match source.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::new(source.kind(), source.to_string()),
                },
            },
            StoreError::Backend { key, message } => {
                StoreError::Backend { key: key.clone(), message: message.clone() }
            }
        }
    }
}

impl StoreError {
    /// Map an `std::io::Error` about `key` onto the matching variant.
    pub fn from_io(key: &str, e: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let key = key.to_string();
        match e.kind() {
            K::NotFound => StoreError::NotFound(key),
            K::PermissionDenied => StoreError::PermissionDenied(key),
            K::AlreadyExists => StoreError::AlreadyExists(key),
            K::DirectoryNotEmpty => StoreError::DirectoryNotEmpty(key),
            K::NotADirectory => StoreError::NotADirectory(key),
            K::IsADirectory => StoreError::IsADirectory(key),
            K::StorageFull => StoreError::NoSpace,
            K::ReadOnlyFilesystem => StoreError::ReadOnly,
            _ => StoreError::Io { key, source: e },
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// `len` bytes of `file` from `offset`, read on the blocking pool (for `Store::put_file`).
pub async fn read_file_at(
    key: &str,
    file: std::sync::Arc<std::fs::File>,
    offset: u64,
    len: u64,
) -> StoreResult<Bytes> {
    use std::os::unix::fs::FileExt;
    let n = usize::try_from(len).map_err(|_| StoreError::NoSpace)?;
    let k = key.to_string();
    tokio::task::spawn_blocking(move || {
        let mut v = vec![0; n];
        file.read_exact_at(&mut v, offset).map_err(|e| StoreError::from_io(&k, e))?;
        Ok(Bytes::from(v))
    })
    .await
    .map_err(|e| StoreError::from_io(key, std::io::Error::other(e)))?
}

/// The one storage trait every backend implements.
/// What a store says about itself rather than the data it holds: how to name it in logs,
/// whether it has real directories, which keys it can hold, its capacity, and hints that
/// change no data (how much to read whole, what to fetch early). Kept apart from `Store` so the
/// data operations read as one contract; a `Layer` routes both through `inner()`.
#[async_trait]
pub trait StoreHints: Send + Sync + 'static {
    /// A short human description for logs ("local:/data/x.zarr"). Never contains credentials.
    fn describe(&self) -> String;
    /// Whether empty directories exist in the store itself (local filesystem) rather than only
    /// as prefixes of keys (object stores, zips).
    fn has_real_dirs(&self) -> bool;
    /// Capacity figures for statfs: (total bytes, free bytes); None when unknown.
    fn capacity(&self) -> Option<(u64, u64)> {
        None
    }
    /// Whether this store can hold an object (or directory) named `key`, checked before a
    /// file is created, made or renamed through the mount: a name the backend would refuse
    /// must fail at create(2) with EINVAL, not later at close(2) or unmount with data lost.
    fn check_key(&self, key: &str) -> StoreResult<()> {
        validate_key(key)
    }
    /// Objects up to this many bytes are kept whole in memory once a read returns all of them
    /// (0: no such cache). A reader that needs a small piece of an object likely to be read
    /// whole soon (a shard index) may then ask for this much at once and save a request.
    fn whole_object_limit(&self) -> u64 {
        0
    }
    /// A hint that `key` (of `size` bytes, or at most that when its size is not known yet)
    /// will likely be read soon: a store may start fetching it now. `why` names the guess in
    /// the metrics. Errors are not reported; the read itself will meet them.
    async fn prefetch(&self, _key: &str, _size: u64, _why: crate::metrics::Ahead) {}
    /// A local file holding exactly the bytes of `key` at `version`, for the kernel to read
    /// directly (FUSE passthrough), when this store keeps one (the disk cache's copies).
    /// May block on file I/O: call it off the async runtime.
    fn local_copy(&self, _key: &str, _version: &str) -> Option<std::fs::File> {
        None
    }
    /// Whether a local copy of `key` at its current version (known without a request) is kept:
    /// a read of the object only to learn its size would then be wasted work. No I/O.
    fn keeps_local_copy(&self, _key: &str) -> bool {
        false
    }
}

#[async_trait]
/// The data operations of a store. What a store says about itself (name, directory model,
/// key rules, capacity, read hints) is its `StoreHints`, so every store is both.
pub trait Store: StoreHints {
    async fn get(&self, key: &str) -> StoreResult<Bytes>;
    /// Bytes `range` of the object; a range past the end is clipped (may return fewer bytes).
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes>;
    /// A range of the object together with the object's metadata (whose size tells where the
    /// object ends), in one request where the backend allows; `Ok(None)` when there is no object.
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let Some(meta) = self.head(key).await? else { return Ok(None) };
        absent_if_not_found(self.get_range(key, range.clip(meta.size)).await.map(|d| (d, meta)))
    }
    /// `get_ranged`, answered as soon as the object's metadata is known (an object store's
    /// response headers), with the bytes following as they arrive: a reader of the start of
    /// an object need not wait for its end. By default `get_ranged`, its bytes as one piece.
    async fn get_streamed(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(ObjectMeta, Body)>> {
        Ok(as_one_piece(self.get_ranged(key, range).await?))
    }
    /// `Ok(None)` when there is no object at `key`.
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>>;
    /// Replace the object atomically: readers see the old or the new content, never a mix.
    async fn put(&self, key: &str, data: Bytes) -> StoreResult<()> {
        self.put_opts(key, data, PutMode::Overwrite).await
    }
    /// An atomic put under `mode` (see `PutMode`): the condition is checked by the backend
    /// itself, so two writers (also in two daemons) cannot both pass it.
    async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()>;
    /// `put_opts` of the first `len` bytes of `file` (a write buffer spilled to disk). This
    /// default reads them into memory; the local and object-store backends (and the layers in
    /// front of them) stream them instead, so a large file costs no more memory than a part.
    async fn put_file(
        &self,
        key: &str,
        file: std::sync::Arc<std::fs::File>,
        len: u64,
        mode: PutMode,
    ) -> StoreResult<()> {
        let data = read_file_at(key, file, 0, len).await?;
        self.put_opts(key, data, mode).await
    }
    /// Remove the object; removing a missing object is `NotFound`.
    async fn delete(&self, key: &str) -> StoreResult<()>;
    /// Remove the object only if it is still at `version`: `Conflict` if it changed, `NotFound`
    /// if it is gone. Backends that cannot check and delete in one step say how close they come.
    async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()>;
    /// The whole object with the metadata of that same content (its version), or `None`.
    async fn get_versioned(&self, key: &str) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        self.get_ranged(key, ByteRange::Range(0..u64::MAX)).await
    }
    /// One level below `prefix` (`""` for the root, otherwise a key prefix without trailing `/`).
    async fn list(&self, prefix: &str) -> StoreResult<Listing>;

    /// `list`, page by page, so a directory can be shown before it is read whole. Each page
    /// is sorted by name; over all pages a name comes at most once as a file and once as a
    /// directory, and a name that is both comes in one page. An error ends the listing. By
    /// default the whole `list` as one page; the local and object-store backends (and the
    /// layers that only watch listings) hand out pages as the backend reads them.
    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        Box::pin(futures::stream::once(self.list(prefix)))
    }

    /// `list_pages` for a reader that may not need the files' metadata (a plain READDIR wants
    /// names and kinds only): a page read while `wanted` is false may leave it out (`None`)
    /// where the backend pays for it per file (the local backend's `lstat`); a page read
    /// while it is true has it for every file. Hidden entries stay hidden either way. By
    /// default `list_pages` with every file's metadata (an object store's LIST page has it).
    fn list_entry_pages<'a>(&'a self, prefix: &'a str, _wanted: MetaWanted) -> EntryPages<'a> {
        with_all_metadata(self.list_pages(prefix))
    }

    /// Is `key` an object, a directory, both or neither?
    async fn lookup(&self, key: &str) -> StoreResult<Lookup>;

    /// `lookup` of a key that names a document, never a directory (Zarr's metadata names,
    /// which the specs reserve for their documents), and whose whole object is likely read
    /// right after: a backend whose lookup sends a HEAD and a directory probe may send one GET
    /// of the first `limit` bytes in their place and return them (from offset 0; all of the
    /// object when it fits), so that a cache above serves the read that follows without a
    /// round trip. Its answer then has `dir` false: a prefix below such a name (which no Zarr
    /// writer makes) shows in listings, not to this lookup. By default `lookup`, and no bytes.
    async fn lookup_reading(&self, key: &str, _limit: u64) -> StoreResult<(Lookup, Option<Bytes>)> {
        Ok((self.lookup(key).await?, None))
    }

    /// Rename an object, replacing any object at `to`.
    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        let data = self.get(from).await?;
        self.put(to, data).await?;
        self.delete(from).await
    }

    /// Create an empty directory (only meaningful where `has_real_dirs`).
    async fn create_dir(&self, _key: &str) -> StoreResult<()> {
        Ok(())
    }
    /// Remove an empty directory (only meaningful where `has_real_dirs`).
    async fn remove_dir(&self, _key: &str) -> StoreResult<()> {
        Ok(())
    }
    /// Rename a directory with everything below it.
    async fn rename_dir(&self, _from: &str, _to: &str) -> StoreResult<()> {
        Err(StoreError::Unsupported("renaming a directory"))
    }
}

/// An error and its sources on one line, each rendered by `render`; a cause whose text is
/// already there is left out. Client libraries keep the useful part in the source chain
/// (reqwest: "connection refused"; icechunk: the URL of a failed virtual chunk).
pub fn error_chain_with(
    e: &dyn std::error::Error,
    render: impl Fn(&dyn std::error::Error) -> String,
) -> String {
    let mut text = render(e);
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = render(c);
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// `error_chain_with` each error's own text.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    error_chain_with(e, |c| c.to_string())
}

/// A read answered as `get_ranged` answers: an object gone by the time it was read (after
/// its `head`, or during a local read) is `None`, not an error.
pub fn absent_if_not_found<T>(read: StoreResult<T>) -> StoreResult<Option<T>> {
    match read {
        Ok(found) => Ok(Some(found)),
        Err(StoreError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The bytes of a read that returned them with their metadata, or `NotFound` for `key`
/// (for stores whose `get`/`get_range` are `get_ranged` underneath).
pub fn found(key: &str, read: Option<(Bytes, ObjectMeta)>) -> StoreResult<Bytes> {
    read.map(|(data, _)| data).ok_or_else(|| StoreError::NotFound(key.to_string()))
}

/// Join a directory key and a child name.
pub fn join_key(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        // Not format!: this runs per listed entry, and the exact capacity lets the inode
        // table keep the allocation (`into_boxed_str` without a copy).
        let mut key = String::with_capacity(dir.len() + 1 + name.len());
        key.push_str(dir);
        key.push('/');
        key.push_str(name);
        key
    }
}

/// Split a key into (parent directory key, last name).
pub fn split_key(key: &str) -> (&str, &str) {
    match key.rfind('/') {
        Some(i) => (&key[..i], &key[i + 1..]),
        None => ("", key),
    }
}

/// The longest file name Linux accepts, in bytes (the kernel refuses longer names before
/// they reach the daemon, so a longer name in a listing could be seen but never opened).
pub const NAME_MAX: usize = 255;

/// Reject keys that could escape a store root or that no file name can hold.
pub fn validate_key(key: &str) -> StoreResult<()> {
    if key.is_empty() {
        return Ok(());
    }
    if key.starts_with('/') || key.ends_with('/') {
        return Err(StoreError::InvalidKey(key.into(), "leading or trailing '/'"));
    }
    if key.contains('\0') {
        return Err(StoreError::InvalidKey(key.into(), "NUL byte"));
    }
    for seg in key.split('/') {
        if seg.is_empty() || seg == "." || seg == ".." {
            return Err(StoreError::InvalidKey(key.into(), "empty, '.' or '..' segment"));
        }
        if seg.len() > NAME_MAX {
            return Err(StoreError::InvalidKey(key.into(), "a name longer than 255 bytes"));
        }
    }
    Ok(())
}

/// Why `name`, one entry of a store listing, cannot be shown as a file name (`None` when it
/// can). Listings hide such names rather than failing: one hostile key must not cost the
/// directory all its good neighbours, and a name the kernel cannot look up, or one that would
/// step out of its directory (`..`), must never reach it.
pub fn name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("empty name (the key has '//' or a leading '/')")
    } else if name == "." || name == ".." {
        Some("'.' or '..' as a name")
    } else if name.contains('/') {
        Some("'/' inside a name")
    } else if name.contains('\0') {
        Some("NUL byte")
    } else if name.len() > NAME_MAX {
        Some("name longer than 255 bytes")
    } else {
        None
    }
}

/// How many hidden keys one store remembers (to log each once); later ones are not logged.
const HIDDEN_KEYS_REMEMBERED: usize = 10_000;

/// Keys a store's listings hide, each logged once: the kernel lists a directory again and
/// again, and one line per listing would flood the log.
#[derive(Default)]
pub struct HiddenKeys {
    seen: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl HiddenKeys {
    /// Log (once per key) that `key` is left out of listings, and why. The key is printed
    /// escaped (`{:?}`), so a newline or control character in it cannot forge log lines.
    pub fn report(&self, store: &str, key: &str, reason: &str) {
        let mut seen = crate::locks::lock(&self.seen);
        if seen.len() > HIDDEN_KEYS_REMEMBERED || seen.contains(key) {
            return;
        }
        if seen.len() == HIDDEN_KEYS_REMEMBERED {
            seen.insert(String::new()); // the sentinel that fills the set: nothing more is logged
            tracing::warn!(
                store,
                "more than {HIDDEN_KEYS_REMEMBERED} hidden keys; no more are logged"
            );
            return;
        }
        seen.insert(key.to_string());
        tracing::warn!(store, key = ?key, reason, "key not shown in the mount");
    }

    /// Has `key` been reported? (tests)
    pub fn was_reported(&self, key: &str) -> bool {
        crate::locks::lock(&self.seen).contains(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_and_join() {
        assert_eq!(split_key("a/b/c"), ("a/b", "c"));
        assert_eq!(split_key("c"), ("", "c"));
        assert_eq!(join_key("", "c"), "c");
        assert_eq!(join_key("a/b", "c"), "a/b/c");
    }

    #[test]
    fn hostile_keys_are_rejected() {
        for bad in ["../x", "a/../b", "/abs", "a//b", "a/./b", "a/", "a\0b"] {
            assert!(validate_key(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["", "a", "a/b.c/..d", "c/0/1", ".zattrs"] {
            assert!(validate_key(good).is_ok(), "{good:?} rejected");
        }
        let long = "x".repeat(NAME_MAX + 1);
        assert!(validate_key(&format!("a/{long}/b")).is_err());
        assert!(validate_key(&format!("a/{}", "x".repeat(NAME_MAX))).is_ok());
    }

    #[test]
    fn listing_names_that_cannot_be_file_names() {
        for bad in ["", ".", "..", "a/b", "a\0b", &"é".repeat(128)] {
            assert!(name_problem(bad).is_some(), "{bad:?} accepted");
        }
        let max = "x".repeat(NAME_MAX);
        for good in
            ["a", "...", ".zattrs", "sp ace é 日本", "back\\slash", "pct%2Fenc", "new\nline", &max]
        {
            assert_eq!(name_problem(good), None, "{good:?} rejected");
        }
    }

    #[test]
    fn hidden_keys_are_logged_once_and_bounded() {
        let h = HiddenKeys::default();
        h.report("s", "d/..", "why");
        h.report("s", "d/..", "why");
        assert!(h.was_reported("d/.."));
        assert_eq!(h.seen.lock().unwrap().len(), 1);
        for i in 0..HIDDEN_KEYS_REMEMBERED + 50 {
            h.report("s", &format!("k{i}"), "why");
        }
        assert_eq!(h.seen.lock().unwrap().len(), HIDDEN_KEYS_REMEMBERED + 1);
    }
}
