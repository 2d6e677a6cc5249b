//! A store adapter that accounts every request reaching the backend below it (the
//! `backend_*` series of `crate::metrics`): count, latency, time to first byte (when the
//! backend reports it), bytes in and out, errors. A mount puts it directly on the backend,
//! below every cache, so it counts what the backend is really asked.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;

use crate::metrics::{self, Kind};
use crate::store::Spill;
use crate::store::{
    Body, ByteRange, EntryPages, ListPages, Listing, Lookup, MetaWanted, ObjectMeta, PutMode,
    Revalidated, Store, StoreError, StoreResult,
};

pub struct MeteredStore {
    inner: Arc<dyn Store>,
}

impl MeteredStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        MeteredStore { inner }
    }
}

/// The `error` label of a failed request: a short class, never the key.
fn class(e: &StoreError) -> &'static str {
    match e {
        StoreError::NotFound(_) => "not_found",
        StoreError::PermissionDenied(_) => "permission_denied",
        StoreError::DirectoryNotEmpty(_)
        | StoreError::NotADirectory(_)
        | StoreError::IsADirectory(_) => "directory",
        StoreError::AlreadyExists(_) => "exists",
        StoreError::Conflict(_) => "conflict",
        StoreError::InvalidKey(..) => "invalid_key",
        StoreError::Unsupported(_) => "unsupported",
        StoreError::NoSpace => "no_space",
        StoreError::ReadOnly => "read_only",
        StoreError::Timeout(_) => "timeout",
        StoreError::Io { .. } => "io",
        StoreError::Backend { .. } => "backend",
    }
}

/// Time one request of `kind`; `received` and `sent` say how many object bytes it moved.
async fn metered<T, F>(
    kind: Kind,
    sent: u64,
    received: impl Fn(&T) -> u64,
    fut: F,
) -> StoreResult<T>
where
    F: std::future::Future<Output = StoreResult<T>>,
{
    let m = &metrics::global().backend;
    m.requests(kind).inc();
    let started = Instant::now();
    let (r, first_byte) = metrics::with_first_byte(fut).await;
    account(kind, sent, received, started, first_byte, r)
}

/// The figures of one request that took from `started` and answered `r`, but the count.
fn account<T>(
    kind: Kind,
    sent: u64,
    received: impl Fn(&T) -> u64,
    started: Instant,
    first_byte: Option<std::time::Duration>,
    r: StoreResult<T>,
) -> StoreResult<T> {
    let m = &metrics::global().backend;
    m.duration(kind).observe(started.elapsed().as_secs_f64());
    if let Some(t) = first_byte {
        m.first_byte(kind).observe(t.as_secs_f64());
    }
    if sent > 0 {
        m.sent(kind).inc_by(sent);
    }
    match &r {
        Ok(v) => m.received(kind).inc_by(received(v)),
        Err(e) => m.error(kind, class(e)),
    }
    r
}

fn nothing<T>(_: &T) -> u64 {
    0
}

/// A listing whose every page counts as one LIST request, timed from the moment it is asked
/// for (so the time a consumer spends between pages is not counted). Serves both page types.
fn metered_pages<'a, P: Send + 'a>(
    pages: BoxStream<'a, StoreResult<P>>,
) -> BoxStream<'a, StoreResult<P>> {
    Box::pin(futures::stream::unfold(pages, |mut pages| async move {
        let started = Instant::now();
        let (page, first_byte) = metrics::with_first_byte(pages.next()).await;
        metrics::global().backend.requests(Kind::List).inc();
        Some((account(Kind::List, 0, nothing, started, first_byte, page?), pages))
    }))
}

/// A streamed read's body, counted as it passes (see `MeteredStore::get_streamed`).
fn metered_body(body: Body, started: Instant, first_byte: Option<std::time::Duration>) -> Body {
    /// Accounts the request once, when the body ends, fails or is dropped.
    struct Ending {
        started: Instant,
        first_byte: Option<std::time::Duration>,
        error: Option<StoreError>,
    }
    impl Drop for Ending {
        fn drop(&mut self) {
            let r = self.error.take().map_or(Ok(()), Err);
            let _ = account(Kind::Range, 0, nothing, self.started, self.first_byte, r);
        }
    }
    let ending = Ending { started, first_byte, error: None };
    Box::pin(futures::stream::unfold((body, Some(ending)), |(mut body, mut ending)| async move {
        let piece = body.next().await?;
        match &piece {
            Ok(data) => metrics::global().backend.received(Kind::Range).inc_by(data.len() as u64),
            Err(e) => {
                if let Some(end) = ending.as_mut() {
                    end.error = Some(e.clone());
                }
                ending = None; // accounted now, with the error
            }
        }
        Some((piece, (body, ending)))
    }))
}

