//! Reads: whole, ranged, suffix and conditional GETs in shapes every server takes (suffix
//! ranges replaced where a server refuses them), and HEADs.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

use crate::store::ReadStore;
use crate::store::{error_chain, ByteRange, ObjectMeta, Revalidated, StoreError, StoreResult};

use super::errors::map_err_with;
use super::{to_meta, ObjectStoreBackend};

/// How many object sizes a backend remembers (LRU; about 100 bytes each).
pub(super) const SIZES_REMEMBERED: usize = 65_536;

/// What keeps ranged reads to request shapes every server accepts. A suffix range longer
/// than the object (`bytes=-N`, N > size) is whole-object on AWS and moto, but s3s-fs
/// answers 500, and Azure takes no suffix ranges at all: where the size is known, such a
/// read asks for the whole object instead; where it is not and the server refuses the
/// suffix, the read falls back to HEAD + a bounded range, and the mount remembers.
pub(super) struct RequestShapes {
    /// Last known size of each key, from listings, HEADs and reads. Only a hint: a stale
    /// size never gives wrong bytes (see `get_ranged`).
    pub(super) sizes: Mutex<lru::LruCache<String, u64>>,
    /// Set once this server has refused a suffix range: from then on a suffix read of an
    /// object of unknown size starts with a HEAD.
    pub(super) suffix_needs_size: AtomicBool,
    /// Set once this server has answered a conditional GET of an unchanged object with its
    /// body (s3s-fs ignores If-None-Match): from then on revalidations are HEADs.
    pub(super) conditions_ignored: AtomicBool,
}

impl Default for RequestShapes {
    fn default() -> Self {
        RequestShapes {
            sizes: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(SIZES_REMEMBERED).expect("non-zero"),
            )),
            suffix_needs_size: Default::default(),
            conditions_ignored: Default::default(),
        }
    }
}

impl RequestShapes {
    pub(super) fn lock(&self) -> MutexGuard<'_, lru::LruCache<String, u64>> {
        crate::locks::lock(&self.sizes)
    }
    pub(super) fn note(&self, key: &str, size: u64) {
        self.lock().put(key.to_string(), size);
    }
    pub(super) fn forget(&self, key: &str) {
        self.lock().pop(key);
    }
    pub(super) fn size(&self, key: &str) -> Option<u64> {
        self.lock().get(key).copied()
    }
    pub(super) fn suffix_refused(&self) -> bool {
        self.suffix_needs_size.load(Ordering::Relaxed)
    }
    pub(super) fn conditions_ignored(&self) -> bool {
        self.conditions_ignored.load(Ordering::Relaxed)
    }
}

/// Whether `e`, the answer to a suffix-range GET, says the server refuses that request
/// shape (rather than that the object is missing or the server is down): 416, 500 or 501,
/// or a client that cannot send it (object_store's Azure client).
pub(super) fn refuses_suffix(e: &StoreError) -> bool {
    match e {
        StoreError::Unsupported(_) => true,
        StoreError::Backend { message, .. } => ["416", "500", "501"]
            .iter()
            .any(|code| message.contains(&format!("status code: {code}"))),
        _ => false,
    }
}

/// Whether the server answered with a 5xx status (after object_store's retries), as opposed
/// to not answering at all or refusing the request.
pub(super) fn server_error(e: &object_store::Error) -> bool {
    error_chain(e).contains("non-2xx status code: 5")
}

/// The last `n` bytes of `data`.
pub(super) fn last_bytes(data: Bytes, n: u64) -> Bytes {
    let keep = usize::try_from(n).unwrap_or(usize::MAX).min(data.len());
    data.slice(data.len() - keep..)
}

/// The condition under which a GET sends `known`'s object only if it changed: its ETag (a
/// quoted tag, as S3, GCS, Azure and HTTP servers give them), else its modification time
/// (HTTP dates have whole seconds: a change within the second of the last one goes unseen,
/// as for any client of such a server). `None`: nothing to condition on.
pub(super) fn if_changed(known: &ObjectMeta) -> Option<GetOptions> {
    let v = &known.version;
    if v.starts_with('"') || v.starts_with("W/\"") {
        return Some(GetOptions { if_none_match: Some(v.clone()), ..Default::default() });
    }
    let since = known.modified.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    let date = chrono::DateTime::from_timestamp(i64::try_from(since.as_secs()).ok()?, 0)?;
    (since.as_secs() > 0)
        .then(|| GetOptions { if_modified_since: Some(date), ..Default::default() })
}

impl ObjectStoreBackend {
    pub(super) async fn head_opt(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        if key.is_empty() {
            return Ok(None);
        }
        let path = self.path(key)?;
        match self.store.head(&path).await {
            Ok(m) => {
                self.shapes.note(key, m.size);
                Ok(Some(to_meta(&m)))
            }
            Err(object_store::Error::NotFound { .. }) => {
                self.shapes.forget(key);
                Ok(None)
            }
            // s3s-fs keeps objects as files, so a key that is (or was: emptied directories
            // stay) a directory on its disk answers HEAD with 500. A listing that answers and
            // does not show the key as an object settles it: there is no such object. Any other
            // outcome keeps the 500, so an outage is still an error and never "absent".
            Err(e) if server_error(&e) => match self.listed_as_object(key).await {
                Ok(false) => {
                    tracing::debug!(key, error = %error_chain(&e), "HEAD failed but the listing has no such object: absent");
                    self.shapes.forget(key);
                    Ok(None)
                }
                _ => Err(self.err(key, e)),
            },
            Err(e) => Err(self.err(key, e)),
        }
    }

