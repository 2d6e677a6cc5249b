//! The names in a store: `ListStore` (listings whole or by page, lookups) and its answers.

use crate::store::capability::capability;
use std::collections::HashMap;

use crate::store::{ObjectMeta, Perms, StoreResult};

use bytes::Bytes;

/// One level of a delimiter listing below a prefix.
#[derive(Debug, Default, Clone)]
pub struct Listing {
    /// Objects directly below the prefix: (name without the prefix, metadata).
    pub files: Vec<(String, ObjectMeta)>,
    /// Sub-prefixes ("directories") directly below the prefix, names only.
    pub dirs: Vec<String>,
    /// The own mode, owner and group of those of `dirs` that have them (a local directory's).
    pub dir_perms: HashMap<String, Perms>,
}

/// A listing read page by page (see `ListStore::list_pages`).
pub type ListPages<'a> = futures::stream::BoxStream<'a, StoreResult<Listing>>;

/// A page of a listing whose files may come without their metadata (see
/// `ListStore::list_entry_pages`).
#[derive(Debug, Default, Clone)]
pub struct EntryListing {
    /// Objects directly below the prefix, with their metadata, or `None` where the page was
    /// read without it (the local backend would have had to `lstat` each file for it).
    pub files: Vec<(String, Option<ObjectMeta>)>,
    /// Sub-prefixes ("directories") directly below the prefix.
    pub dirs: Vec<String>,
    /// As `Listing::dir_perms`; left out with the files' metadata.
    pub dir_perms: HashMap<String, Perms>,
}

impl From<Listing> for EntryListing {
    fn from(l: Listing) -> Self {
        EntryListing {
            files: l.files.into_iter().map(|(name, meta)| (name, Some(meta))).collect(),
            dirs: l.dirs,
            dir_perms: l.dir_perms,
        }
    }
}

/// A listing read page by page, files' metadata where wanted (see `ListStore::list_entry_pages`).
pub type EntryPages<'a> = futures::stream::BoxStream<'a, StoreResult<EntryListing>>;

/// `pages` as entry pages, every file with its metadata: `list_entry_pages` of a store that
/// gets the metadata with the listing anyway.
pub fn with_all_metadata(pages: ListPages<'_>) -> EntryPages<'_> {
    use futures::StreamExt;
    Box::pin(pages.map(|page| page.map(EntryListing::from)))
}

/// Whether the next pages of a listing in progress need the metadata of their files; the
/// reader of the listing may change it between pages (see `ListStore::list_entry_pages`).
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

/// What a name in the store is. A key can be both an object and a prefix on object stores.
#[derive(Debug, Clone, Default)]
pub struct Lookup {
    pub file: Option<ObjectMeta>,
    pub dir: bool,
    /// The directory's own mode, owner and group, where the store keeps them.
    pub dir_perms: Option<Perms>,
}

capability! {
    /// The names in a store: listings and lookups.
    pub trait ListStore, layer ListLayer {
        /// One level below `prefix` (`""` for the root, otherwise a key prefix without
        /// trailing `/`).
        required async fn list(&self, prefix: &str) -> StoreResult<Listing>;

        /// `list`, page by page, so a directory can be shown before it is read whole. Each
        /// page is sorted by name; over all pages a name comes at most once as a file and once
        /// as a directory, and a name that is both comes in one page. An error ends the
        /// listing. By default the whole `list` as one page; the local and object-store
        /// backends (and the layers that only watch listings) hand out pages as the backend
        /// reads them.
        derived fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
            Box::pin(futures::stream::once(Self::list(self, prefix)))
        }

        /// `list_pages` from just after the name `after` (a key's name below `prefix`): the
        /// names up to `after` may be left out, so that the first page holds the ones a reader
        /// wants next. Object stores start the listing there (S3's `start-after`); by default
        /// `list_pages`, every name.
        provided fn list_pages_after<'a>(&'a self, prefix: &'a str, after: &'a str) -> ListPages<'a> {
            let _ = after;
            Self::list_pages(self, prefix)
        }

        /// `list_pages` for a reader that may not need the files' metadata (a plain READDIR
        /// wants names and kinds only): a page read while `wanted` is false may leave it out
        /// (`None`) where the backend pays for it per file (the local backend's `lstat`); a
        /// page read while it is true has it for every file. Hidden entries stay hidden either
        /// way. By default `list_pages` with every file's metadata (an object store's LIST page
        /// has it).
        derived fn list_entry_pages<'a>(
            &'a self,
            prefix: &'a str,
            _wanted: MetaWanted,
        ) -> EntryPages<'a> {
            with_all_metadata(Self::list_pages(self, prefix))
        }

        /// Is `key` an object, a directory, both or neither?
        required async fn lookup(&self, key: &str) -> StoreResult<Lookup>;

        /// `lookup` of a key that names a document, whose whole object is likely read right
        /// after: a backend whose lookup sends a HEAD and a directory probe may send one GET of
        /// the first `limit` bytes in their place and return them (from offset 0; all of the
        /// object when it fits), so that a cache above serves the read that follows without a
        /// round trip. By default `lookup`, and no bytes; a layer that passes lookups through
        /// forwards it, so the bytes reach the cache above.
        ///
        /// The answer of a GET in place of the probe has `dir` false: the keys asked this way
        /// are the format's metadata names (the caller's to know), documents and never
        /// directories, as the specs reserve them. A prefix below such a name, which no
        /// writer of the format makes, shows in its parent's listing, not to this lookup.
        derived async fn lookup_reading(
            &self,
            key: &str,
            _limit: u64,
        ) -> StoreResult<(Lookup, Option<Bytes>)> {
            Ok((Self::lookup(self, key).await?, None))
        }
    }
}
