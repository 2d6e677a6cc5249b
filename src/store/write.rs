//! Writing objects and directories: `WriteStore`, and how a put treats what is there.

use bytes::Bytes;

use crate::store::capability::capability;
use crate::store::{ReadStore, StoreError, StoreResult};

/// How a put treats an object already at the key. Every backend and every layer must carry
/// the mode through (`WriteStore::put_opts` is required): a layer that turned a conditional
/// put into an overwrite would silently lose other writers' data.
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

/// `len` bytes of `file` from `offset`, read on the blocking pool (for `WriteStore::put_file`).
pub async fn read_file_at(key: &str, file: Spill, offset: u64, len: u64) -> StoreResult<Bytes> {
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

/// A write buffer spilled to disk, shared with the upload that streams it (`put_file`).
pub type Spill = std::sync::Arc<std::fs::File>;

capability! {
    /// Changing a store: puts (plain, conditional, from a file), deletes, renames and
    /// directories. A read-only store refuses all of it in one place
    /// (`crate::store::read_only`). It reads too, to rename by copying.
    pub trait WriteStore: ReadStore, layer WriteLayer {
        /// Replace the object atomically: readers see the old or the new content, never a mix.
        derived async fn put(&self, key: &str, data: Bytes) -> StoreResult<()> {
            Self::put_opts(self, key, data, PutMode::Overwrite).await
        }

        /// An atomic put under `mode` (see `PutMode`): the condition is checked by the backend
        /// itself, so two writers (also in two daemons) cannot both pass it.
        required async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode)
            -> StoreResult<()>;

        /// `put_opts` of the first `len` bytes of `file` (a write buffer spilled to disk).
        /// This default reads them into memory; the local and object-store backends (and the
        /// layers in front of them) stream them instead, so a large file costs no more memory
        /// than a part.
        provided async fn put_file(
            &self,
            key: &str,
            file: Spill,
            len: u64,
            mode: PutMode,
        ) -> StoreResult<()> {
            let data = read_file_at(key, file, 0, len).await?;
            Self::put_opts(self, key, data, mode).await
        }

        /// Remove the object; removing a missing object is `NotFound`.
        required async fn delete(&self, key: &str) -> StoreResult<()>;

        /// Remove the object only if it is still at `version`: `Conflict` if it changed,
        /// `NotFound` if it is gone. Backends that cannot check and delete in one step say how
        /// close they come.
        required async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()>;

        /// Rename an object, replacing any object at `to`.
        provided async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
            let data = <Self as ReadStore>::get(self, from).await?;
            Self::put(self, to, data).await?;
            Self::delete(self, from).await
        }

        /// Create an empty directory (only meaningful where `has_real_dirs`).
        provided async fn create_dir(&self, _key: &str) -> StoreResult<()> {
            Ok(())
        }

        /// Remove an empty directory (only meaningful where `has_real_dirs`).
        provided async fn remove_dir(&self, _key: &str) -> StoreResult<()> {
            Ok(())
        }

        /// Rename a directory with everything below it.
        provided async fn rename_dir(&self, _from: &str, _to: &str) -> StoreResult<()> {
            Err(StoreError::Unsupported("renaming a directory"))
        }
    }
}