    /// One GET, answered once its headers are in; `Ok(None)` for a missing object. The size
    /// it reports is remembered.
    pub(super) async fn send_get(
        &self,
        key: &str,
        path: &Path,
        range: Option<GetRange>,
    ) -> StoreResult<Option<(ObjectMeta, object_store::GetResult)>> {
        let opts = GetOptions { range, ..Default::default() };
        let result = match self.store.get_opts(path, opts).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => {
                self.shapes.forget(key);
                return Ok(None);
            }
            Err(e) => return Err(self.err(key, e)),
        };
        let meta = to_meta(&result.meta);
        self.shapes.note(key, meta.size);
        Ok(Some((meta, result)))
    }

    /// One GET, its body read whole; `Ok(None)` for a missing object.
    pub(super) async fn get_opts(
        &self,
        key: &str,
        path: &Path,
        range: Option<GetRange>,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let Some((meta, result)) = self.send_get(key, path, range).await? else { return Ok(None) };
        let data = result.bytes().await.map_err(|e| self.err(key, e))?;
        Ok(Some((data, meta)))
    }

    /// The answer to a ranged read that failed with `e`: a 416 for a range that starts at or
    /// past the end (also every range of an empty object) is "no bytes", with the object's
    /// metadata (one HEAD); anything else is `e`.
    pub(super) async fn past_the_end(
        &self,
        key: &str,
        range: &ByteRange,
        e: StoreError,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        if let (StoreError::Backend { .. }, ByteRange::Range(r)) = (&e, range) {
            if let Some(meta) = self.head_opt(key).await? {
                if r.start >= meta.size {
                    return Ok(Some((Bytes::new(), meta)));
                }
            }
        }
        Err(e)
    }

    /// The last `n` bytes of an object whose size is known (`size`, possibly stale): a
    /// suffix range no longer than the object, or the whole object. Never an over-long
    /// suffix, which some servers refuse.
    pub(super) async fn get_suffix_sized(
        &self,
        key: &str,
        path: &Path,
        n: u64,
        size: u64,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        if n >= size {
            // The whole object; if it has grown since, keep its last `n` bytes.
            let r = self.get_opts(key, path, None).await?;
            return Ok(r.map(|(data, meta)| (last_bytes(data, n), meta)));
        }
        self.get_opts(key, path, Some(GetRange::Suffix(n))).await
    }

    /// The last `n` bytes with the size from a HEAD first: two requests, every server.
    pub(super) async fn get_suffix_after_head(
        &self,
        key: &str,
        path: &Path,
        n: u64,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let Some(meta) = self.head_opt(key).await? else { return Ok(None) };
        if meta.size == 0 {
            return Ok(Some((Bytes::new(), meta)));
        }
        if n >= meta.size {
            return self.get_suffix_sized(key, path, n, meta.size).await;
        }
        // A bounded range rather than a suffix: this server may refuse suffixes altogether.
        let range = GetRange::Bounded(meta.size - n..meta.size);
        match self.get_opts(key, path, Some(range)).await? {
            // The object shrank between the HEAD and the GET: read it whole.
            None => Ok(None),
            Some((_, now)) if now.size != meta.size => {
                self.get_suffix_sized(key, path, n, now.size).await
            }
            r => Ok(r),
        }
    }
}

