//! The disk cache as a `Store` layer: reads through the cache, listings and lookups through
//! the journal, writes forgetting what they change.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;

use super::freshness::Answer;
use super::writer::{blocks_written, Fetched};
use super::DiskCacheStore;
use crate::store::layers::{forgetting, Changes};
use crate::store::Spill;
use crate::store::{ByteRange, ListPages, Listing, Lookup, ObjectMeta, PutMode, StoreResult};

/// The layer as a `Store`: an `Arc` inside, because reads hand work to background tasks.
pub struct DiskCache(pub Arc<DiskCacheStore>);

crate::store::layers::layer_over!(DiskCache, 0.inner);

#[async_trait]
impl crate::store::layers::ReadLayer for DiskCache {
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        crate::store::found(key, self.0.read(key, ByteRange::Range(0..u64::MAX)).await?)
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        if range.end <= range.start {
            return Ok(Bytes::new());
        }
        crate::store::found(key, self.0.read(key, ByteRange::Range(range)).await?)
    }

    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        self.0.read(key, range).await
    }

    /// An earlier daemon's answer within the TTL (a lookup, a listing of the parent, or a
    /// version learned by a read), or this one's, is used as it is, as for `lookup`: a chunk file looked up
    /// by HEAD alone (see `views::raw::mapping`) costs no request on a warm remount. A found
    /// object's version is kept for the next daemon.
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        if let Some(m) = self.0.journal.replayed_head(key) {
            return Ok(m);
        }
        // What this daemon saw within the TTL, as a read would trust it.
        if let Some(m) = self.0.fresh_meta(key) {
            return Ok(Some(m));
        }
        let start = self.0.writes.read_starts(key);
        let m = self.0.inner.head(key).await?;
        self.0.observe(key, m.as_ref(), Answer::CONFIRMED, &start);
        Ok(m)
    }
}

#[async_trait]
impl crate::store::layers::ListLayer for DiskCache {
    // Listings and lookups: an earlier daemon's answer within the TTL is used as it is (the
    // versions it names were seeded into `known` at open); this run's answers are recorded.
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        if let Some(listing) = self.0.journal.replayed_list(prefix) {
            return Ok(listing);
        }
        let start = self.0.writes.listing_starts();
        let since = self.0.journal.forgets();
        let listing = self.0.inner.list(prefix).await?;
        for (name, meta) in &listing.files {
            let key = crate::store::join_key(prefix, name);
            self.0.observe(&key, Some(meta), Answer::LOOKUP, &start.of(&key));
        }
        self.0.journal.record_list(since, prefix, &listing);
        Ok(listing)
    }

    /// A listing the journal holds (from this daemon or an earlier one) is answered whole, as
    /// `list` answers it. One from the store goes out page by page and is recorded once its
    /// last page arrived (a listing dropped midway or failed is not recorded).
    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        use futures::StreamExt;
        if let Some(listing) = self.0.journal.replayed_list(prefix) {
            return Box::pin(futures::stream::once(async move { Ok(listing) }));
        }
        let whole = Arc::new(Mutex::new(Some(Listing::default())));
        let collect = whole.clone();
        let start = self.0.writes.listing_starts();
        let since = self.0.journal.forgets();
        let pages = self.0.inner.list_pages(prefix).inspect(move |page| {
            let mut whole = crate::locks::lock(&collect);
            match page {
                Ok(l) => {
                    for (name, meta) in &l.files {
                        let key = crate::store::join_key(prefix, name);
                        self.0.observe(&key, Some(meta), Answer::LOOKUP, &start.of(&key));
                    }
                    if let Some(w) = whole.as_mut() {
                        w.files.extend(l.files.iter().cloned());
                        w.dirs.extend(l.dirs.iter().cloned());
                    }
                }
                Err(_) => *whole = None,
            }
        });
        let record = futures::stream::once(async move {
            let done = crate::locks::lock(&whole).take();
            if let Some(mut listing) = done {
                listing.files.sort_by(|a, b| a.0.cmp(&b.0));
                listing.dirs.sort();
                self.0.journal.record_list(since, prefix, &listing);
            }
        })
        .filter_map(|()| async { None });
        Box::pin(pages.chain(record))
    }

    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        if let Some(l) = self.0.journal.replayed_lookup(key) {
            return Ok(l);
        }
        let since = self.0.journal.forgets();
        let start = self.0.writes.read_starts(key);
        let l = self.0.inner.lookup(key).await?;
        // Not kept when a write went through meanwhile: the answer may predate it.
        if self.0.journal.record_lookup(since, key, &l) && !key.is_empty() {
            self.0.observe(key, l.file.as_ref(), Answer::LOOKUP, &start);
        }
        Ok(l)
    }

    /// As `lookup`; the bytes it brought (all of a metadata document) are kept as a read's
    /// are, so the next daemon reads the document with no request either.
    async fn lookup_reading(&self, key: &str, limit: u64) -> StoreResult<(Lookup, Option<Bytes>)> {
        if let Some(l) = self.0.journal.replayed_lookup(key) {
            return Ok((l, None));
        }
        let since = self.0.journal.forgets();
        let start = self.0.writes.read_starts(key);
        // A document whose copy is on disk from an earlier daemon: confirmed rather than read
        // again (a lookup of a document's name never answers a directory, see `Store`).
        if let Some(known) = self.0.known_meta(key).filter(|m| m.size <= limit) {
            let whole = ByteRange::Range(0..u64::MAX);
            if self.0.fresh_meta(key).is_none() && self.0.holds_any(key, &known, &whole) {
                match self.0.revalidate(key, &whole, known).await? {
                    Ok(known) => {
                        let l = Lookup { file: Some(known), dir: false, dir_perms: None };
                        self.0.journal.record_lookup(since, key, &l);
                        let data = self.0.read(key, whole).await?.map(|(d, _)| d);
                        return Ok((l, data));
                    }
                    Err(Some((data, meta))) => {
                        let l = Lookup { file: Some(meta.clone()), dir: false, dir_perms: None };
                        if self.0.observe(key, Some(&meta), Answer::READ, &start) {
                            self.0.journal.record_lookup(since, key, &l);
                            let fetched = Fetched { start: 0, data: data.clone() };
                            blocks_written(self.0.store_blocks(key, &meta, &fetched)).await;
                        }
                        return Ok((l, Some(data)));
                    }
                    // Deleted: a directory of that name may still be there.
                    Err(None) => {
                        self.0.observe(key, None, Answer::READ, &start);
                    }
                }
            }
        }
        let (l, data) = self.0.inner.lookup_reading(key, limit).await?;
        // (Not kept when a write went through meanwhile: see `lookup`; `observe` checks too.)
        if key.is_empty() || !self.0.journal.record_lookup(since, key, &l) {
            return Ok((l, data));
        }
        match (&l.file, &data) {
            (Some(meta), Some(bytes)) if bytes.len() as u64 == meta.size && meta.size > 0 => {
                if self.0.observe(key, Some(meta), Answer::CONFIRMED, &start) {
                    let fetched = Fetched { start: 0, data: bytes.clone() };
                    blocks_written(self.0.store_blocks(key, meta, &fetched)).await;
                }
            }
            (file, _) => {
                self.0.observe(key, file.as_ref(), Answer::LOOKUP, &start);
            }
        }
        Ok((l, data))
    }
}

