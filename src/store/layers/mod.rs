//! Store wrappers (metering, caches, test doubles) as layers over another store.
//!
//! A wrapper implements `Layer`, not `Store`: every method it does not write itself goes to
//! the store below (`inner()`), never to a default of `Store` (a forgotten forward once made
//! `check_key` accept names the backend refused). `Store` and `StoreHints` are implemented
//! once, below, for every layer; clippy's `missing_trait_methods` (denied there, and clippy
//! runs with `-D warnings` in scripts/test.sh) fails the build if a method added to either
//! trait is not routed through `Layer`.
//!
//! Name it as `crate::store::layers::Layer` rather than importing it: a
//! type with both traits in scope would have two `get`s and every call would be ambiguous.

pub mod cache;
pub mod disk_cache;
mod disk_meta;
#[cfg(any(test, feature = "test-doubles"))]
pub mod fault;
mod filling;
pub mod metered;
#[cfg(any(test, feature = "test-doubles"))]
pub mod recording;
mod write_watch;

use std::ops::Range;

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::StoreHints;
use crate::store::{
    as_one_piece, Body, ByteRange, EntryPages, ListPages, Listing, Lookup, MetaWanted, ObjectMeta,
    PutMode, Revalidated, Store, StoreResult,
};

/// A store over another store; each method defaults to the same call on `inner()`.
#[async_trait]
pub trait Layer: Send + Sync + 'static {
    /// The store below.
    fn inner(&self) -> &dyn Store;

    fn describe(&self) -> String {
        self.inner().describe()
    }
    fn has_real_dirs(&self) -> bool {
        self.inner().has_real_dirs()
    }
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.inner().get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.inner().get_range(key, range).await
    }
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        self.inner().get_ranged(key, range).await
    }
    /// By default this layer's own `get_ranged`, as one piece: a layer that reads in its own
    /// way (the disk cache, the test doubles) is never bypassed. A layer that passes reads
    /// through forwards this too, so the pieces reach the cache above as they arrive.
    async fn get_streamed(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(ObjectMeta, Body)>> {
        Ok(as_one_piece(Layer::get_ranged(self, key, range).await?))
    }
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.inner().head(key).await
    }
    async fn get_if_changed(
        &self,
        key: &str,
        range: ByteRange,
        known: &ObjectMeta,
    ) -> StoreResult<Revalidated> {
        self.inner().get_if_changed(key, range, known).await
    }
    async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        self.inner().put_opts(key, data, mode).await
    }
    async fn put_file(
        &self,
        key: &str,
        file: std::sync::Arc<std::fs::File>,
        len: u64,
        mode: PutMode,
    ) -> StoreResult<()> {
        self.inner().put_file(key, file, len, mode).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.inner().delete(key).await
    }
    async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
        self.inner().delete_if_version(key, version).await
    }
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        self.inner().list(prefix).await
    }
    /// By default the layer's own `list`, whole: a layer that writes `list` (a listing made
    /// some other way) is then never bypassed. A layer that only watches listings forwards
    /// the pages of the store below instead.
    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        Box::pin(futures::stream::once(Layer::list(self, prefix)))
    }
    /// By default the layer's own `list_pages` with every file's metadata, for the same
    /// reason; a layer that only watches listings forwards the store below's instead.
    fn list_entry_pages<'a>(&'a self, prefix: &'a str, _wanted: MetaWanted) -> EntryPages<'a> {
        crate::store::with_all_metadata(Layer::list_pages(self, prefix))
    }
    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        self.inner().lookup(key).await
    }
    /// By default this layer's own `lookup`, with no bytes: a layer that answers lookups
    /// itself (HTTP's tree of known names) must not be bypassed by a GET below it. A layer
    /// that passes lookups through forwards this too, so the bytes reach the cache above.
    async fn lookup_reading(&self, key: &str, _limit: u64) -> StoreResult<(Lookup, Option<Bytes>)> {
        Ok((Layer::lookup(self, key).await?, None))
    }
    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.inner().rename(from, to).await
    }
    async fn create_dir(&self, key: &str) -> StoreResult<()> {
        self.inner().create_dir(key).await
    }
    async fn remove_dir(&self, key: &str) -> StoreResult<()> {
        self.inner().remove_dir(key).await
    }
    async fn rename_dir(&self, from: &str, to: &str) -> StoreResult<()> {
        self.inner().rename_dir(from, to).await
    }
    fn capacity(&self) -> Option<(u64, u64)> {
        self.inner().capacity()
    }
    fn check_key(&self, key: &str) -> StoreResult<()> {
        self.inner().check_key(key)
    }
    fn whole_object_limit(&self) -> u64 {
        self.inner().whole_object_limit()
    }
    async fn prefetch(&self, key: &str, size: u64, why: crate::metrics::Ahead) {
        self.inner().prefetch(key, size, why).await
    }
    fn local_copy(&self, key: &str, version: &str) -> Option<std::fs::File> {
        self.inner().local_copy(key, version)
    }
    fn keeps_local_copy(&self, key: &str) -> bool {
        self.inner().keeps_local_copy(key)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<L: Layer> StoreHints for L {
    fn describe(&self) -> String {
        Layer::describe(self)
    }
    fn has_real_dirs(&self) -> bool {
        Layer::has_real_dirs(self)
    }
    fn capacity(&self) -> Option<(u64, u64)> {
        Layer::capacity(self)
    }
    fn check_key(&self, key: &str) -> StoreResult<()> {
        Layer::check_key(self, key)
    }
    fn whole_object_limit(&self) -> u64 {
        Layer::whole_object_limit(self)
    }
    async fn prefetch(&self, key: &str, size: u64, why: crate::metrics::Ahead) {
        Layer::prefetch(self, key, size, why).await
    }
    fn local_copy(&self, key: &str, version: &str) -> Option<std::fs::File> {
        Layer::local_copy(self, key, version)
    }
    fn keeps_local_copy(&self, key: &str) -> bool {
        Layer::keeps_local_copy(self, key)
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<L: Layer> Store for L {
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        Layer::get(self, key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        Layer::get_range(self, key, range).await
    }
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        Layer::get_ranged(self, key, range).await
    }
    async fn get_streamed(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(ObjectMeta, Body)>> {
        Layer::get_streamed(self, key, range).await
    }
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        Layer::head(self, key).await
    }
    async fn get_if_changed(
        &self,
        key: &str,
        range: ByteRange,
        known: &ObjectMeta,
    ) -> StoreResult<Revalidated> {
        Layer::get_if_changed(self, key, range, known).await
    }
    /// Through this layer's own `put_opts`, so the layer sees every write.
    async fn put(&self, key: &str, data: Bytes) -> StoreResult<()> {
        Layer::put_opts(self, key, data, PutMode::Overwrite).await
    }
    async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        Layer::put_opts(self, key, data, mode).await
    }
    async fn put_file(
        &self,
        key: &str,
        file: std::sync::Arc<std::fs::File>,
        len: u64,
        mode: PutMode,
    ) -> StoreResult<()> {
        Layer::put_file(self, key, file, len, mode).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        Layer::delete(self, key).await
    }
    async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
        Layer::delete_if_version(self, key, version).await
    }
    /// Through this layer's own `get_ranged`, so the layer sees every read.
    async fn get_versioned(&self, key: &str) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        Layer::get_ranged(self, key, ByteRange::Range(0..u64::MAX)).await
    }
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        Layer::list(self, prefix).await
    }
    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        Layer::list_pages(self, prefix)
    }
    fn list_entry_pages<'a>(&'a self, prefix: &'a str, wanted: MetaWanted) -> EntryPages<'a> {
        Layer::list_entry_pages(self, prefix, wanted)
    }
    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        Layer::lookup(self, key).await
    }
    async fn lookup_reading(&self, key: &str, limit: u64) -> StoreResult<(Lookup, Option<Bytes>)> {
        Layer::lookup_reading(self, key, limit).await
    }
    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        Layer::rename(self, from, to).await
    }
    async fn create_dir(&self, key: &str) -> StoreResult<()> {
        Layer::create_dir(self, key).await
    }
    async fn remove_dir(&self, key: &str) -> StoreResult<()> {
        Layer::remove_dir(self, key).await
    }
    async fn rename_dir(&self, from: &str, to: &str) -> StoreResult<()> {
        Layer::rename_dir(self, from, to).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::StoreError;
    use std::sync::Arc;

    /// A backend whose hints differ from `Store`'s defaults, so a call that fell back to a
    /// default instead of reaching it would be seen.
    struct Particular(MemoryStore);

    impl StoreHints for Particular {
        fn describe(&self) -> String {
            "particular".into()
        }
        fn has_real_dirs(&self) -> bool {
            true
        }
        fn capacity(&self) -> Option<(u64, u64)> {
            Some((7, 3))
        }
        fn check_key(&self, key: &str) -> StoreResult<()> {
            Err(StoreError::InvalidKey(key.into(), "particular"))
        }
        fn whole_object_limit(&self) -> u64 {
            42
        }
    }

    #[async_trait]
    impl Store for Particular {
        async fn get(&self, key: &str) -> StoreResult<Bytes> {
            self.0.get(key).await
        }
        async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
            self.0.get_range(key, range).await
        }
        async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
            self.0.head(key).await
        }
        async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
            self.0.put_opts(key, data, mode).await
        }
        async fn delete(&self, key: &str) -> StoreResult<()> {
            self.0.delete(key).await
        }
        async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
            self.0.delete_if_version(key, version).await
        }
        async fn list(&self, prefix: &str) -> StoreResult<Listing> {
            self.0.list(prefix).await
        }
        async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
            self.0.lookup(key).await
        }
        async fn rename_dir(&self, _from: &str, _to: &str) -> StoreResult<()> {
            Err(StoreError::NoSpace)
        }
        async fn create_dir(&self, key: &str) -> StoreResult<()> {
            Err(StoreError::AlreadyExists(key.into()))
        }
    }

    /// A layer that writes nothing of its own.
    struct Plain(Arc<dyn Store>);

    impl Layer for Plain {
        fn inner(&self) -> &dyn Store {
            &*self.0
        }
    }

    #[tokio::test]
    async fn a_layer_forwards_what_it_does_not_write() {
        let s: Arc<dyn Store> =
            Arc::new(Plain(Arc::new(Plain(Arc::new(Particular(MemoryStore::new()))))));
        assert_eq!(s.describe(), "particular");
        assert!(s.has_real_dirs());
        assert_eq!(s.capacity(), Some((7, 3)));
        assert_eq!(s.whole_object_limit(), 42);
        assert!(matches!(s.check_key("k"), Err(StoreError::InvalidKey(_, "particular"))));
        assert!(matches!(s.create_dir("d").await, Err(StoreError::AlreadyExists(_))));
        assert!(matches!(s.rename_dir("a", "b").await, Err(StoreError::NoSpace)));
        s.put("k", Bytes::from_static(b"v")).await.unwrap();
        assert_eq!(s.get_versioned("k").await.unwrap().unwrap().0.as_ref(), b"v");
        s.rename("k", "j").await.unwrap();
        assert_eq!(s.get("j").await.unwrap().as_ref(), b"v");
    }
}