#[async_trait]
impl ReadStore for ObjectStoreBackend {
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        let path = self.path(key)?;
        let r = self.store.get(&path).await.map_err(|e| self.err(key, e))?;
        crate::metrics::first_byte_now(); // headers in, body not yet read
        r.bytes().await.map_err(|e| self.err(key, e))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        if range.end <= range.start {
            return Ok(Bytes::new());
        }
        match self.get_ranged(key, ByteRange::Range(range)).await? {
            Some((data, _)) => Ok(data),
            None => Err(StoreError::NotFound(key.to_string())),
        }
    }

    /// One GET with a Range header; the response carries the object's size and ETag. A
    /// suffix read never sends a suffix longer than the object when its size is known (the
    /// whole object is asked for instead); when it is not known and the server refuses the
    /// suffix (416, 500, 501), the read is retried once as HEAD + bounded range, and every
    /// later suffix read of an unknown size on this mount starts with the HEAD.
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let path = self.path(key)?;
        let get_range = match &range {
            ByteRange::Range(r) if r.start == 0 && r.end == u64::MAX => None, // the whole object
            ByteRange::Range(r) if r.end <= r.start => {
                return Ok(self.head_opt(key).await?.map(|m| (Bytes::new(), m)));
            }
            ByteRange::Range(r) => Some(GetRange::Bounded(r.clone())),
            ByteRange::Suffix(0) => {
                return Ok(self.head_opt(key).await?.map(|m| (Bytes::new(), m)))
            }
            &ByteRange::Suffix(n) => {
                if let Some(size) = self.shapes.size(key) {
                    return match self.get_suffix_sized(key, &path, n, size).await {
                        // Shrunk since its size was seen: the suffix is over-long again.
                        Err(e) if refuses_suffix(&e) => {
                            self.get_suffix_after_head(key, &path, n).await
                        }
                        r => r,
                    };
                }
                if self.shapes.suffix_refused() {
                    return self.get_suffix_after_head(key, &path, n).await;
                }
                Some(GetRange::Suffix(n))
            }
        };
        match self.get_opts(key, &path, get_range).await {
            Err(e) => {
                if let ByteRange::Suffix(n) = range {
                    if refuses_suffix(&e) {
                        let r = self.get_suffix_after_head(key, &path, n).await?;
                        // (Every server may answer 416 for an empty object: that says nothing.)
                        let refused = r.as_ref().is_some_and(|(_, m)| m.size > 0);
                        if refused && !self.shapes.suffix_needs_size.swap(true, Ordering::Relaxed) {
                            tracing::info!(store = %self.description, error = %e, "the server refused a suffix range: suffix reads of objects of unknown size now start with a HEAD");
                        }
                        return Ok(r);
                    }
                }
                self.past_the_end(key, &range, e).await
            }
            ok => ok,
        }
    }

    /// A range from a known start as one GET whose body is handed on as it arrives. Other
    /// shapes (suffixes have their own answers there) are `get_ranged`'s.
    async fn get_streamed(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(ObjectMeta, crate::store::Body)>> {
        use futures::StreamExt;
        let get_range = match &range {
            ByteRange::Range(r) if r.start == 0 && r.end == u64::MAX => None,
            ByteRange::Range(r) if r.start < r.end => Some(GetRange::Bounded(r.clone())),
            _ => return Ok(crate::store::as_one_piece(self.get_ranged(key, range).await?)),
        };
        let path = self.path(key)?;
        let (meta, result) = match self.send_get(key, &path, get_range).await {
            Ok(Some(got)) => got,
            Ok(None) => return Ok(None),
            Err(e) => {
                return Ok(crate::store::as_one_piece(self.past_the_end(key, &range, e).await?))
            }
        };
        crate::metrics::first_byte_now(); // headers in, body not yet read
        let (key, secrets) = (key.to_string(), self.secrets.clone());
        let body = result
            .into_stream()
            .map(move |piece| piece.map_err(|e| map_err_with(&key, e, &secrets)));
        Ok(Some((meta, Box::pin(body))))
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.head_opt(key).await
    }

    /// One conditional GET of a range from a known start (If-None-Match with the ETag, else
    /// If-Modified-Since): a 304 is `Unchanged`. A server that sends the body of an unchanged
    /// object anyway is answered from its headers, the body left unread, and revalidated with
    /// HEADs from then on. Suffixes (whose place depends on the size now) and servers known to
    /// ignore conditions get a HEAD (and a GET if changed).
    async fn get_if_changed(
        &self,
        key: &str,
        range: ByteRange,
        known: &ObjectMeta,
    ) -> StoreResult<Revalidated> {
        let get_range = match &range {
            ByteRange::Range(r) if r.start == 0 && r.end == u64::MAX => None,
            ByteRange::Range(r) if r.start < r.end => Some(GetRange::Bounded(r.clone())),
            _ => return crate::store::revalidate_by_head(self, key, range, known).await,
        };
        let condition = if_changed(known);
        let Some(condition) = condition.filter(|_| !self.shapes.conditions_ignored()) else {
            return crate::store::revalidate_by_head(self, key, range, known).await;
        };
        let path = self.path(key)?;
        let opts = GetOptions { range: get_range, ..condition };
        let result = match self.store.get_opts(&path, opts).await {
            Ok(r) => r,
            Err(object_store::Error::NotModified { .. }) => return Ok(Revalidated::Unchanged),
            Err(object_store::Error::NotFound { .. }) => {
                self.shapes.forget(key);
                return Ok(Revalidated::Changed(None));
            }
            Err(e) => {
                let e = self.err(key, e);
                return Ok(Revalidated::Changed(self.past_the_end(key, &range, e).await?));
            }
        };
        let meta = to_meta(&result.meta);
        self.shapes.note(key, meta.size);
        if crate::store::same_version(&meta, known) {
            if !self.shapes.conditions_ignored.swap(true, Ordering::Relaxed) {
                tracing::info!(store = %self.description, "the server ignores conditional GETs: cached objects are revalidated with HEADs");
            }
            return Ok(Revalidated::Unchanged);
        }
        crate::metrics::first_byte_now(); // headers in, body not yet read
        let data = result.bytes().await.map_err(|e| self.err(key, e))?;
        Ok(Revalidated::Changed(Some((data, meta))))
    }
}
