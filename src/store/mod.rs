//! The storage layer: one async key/value interface over every backend, split by
//! capability: `ReadStore` (objects' bytes and metadata), `ListStore` (listings, lookups),
//! `WriteStore` (puts, deletes, renames, directories) and `StoreHints` (what a store says of
//! itself). A `Store` has them all. Layers (caches, metering) forward what they do not change
//! (`capability`); read-only backends refuse writes in one place (`read_only`).
//!
//! Keys are `/`-separated relative paths without a leading slash (`dir/sub/name`).
//! The store knows nothing about Zarr or FUSE; directories are key prefixes, except that a
//! backend with real directories (the local filesystem) may also hold empty ones.

pub mod backends;
mod capability;
#[cfg(test)]
mod conditional_tests;
pub mod egress;
mod hints;
pub mod layers;
mod list;
pub mod location;
mod read;
pub mod read_only;
mod write;

use std::time::SystemTime;

pub use crate::perms::Perms;

pub use hints::{DirsAhead, HintsLayer, NextDirs, StoreHints};
pub use list::{
    with_all_metadata, EntryListing, EntryPages, ListLayer, ListPages, ListStore, Listing, Lookup,
    MetaWanted,
};
pub use read::{
    absent_if_not_found, as_one_piece, found, one_piece, revalidate_by_head, same_version, Body,
    ByteRange, ReadLayer, ReadStore, Revalidated,
};
pub use write::{read_file_at, PutMode, Spill, WriteLayer, WriteStore};

/// A whole store: every capability. Code that holds a store holds an `Arc<dyn Store>`;
/// backends and layers implement the capabilities, and this follows.
pub trait Store: ReadStore + WriteStore + ListStore + StoreHints {}

impl<S: ReadStore + WriteStore + ListStore + StoreHints + ?Sized> Store for S {}

/// The capabilities, to call a store's operations on a concrete store type (`Store` alone
/// serves `dyn Store`).
pub mod prelude {
    pub use super::{ListStore, ReadStore, Store, StoreHints, WriteStore};
}

/// What a store knows about one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub size: u64,
    pub modified: SystemTime,
    /// An opaque version tag (ETag, or mtime+size for local files); changes whenever the content does.
    pub version: String,
    /// The file's own mode, owner and group, where the store keeps them (a local directory;
    /// object stores, zip, references and Icechunk have none).
    pub perms: Option<Perms>,
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
