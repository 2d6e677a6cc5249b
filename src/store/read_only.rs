//! Backends that can only be read (zip archives, reference stores, Icechunk snapshots).
//!
//! Such a backend implements `ReadStore`, `ListStore` and `StoreHints`, and is mounted as
//! `ReadOnly(backend)`, a `Store` whose every write and every name check is refused with
//! `ReadOnly` (EROFS), written once here instead of in each backend.

use bytes::Bytes;

use crate::store::layers::{HintsLayer, Layer, ListLayer, ReadLayer};
use crate::store::Spill;
use crate::store::{ListStore, PutMode, ReadStore, StoreError, StoreHints, StoreResult};

/// A read-only backend as a `Store` that refuses every write.
pub struct ReadOnly<B>(pub B);

impl<B> std::ops::Deref for ReadOnly<B> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.0
    }
}

impl<B: ReadStore + ListStore + StoreHints> Layer for ReadOnly<B> {
    type Below = B;
    fn inner(&self) -> &B {
        &self.0
    }
}

/// Reads, listings and lookups are the backend's own; its index (a zip's central directory, a
/// snapshot's manifest) answers them.
impl<B: ReadStore + ListStore + StoreHints> ReadLayer for ReadOnly<B> {}
impl<B: ReadStore + ListStore + StoreHints> ListLayer for ReadOnly<B> {}

impl<B: ReadStore + ListStore + StoreHints> HintsLayer for ReadOnly<B> {
    /// Refused before a file is created, so `create(2)` fails with EROFS at once.
    fn check_key(&self, _key: &str) -> StoreResult<()> {
        Err(StoreError::ReadOnly)
    }
}

#[async_trait::async_trait]
#[deny(clippy::missing_trait_methods)]
impl<B: ReadStore + ListStore + StoreHints> crate::store::WriteStore for ReadOnly<B> {
    async fn put(&self, _key: &str, _data: Bytes) -> StoreResult<()> {
        Err(StoreError::ReadOnly)
    }
    async fn put_opts(&self, _key: &str, _data: Bytes, _mode: PutMode) -> StoreResult<()> {
        Err(StoreError::ReadOnly)
    }
    async fn put_file(
        &self,
        _key: &str,
        _file: Spill,
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
