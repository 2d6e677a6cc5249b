//! A store adapter that records every request reaching the store below it (and can hold each
//! read back for a while). Tests use it to prove request counts ("a chunk read is one ranged
//! GET", "N concurrent readers share one fetch"); it is also handy for measuring a workload.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::{
    ByteRange, EntryPages, ListPages, Listing, Lookup, MetaWanted, ObjectMeta, PutMode,
    Revalidated, Store, StoreResult,
};

pub struct RecordingStore {
    inner: Arc<dyn Store>,
    calls: Mutex<Vec<String>>,
    read_delay: Duration,
    /// Object bytes returned by reads and given to puts.
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
}

/// The request kinds, as the first word of each recorded call.
pub const READS: [&str; 4] = ["get", "get_range", "get_ranged", "get_if_changed"];

impl RecordingStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self::with_read_delay(inner, Duration::ZERO)
    }

    /// Every read waits `delay` before reaching the store (lets concurrent readers pile up).
    pub fn with_read_delay(inner: Arc<dyn Store>, delay: Duration) -> Self {
        RecordingStore {
            inner,
            calls: Mutex::new(Vec::new()),
            read_delay: delay,
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
        }
    }

    /// Object bytes the store below returned to reads so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::SeqCst)
    }

    /// Object bytes given to puts so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written.load(Ordering::SeqCst)
    }

    fn read_bytes<T>(&self, r: StoreResult<T>, len: impl Fn(&T) -> usize) -> StoreResult<T> {
        if let Ok(v) = &r {
            self.bytes_read.fetch_add(len(v) as u64, Ordering::SeqCst);
        }
        r
    }

    fn record(&self, call: String) {
        crate::locks::lock(&self.calls).push(call);
    }

    async fn record_read(&self, call: String) {
        self.record(call);
        if !self.read_delay.is_zero() {
            tokio::time::sleep(self.read_delay).await;
        }
    }

    /// The calls so far, e.g. `"get_ranged a/b/0 Suffix(804)"`.
    pub fn calls(&self) -> Vec<String> {
        crate::locks::lock(&self.calls).clone()
    }

    /// The calls so far, forgetting them.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *crate::locks::lock(&self.calls))
    }

    /// How many calls of these kinds were made.
    pub fn count(&self, kinds: &[&str]) -> usize {
        self.calls().iter().filter(|c| kinds.contains(&c.split(' ').next().unwrap_or(""))).count()
    }
}

crate::store::layers::layer_over!(RecordingStore);

#[async_trait]
impl crate::store::layers::ReadLayer for RecordingStore {
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.record_read(format!("get {key}")).await;
        self.read_bytes(self.inner.get(key).await, Bytes::len)
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.record_read(format!("get_range {key} {range:?}")).await;
        self.read_bytes(self.inner.get_range(key, range).await, Bytes::len)
    }
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        self.record_read(format!("get_ranged {key} {range:?}")).await;
        let r = self.inner.get_ranged(key, range).await;
        self.read_bytes(r, |r| r.as_ref().map_or(0, |(b, _)| b.len()))
    }
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.record(format!("head {key}"));
        self.inner.head(key).await
    }
    async fn get_if_changed(
        &self,
        key: &str,
        range: ByteRange,
        known: &ObjectMeta,
    ) -> StoreResult<Revalidated> {
        self.record_read(format!("get_if_changed {key} {range:?}")).await;
        let r = self.inner.get_if_changed(key, range, known).await;
        self.read_bytes(r, |r| match r {
            Revalidated::Changed(Some((b, _))) => b.len(),
            _ => 0,
        })
    }
}

#[async_trait]
impl crate::store::layers::ListLayer for RecordingStore {
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        self.record(format!("list {prefix}"));
        self.inner.list(prefix).await
    }
    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        self.record(format!("list {prefix}"));
        self.inner.list_pages(prefix)
    }
    fn list_pages_after<'a>(&'a self, prefix: &'a str, after: &'a str) -> ListPages<'a> {
        self.record(format!("list {prefix} after {after:?}"));
        self.inner.list_pages_after(prefix, after)
    }
    fn list_entry_pages<'a>(&'a self, prefix: &'a str, wanted: MetaWanted) -> EntryPages<'a> {
        self.record(format!("list {prefix}"));
        self.inner.list_entry_pages(prefix, wanted)
    }
    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        self.record(format!("lookup {key}"));
        self.inner.lookup(key).await
    }
    async fn lookup_reading(&self, key: &str, limit: u64) -> StoreResult<(Lookup, Option<Bytes>)> {
        self.record(format!("lookup_reading {key}"));
        self.inner.lookup_reading(key, limit).await
    }
}

#[async_trait]
impl crate::store::layers::WriteLayer for RecordingStore {
    async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        match &mode {
            PutMode::Overwrite => self.record(format!("put {key}")),
            m => self.record(format!("put {key} {m:?}")),
        }
        self.bytes_written.fetch_add(data.len() as u64, Ordering::SeqCst);
        self.inner.put_opts(key, data, mode).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.record(format!("delete {key}"));
        self.inner.delete(key).await
    }
    async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
        self.record(format!("delete {key} if {version}"));
        self.inner.delete_if_version(key, version).await
    }
    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.record(format!("rename {from} {to}"));
        self.inner.rename(from, to).await
    }
    async fn create_dir(&self, key: &str) -> StoreResult<()> {
        self.record(format!("create_dir {key}"));
        self.inner.create_dir(key).await
    }
    async fn remove_dir(&self, key: &str) -> StoreResult<()> {
        self.record(format!("remove_dir {key}"));
        self.inner.remove_dir(key).await
    }
    async fn rename_dir(&self, from: &str, to: &str) -> StoreResult<()> {
        self.record(format!("rename_dir {from} {to}"));
        self.inner.rename_dir(from, to).await
    }
}

impl crate::store::layers::HintsLayer for RecordingStore {}
