//! Backends that can only be read (zip archives, reference stores, Icechunk snapshots).
//!
//! Such a backend implements `ReadBackend`, the read half of `Store`, and is mounted as
//! `ReadOnly(backend)`, which is a `Store`: reads go to the backend, and every write and every
//! name check is refused with `ReadOnly` (EROFS), written once here instead of in each backend.

use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::{
    ByteRange, EntryPages, ListPages, Listing, Lookup, MetaWanted, ObjectMeta, PutMode, Store,
    StoreError, StoreHints, StoreResult,
};

/// The read operations of a store; each means what the `Store` method of the same name does.
#[async_trait]
pub trait ReadBackend: StoreHints {
    async fn get(&self, key: &str) -> StoreResult<Bytes>;
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes>;
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>>;
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>>;
    async fn list(&self, prefix: &str) -> StoreResult<Listing>;
    /// By default the whole `list` as one page.
    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        Box::pin(futures::stream::once(ReadBackend::list(self, prefix)))
    }
    async fn lookup(&self, key: &str) -> StoreResult<Lookup>;
}

/// A `ReadBackend` as a `Store` that refuses every write.
pub struct ReadOnly<B>(pub B);

impl<B> std::ops::Deref for ReadOnly<B> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.0
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<B: ReadBackend> StoreHints for ReadOnly<B> {
    fn describe(&self) -> String {
        self.0.describe()
    }
    fn has_real_dirs(&self) -> bool {
        self.0.has_real_dirs()
    }
    fn capacity(&self) -> Option<(u64, u64)> {
        self.0.capacity()
    }
    /// Refused before a file is created, so `create(2)` fails with EROFS at once.
    fn check_key(&self, _key: &str) -> StoreResult<()> {
        Err(StoreError::ReadOnly)
    }
    fn whole_object_limit(&self) -> u64 {
        self.0.whole_object_limit()
    }
    async fn prefetch(&self, key: &str, size: u64, why: crate::metrics::Ahead) {
        self.0.prefetch(key, size, why).await
    }
    fn local_copy(&self, key: &str, version: &str) -> Option<std::fs::File> {
        self.0.local_copy(key, version)
    }
    fn keeps_local_copy(&self, key: &str) -> bool {
        self.0.keeps_local_copy(key)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<B: ReadBackend> Store for ReadOnly<B> {
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.0.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.0.get_range(key, range).await
    }
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        self.0.get_ranged(key, range).await
    }
    /// These backends read from an archive or a manifest: the bytes come as one piece.
    async fn get_streamed(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(ObjectMeta, crate::store::Body)>> {
        Ok(crate::store::as_one_piece(self.0.get_ranged(key, range).await?))
    }
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.0.head(key).await
    }
    /// A HEAD answered from the backend's own index (a zip's central directory, a snapshot's
    /// manifest): what it holds is immutable while its source is unchanged.
    async fn get_if_changed(
        &self,
        key: &str,
        range: crate::store::ByteRange,
        known: &ObjectMeta,
    ) -> StoreResult<crate::store::Revalidated> {
        crate::store::revalidate_by_head(self, key, range, known).await
    }
    async fn get_versioned(&self, key: &str) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        self.0.get_ranged(key, ByteRange::Range(0..u64::MAX)).await
    }
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        self.0.list(prefix).await
    }
    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        self.0.list_pages(prefix)
    }
    /// Read-only backends (zip, references, Icechunk) know every size from their index.
    fn list_entry_pages<'a>(&'a self, prefix: &'a str, _wanted: MetaWanted) -> EntryPages<'a> {
        crate::store::with_all_metadata(self.0.list_pages(prefix))
    }
    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        self.0.lookup(key).await
    }
    /// Read-only backends answer lookups from their index: nothing to save.
    async fn lookup_reading(&self, key: &str, _limit: u64) -> StoreResult<(Lookup, Option<Bytes>)> {
        Ok((self.0.lookup(key).await?, None))
    }

    async fn put(&self, _key: &str, _data: Bytes) -> StoreResult<()> {
        Err(StoreError::ReadOnly)
    }
    async fn put_opts(&self, _key: &str, _data: Bytes, _mode: PutMode) -> StoreResult<()> {
        Err(StoreError::ReadOnly)
    }
    async fn put_file(
        &self,
        _key: &str,
        _file: std::sync::Arc<std::fs::File>,
        _len: u64,
        _mode: PutMode,
    ) -> StoreResult<()> {
        Err(StoreError::ReadOnly)
    }
    async fn delete(&self, _key: &str) -> StoreResult<()> {
        Err(StoreError::ReadOnly)
    }
    async fn delete_if_version(&self, _key: &str, _version: &str) -> StoreResult<()> {
        Err(StoreError::ReadOnly)
    }
    async fn rename(&self, _from: &str, _to: &str) -> StoreResult<()> {
        Err(StoreError::ReadOnly)
    }
    async fn create_dir(&self, _key: &str) -> StoreResult<()> {
        Err(StoreError::ReadOnly)
    }
    async fn remove_dir(&self, _key: &str) -> StoreResult<()> {
        Err(StoreError::ReadOnly)
    }
    async fn rename_dir(&self, _from: &str, _to: &str) -> StoreResult<()> {
        Err(StoreError::ReadOnly)
    }
}