impl DiskCacheStore {
    /// Send `write`, a write of `changes` to the store below, with what this cache knows of
    /// them forgotten before and after (`layers::forgetting`); a read overlapping it keeps
    /// nothing (`write_watch.rs`).
    async fn write_through<T>(
        &self,
        changes: Changes<'_>,
        write: impl std::future::Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        let _writing = match changes {
            Changes::Keys(keys) => self.writes.writing(keys),
            Changes::Trees(_) => self.writes.writing_all(),
        };
        forgetting(changes, |k| self.forget(k), |p| self.forget_prefix(p), write).await
    }
}

#[async_trait]
impl crate::store::layers::WriteLayer for DiskCache {
    async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        let put = self.0.inner.put_opts(key, data, mode);
        self.0.write_through(Changes::Keys(&[key]), put).await
    }

    async fn put_file(&self, key: &str, file: Spill, len: u64, mode: PutMode) -> StoreResult<()> {
        let put = self.0.inner.put_file(key, file, len, mode);
        self.0.write_through(Changes::Keys(&[key]), put).await
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.0.write_through(Changes::Keys(&[key]), self.0.inner.delete(key)).await
    }

    async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
        let delete = self.0.inner.delete_if_version(key, version);
        self.0.write_through(Changes::Keys(&[key]), delete).await
    }

    async fn create_dir(&self, key: &str) -> StoreResult<()> {
        self.0.write_through(Changes::Keys(&[key]), self.0.inner.create_dir(key)).await
    }

    async fn remove_dir(&self, key: &str) -> StoreResult<()> {
        self.0.write_through(Changes::Keys(&[key]), self.0.inner.remove_dir(key)).await
    }

    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.0.write_through(Changes::Keys(&[from, to]), self.0.inner.rename(from, to)).await
    }

    async fn rename_dir(&self, from: &str, to: &str) -> StoreResult<()> {
        let rename = self.0.inner.rename_dir(from, to);
        self.0.write_through(Changes::Trees(&[from, to]), rename).await
    }
}

impl crate::store::layers::HintsLayer for DiskCache {
    fn local_copy(&self, key: &str, version: &str) -> Option<std::fs::File> {
        self.0.local_copy(key, version)
    }

    fn keeps_local_copy(&self, key: &str) -> bool {
        self.0.keeps_local_copy(key)
    }
}
