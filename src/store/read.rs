//! Reading objects: `ReadStore`, and the answers its operations give.

use std::ops::Range;

use bytes::Bytes;

use crate::store::capability::capability;
use crate::store::{ObjectMeta, StoreError, StoreResult};

/// The bytes of an answer, piece by piece in order (see `ReadStore::get_streamed`).
pub type Body = futures::stream::BoxStream<'static, StoreResult<Bytes>>;

/// `data` as a body of one piece.
pub fn one_piece(data: Bytes) -> Body {
    Box::pin(futures::stream::once(async move { Ok(data) }))
}

/// A `get_ranged` answer as a `get_streamed` one: its bytes as one piece.
pub fn as_one_piece(got: Option<(Bytes, ObjectMeta)>) -> Option<(ObjectMeta, Body)> {
    got.map(|(data, meta)| (meta, one_piece(data)))
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

/// What a revalidation found (`ReadStore::get_if_changed`).
#[derive(Debug)]
pub enum Revalidated {
    /// Still at the version known: no object bytes were received.
    Unchanged,
    /// Changed or gone: what `get_ranged` of the range answers now (`None`: no object).
    Changed(Option<(Bytes, ObjectMeta)>),
}

/// Is `now` the version `known` names? Without a version tag the modification time decides.
pub fn same_version(now: &ObjectMeta, known: &ObjectMeta) -> bool {
    now.version == known.version
        && now.size == known.size
        && (!now.version.is_empty() || now.modified == known.modified)
}

/// `ReadStore::get_if_changed` with a HEAD, and a GET of `range` only for a changed object.
pub async fn revalidate_by_head<S: ReadStore + ?Sized>(
    store: &S,
    key: &str,
    range: ByteRange,
    known: &ObjectMeta,
) -> StoreResult<Revalidated> {
    match store.head(key).await? {
        Some(now) if same_version(&now, known) => Ok(Revalidated::Unchanged),
        Some(_) => Ok(Revalidated::Changed(store.get_ranged(key, range).await?)),
        None => Ok(Revalidated::Changed(None)),
    }
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

capability! {
    /// Reading objects: whole, by range, streamed, their metadata, and revalidation.
    pub trait ReadStore, layer ReadLayer {
        /// The whole object; by default `get_range` of all of it.
        provided async fn get(&self, key: &str) -> StoreResult<Bytes> {
            Self::get_range(self, key, 0..u64::MAX).await
        }

        /// Bytes `range` of the object; a range past the end is clipped (may return fewer bytes).
        required async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes>;

        /// A range of the object together with the object's metadata (whose size tells where
        /// the object ends), in one request where the backend allows; `Ok(None)` when there is
        /// no object.
        provided async fn get_ranged(
            &self,
            key: &str,
            range: ByteRange,
        ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
            let Some(meta) = Self::head(self, key).await? else { return Ok(None) };
            let data = Self::get_range(self, key, range.clip(meta.size)).await;
            absent_if_not_found(data.map(|d| (d, meta)))
        }

        /// `get_ranged`, answered as soon as the object's metadata is known (an object store's
        /// response headers), with the bytes following as they arrive: a reader of the start
        /// of an object need not wait for its end. By default `get_ranged`, its bytes as one
        /// piece. A layer that passes reads through writes it as a forward, so the pieces
        /// reach the cache above as they arrive.
        derived async fn get_streamed(
            &self,
            key: &str,
            range: ByteRange,
        ) -> StoreResult<Option<(ObjectMeta, Body)>> {
            Ok(as_one_piece(Self::get_ranged(self, key, range).await?))
        }

        /// `Ok(None)` when there is no object at `key`.
        required async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>>;

        /// Whether `key` is still at `known` (metadata read earlier), and if not, `range` of
        /// what is there now: one conditional GET where the backend has them (a 304 carries no
        /// body), by default a HEAD (a stat on local disks) and, only for a changed object, a GET.
        provided async fn get_if_changed(
            &self,
            key: &str,
            range: ByteRange,
            known: &ObjectMeta,
        ) -> StoreResult<Revalidated> {
            revalidate_by_head(self, key, range, known).await
        }

        /// The whole object with the metadata of that same content (its version), or `None`.
        derived async fn get_versioned(
            &self,
            key: &str,
        ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
            Self::get_ranged(self, key, ByteRange::Range(0..u64::MAX)).await
        }
    }
}