crate::store::layers::layer_over!(MeteredStore);

#[async_trait]
impl crate::store::layers::ReadLayer for MeteredStore {
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        metered(Kind::Get, 0, |b: &Bytes| b.len() as u64, self.inner.get(key)).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        metered(Kind::Range, 0, |b: &Bytes| b.len() as u64, self.inner.get_range(key, range)).await
    }
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let got = |r: &Option<(Bytes, ObjectMeta)>| r.as_ref().map_or(0, |(b, _)| b.len() as u64);
        metered(Kind::Range, 0, got, self.inner.get_ranged(key, range)).await
    }
    /// Counted as a ranged read: the request when its answer starts, the bytes as they
    /// arrive, its time and any error when the body ends (or is dropped unread).
    async fn get_streamed(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(ObjectMeta, Body)>> {
        metrics::global().backend.requests(Kind::Range).inc();
        let started = Instant::now();
        let (r, first_byte) = metrics::with_first_byte(self.inner.get_streamed(key, range)).await;
        match r {
            Ok(Some((meta, body))) => Ok(Some((meta, metered_body(body, started, first_byte)))),
            r => account(Kind::Range, 0, nothing, started, first_byte, r),
        }
    }
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        metered(Kind::Head, 0, nothing, self.inner.head(key)).await
    }
    async fn get_if_changed(
        &self,
        key: &str,
        range: ByteRange,
        known: &ObjectMeta,
    ) -> StoreResult<Revalidated> {
        let got = |r: &Revalidated| match r {
            Revalidated::Changed(Some((b, _))) => b.len() as u64,
            _ => 0,
        };
        metered(Kind::Revalidate, 0, got, self.inner.get_if_changed(key, range, known)).await
    }
}

#[async_trait]
impl crate::store::layers::ListLayer for MeteredStore {
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        metered(Kind::List, 0, nothing, self.inner.list(prefix)).await
    }
    /// Each page counts as one listing request (it is one on object stores); the end of the
    /// listing, which asks the backend nothing, does not.
    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        metered_pages(self.inner.list_pages(prefix))
    }
    /// Counted as `list_pages` is.
    fn list_pages_after<'a>(&'a self, prefix: &'a str, after: &'a str) -> ListPages<'a> {
        metered_pages(self.inner.list_pages_after(prefix, after))
    }
    /// Counted as `list_pages` is.
    fn list_entry_pages<'a>(&'a self, prefix: &'a str, wanted: MetaWanted) -> EntryPages<'a> {
        metered_pages(self.inner.list_entry_pages(prefix, wanted))
    }
    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        metered(Kind::Lookup, 0, nothing, self.inner.lookup(key)).await
    }
    /// Counted as a lookup (its GET stands in for the HEAD); the bytes it brought count.
    async fn lookup_reading(&self, key: &str, limit: u64) -> StoreResult<(Lookup, Option<Bytes>)> {
        let len = |r: &(Lookup, Option<Bytes>)| r.1.as_ref().map_or(0, |b| b.len() as u64);
        metered(Kind::Lookup, 0, len, self.inner.lookup_reading(key, limit)).await
    }
}

#[async_trait]
impl crate::store::layers::WriteLayer for MeteredStore {
    async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        let n = data.len() as u64;
        metered(Kind::Put, n, nothing, self.inner.put_opts(key, data, mode)).await
    }
    async fn put_file(&self, key: &str, file: Spill, len: u64, mode: PutMode) -> StoreResult<()> {
        metered(Kind::Put, len, nothing, self.inner.put_file(key, file, len, mode)).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        metered(Kind::Delete, 0, nothing, self.inner.delete(key)).await
    }
    async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
        metered(Kind::Delete, 0, nothing, self.inner.delete_if_version(key, version)).await
    }
    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        metered(Kind::Copy, 0, nothing, self.inner.rename(from, to)).await
    }
    async fn create_dir(&self, key: &str) -> StoreResult<()> {
        metered(Kind::Dir, 0, nothing, self.inner.create_dir(key)).await
    }
    async fn remove_dir(&self, key: &str) -> StoreResult<()> {
        metered(Kind::Dir, 0, nothing, self.inner.remove_dir(key)).await
    }
    async fn rename_dir(&self, from: &str, to: &str) -> StoreResult<()> {
        metered(Kind::Copy, 0, nothing, self.inner.rename_dir(from, to)).await
    }
}

impl crate::store::layers::HintsLayer for MeteredStore {}
