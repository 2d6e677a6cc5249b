//! A read cache in front of a remote store.
//!
//! Small objects (up to `object_limit` bytes, the metadata and chunks of most Zarr stores) are
//! fetched whole on their first read and kept in an LRU bounded by bytes; every later read of
//! any range is served from memory. Concurrent first reads of one key share one fetch. Reads of
//! larger objects pass through as ranged GETs.
//!
//! Freshness: a cached object is trusted for `ttl` after it was fetched or last confirmed.
//! Whenever metadata of the key passes through this wrapper (lookup, head, list, ranged reads),
//! the cached version (ETag) is compared with it: equal confirms the entry, different drops it.
//! An entry older than `ttl` is confirmed with one HEAD before use. Writes, deletes and renames
//! through the wrapper drop the affected entries, and a fetch that raced with one is not kept.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::ops::Range;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use lru::LruCache;

use super::filling::{self, Filling};
use crate::flight_lru::FlightLru;
use crate::locks::lock;
use crate::metrics::Ahead;
use crate::store::layers::{forgetting, Changes};
use crate::store::Spill;

use crate::store::{
    Body, ByteRange, EntryPages, ListPages, Listing, Lookup, MetaWanted, ObjectMeta, PutMode,
    Store, StoreError, StoreResult,
};

/// Default largest object that is cached whole.
pub const DEFAULT_OBJECT_LIMIT: u64 = 8 << 20;
/// How many object sizes are remembered (to decide, before a read, whether to fetch whole).
const SIZE_HINTS: usize = 200_000;
/// Absences found by prefetches that are kept (see `CachingStore::absent`).
const ABSENCES: usize = 100_000;

/// Default cache size: 1/8 of RAM, at most 2 GiB.
pub fn default_cache_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) =
        unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    let ram = if pages > 0 && page > 0 { pages as u64 * page as u64 } else { 1 << 30 };
    (ram / 8).min(2 << 30)
}

/// Parse a size such as `512M`, `2G`, `1.5GiB`, `65536` or `0` (bytes; K/M/G/T are powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("{s:?} is not a size (e.g. 512M, 2G)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("{s:?}: unknown unit (use K, M, G or T)")),
    };
    if !n.is_finite() || n < 0.0 {
        return Err(format!("{s:?} is not a size"));
    }
    let bytes = n * mult as f64;
    // `as u64` would saturate: 2^64 bytes and beyond are a typo, not a bound.
    if bytes >= u64::MAX as f64 {
        return Err(format!("{s:?} is too large a size"));
    }
    Ok(bytes as u64)
}

#[derive(Debug, Clone, Copy)]
pub struct CacheConfig {
    /// Total bytes of cached object data.
    pub capacity: u64,
    /// Objects up to this size are cached whole.
    pub object_limit: u64,
    /// How long a cached object is trusted without confirming its version.
    pub ttl: Duration,
}

struct Entry {
    data: Bytes,
    meta: ObjectMeta,
    confirmed: Instant,
    /// Fetched by `prefetch` (for this reason) and not read since: counted as used bytes at
    /// its first read, as wasted if it leaves the cache unread.
    prefetched: Option<Ahead>,
}

type Fetched = Option<(Bytes, ObjectMeta)>;

pub struct CachingStore {
    inner: Arc<dyn Store>,
    cfg: CacheConfig,
    /// Whole small objects; an absent object is fetched (shared) but not kept.
    objects: FlightLru<Entry, Fetched, StoreError>,
    /// Last known (size, version) of objects, from any metadata seen.
    sizes: Mutex<LruCache<String, (u64, String)>>,
    /// Objects a prefetch found absent, and when: a chunk missing from a sparse array (its
    /// fill value) is then absent to the reader's lookup too, with no second request, for
    /// the TTL.
    absent: Mutex<LruCache<String, Instant>>,
    /// Objects being fetched whole now, readable while they arrive (see `filling.rs`): one
    /// per key, there from before its request is sent until its outcome is known.
    filling: Mutex<HashMap<String, Arc<Filling>>>,
    /// This cache, for the fetches that `get_streamed` leaves running after it answers.
    me: Weak<CachingStore>,
}

fn slice(data: &Bytes, r: &ByteRange) -> Bytes {
    let r = r.clip(data.len() as u64);
    data.slice(r.start as usize..r.end as usize)
}

impl CachingStore {
    pub fn new(inner: Arc<dyn Store>, cfg: CacheConfig) -> Arc<Self> {
        let metrics = crate::metrics::global().cache(crate::metrics::CacheKind::Objects);
        Arc::new_cyclic(|me| CachingStore {
            me: me.clone(),
            filling: Mutex::default(),
            inner,
            cfg,
            objects: FlightLru::new(cfg.capacity, metrics).on_leave(left),
            sizes: Mutex::new(LruCache::new(NonZeroUsize::new(SIZE_HINTS).expect("nonzero"))),
            absent: Mutex::new(LruCache::new(NonZeroUsize::new(ABSENCES).expect("nonzero"))),
        })
    }

    fn sizes(&self) -> std::sync::MutexGuard<'_, LruCache<String, (u64, String)>> {
        lock(&self.sizes)
    }

    /// Bytes of object data held now.
    pub fn cached_bytes(&self) -> u64 {
        self.objects.bytes()
    }

    /// Number of objects held now.
    pub fn cached_objects(&self) -> usize {
        self.objects.len()
    }

    /// Fresh metadata of `key` (or its absence) was seen: confirm or drop the cached copy.
    fn observe(&self, key: &str, meta: Option<&ObjectMeta>) {
        match meta {
            Some(m) => {
                lock(&self.absent).pop(key);
                self.sizes().put(key.to_string(), (m.size, m.version.clone()));
                let same = self.objects.peek_with(key, |e| {
                    let same = e.meta.version == m.version;
                    if same {
                        e.confirmed = crate::clock::now();
                    }
                    same
                });
                if same == Some(false) {
                    self.objects.forget(key);
                }
            }
            None => {
                self.sizes().pop(key);
                self.objects.forget(key);
            }
        }
    }

    fn invalidate(&self, key: &str) {
        self.sizes().pop(key);
        self.objects.invalidate(key); // first: an absence found before it is not kept after
        lock(&self.absent).pop(key);
        lock(&self.filling).remove(key);
    }

    /// A prefetch that started at `epoch` found `key` absent: keep that unless something was
    /// invalidated since (a write through the mount may have made it).
    fn found_absent(&self, key: &str, epoch: u64) {
        let mut absent = lock(&self.absent);
        if self.objects.epoch() == epoch {
            absent.put(key.to_string(), crate::clock::now());
        }
    }

    /// A prefetch found `key` absent less than a TTL ago.
    fn known_absent(&self, key: &str) -> bool {
        let mut absent = lock(&self.absent);
        match absent.peek(key) {
            Some(at) if crate::clock::since(*at) < self.cfg.ttl => true,
            Some(_) => {
                absent.pop(key);
                false
            }
            None => false,
        }
    }

    fn invalidate_prefix(&self, prefix: &str) {
        let p = format!("{prefix}/");
        self.objects.invalidate_where(|k| k.starts_with(&p));
        lock(&self.filling).retain(|k, _| !k.starts_with(&p));
        pop_below(&mut lock(&self.absent), &p);
        pop_below(&mut self.sizes(), &p);
    }

    /// A cached copy that may be used now; a stale one is confirmed with a HEAD first.
    async fn cached(&self, key: &str) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let held = self.objects.get_with(key, |e| {
            if let Some(why) = e.prefetched.take() {
                crate::metrics::global().ahead(why).used.inc_by(e.data.len() as u64);
            }
            (e.data.clone(), e.meta.clone(), crate::clock::since(e.confirmed) < self.cfg.ttl)
        });
        let Some((data, meta, fresh)) = held else { return Ok(None) };
        if fresh {
            return Ok(Some((data, meta)));
        }
        let now = self.inner.head(key).await?;
        self.observe(key, now.as_ref());
        match now {
            Some(m) if m.version == meta.version => Ok(Some((data, meta))),
            _ => Ok(None),
        }
    }

    /// Is `r` the start of an object of unknown size, as much as it is expected to hold at
    /// most (a chunk's lookup, `RawNamespace::chunk_meta`)? Such a read is a fetch of that
    /// much, shared with a prefetch of the object.
    fn bounded_start(&self, key: &str, r: &Range<u64>) -> bool {
        r.start == 0
            && r.end <= self.cfg.object_limit
            && self.cfg.capacity > 0
            && self.sizes().peek(key).is_none()
    }

    /// Should a read of `key` fetch the whole object? Only when its size is known to be small.
    fn wants_whole(&self, key: &str) -> bool {
        self.cfg.capacity > 0
            && self.sizes().peek(key).is_some_and(|(size, _)| *size <= self.cfg.object_limit)
    }

    /// Fetch the whole object once, however many callers ask at the same time.
    async fn fetch_whole(&self, key: &str) -> StoreResult<Fetched> {
        match self.fetch_within(key, u64::MAX).await? {
            // It joined a shorter fetch (a prefetch whose estimate was below the true size).
            Some((data, meta)) if (data.len() as u64) < meta.size => {
                let whole = self.inner.get_ranged(key, ByteRange::Range(0..u64::MAX)).await?;
                self.observe(key, whole.as_ref().map(|(_, m)| m));
                Ok(whole)
            }
            fetched => Ok(fetched),
        }
    }

    /// Fetch the first `limit` bytes of an object expected to be no larger (an upper estimate
    /// of its size), once however many callers ask at the same time; kept only if that was
    /// all of it. Whoever joins a fetch gets what it fetched, which may be less than whole.
    /// Its bytes can be read as they arrive (`filling_of`).
    async fn fetch_within(&self, key: &str, limit: u64) -> StoreResult<Fetched> {
        self.fetch_into(key, limit, self.filling_for(key), None).await
    }

    /// `fetch_within`, its bytes readable through `filling` as they arrive. With `ahead` (a
    /// prefetch, and why), what it finds is kept as fetched ahead: the copy marked so, an
    /// absence as known; documents are asked as their lookups would be (`ask_by_lookup`).
    async fn fetch_into(
        &self,
        key: &str,
        limit: u64,
        filling: Arc<Filling>,
        ahead: Option<Ahead>,
    ) -> StoreResult<Fetched> {
        // However this call ends (also dropped half way), its filling leaves the map with it.
        let _unregister = Unregister { cache: self, key, filling: filling.clone() };
        let epoch = self.objects.epoch();
        let fetch = || async {
            /// Dropped while the request is out: readers must not wait for it.
            struct Asking<'a>(Option<&'a Filling>);
            impl Drop for Asking<'_> {
                fn drop(&mut self) {
                    if let Some(f) = self.0 {
                        f.abandon_if_asking();
                    }
                }
            }
            let mut asking = Asking(Some(&*filling));
            let got = if ahead == Some(Ahead::Documents) {
                self.ask_by_lookup(key, limit).await
            } else {
                self.inner.get_streamed(key, ByteRange::Range(0..limit)).await
            };
            asking.0 = None;
            let Some((meta, body)) = got? else { return Ok(None) };
            let len = meta.size.min(limit);
            let own;
            let f = if filling.arriving(&meta, len) {
                &*filling
            } else {
                own = Filling::default(); // another run is filling the shared one
                own.arriving(&meta, len);
                &own
            };
            Ok(Some((f.fill(key, body).await?, meta)))
        };
        let keep = |r: &Option<(Bytes, ObjectMeta)>| {
            let (mut entry, size) = self.entry(r.as_ref()?)?;
            if let Some(why) = ahead {
                entry.prefetched = Some(why);
                crate::metrics::global().ahead(why).fetched.inc_by(size);
            }
            Some((entry, size))
        };
        let result = self.objects.load(key, fetch, keep).await;
        // Marked before the filling leaves the map: a lookup finds the fetch or its outcome.
        if let (Some(_), Ok(None)) = (ahead, &result) {
            self.found_absent(key, epoch);
        }
        // Joined a fetch that another filling saw (one registered after an invalidation):
        // this one's readers get its outcome too.
        filling.settle(&result);
        let result = result?;
        self.observe(key, result.as_ref().map(|(_, m)| m));
        Ok(result)
    }

    /// The first `limit` bytes of a metadata document, asked as its lookup would ask
    /// (`ListStore::lookup_reading`): the layers below then record a lookup (the disk cache
    /// replays it on a remount). One that answers without the bytes (a replayed lookup) is
    /// read after.
    async fn ask_by_lookup(
        &self,
        key: &str,
        limit: u64,
    ) -> StoreResult<Option<(ObjectMeta, Body)>> {
        let (found, data) = self.inner.lookup_reading(key, limit).await?;
        match (found.file, data) {
            (None, _) => Ok(None),
            (Some(meta), Some(data)) => Ok(Some((meta, crate::store::one_piece(data)))),
            (Some(_), None) => self.inner.get_streamed(key, ByteRange::Range(0..limit)).await,
        }
    }

    /// The filling of `key`'s fetch under way, or a new one for the fetch about to start.
    fn filling_for(&self, key: &str) -> Arc<Filling> {
        let mut fillings = lock(&self.filling);
        match fillings.get(key) {
            Some(f) if !f.settled() => f.clone(),
            _ => {
                let f = Arc::new(Filling::default());
                fillings.insert(key.to_string(), f.clone());
                f
            }
        }
    }

    /// The filling of `key`'s fetch under way, if any.
    fn filling_of(&self, key: &str) -> Option<Arc<Filling>> {
        lock(&self.filling).get(key).cloned()
    }

    /// Was `key` fetched ahead and not read yet (a copy held, or an absence found), or is a
    /// fetch of it under way? A lookup is then answered from that. A copy already read is
    /// not: a lookup brings the object anew, as it does uncached.
    fn fetched_ahead(&self, key: &str) -> bool {
        self.objects.peek_with(key, |e| e.prefetched.is_some()).unwrap_or(false)
            || self.known_absent(key)
            || self.filling_of(key).is_some()
    }

    /// What to keep of an object read from its start, and its size: nothing over the object
    /// limit, nothing but the whole object.
    fn entry(&self, (data, meta): &(Bytes, ObjectMeta)) -> Option<(Entry, u64)> {
        let size = data.len() as u64;
        if size != meta.size {
            return None;
        }
        let entry = Entry {
            data: data.clone(),
            meta: meta.clone(),
            confirmed: crate::clock::now(),
            prefetched: None,
        };
        (size <= self.cfg.object_limit).then_some((entry, size))
    }

    async fn read(&self, key: &str, range: ByteRange) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        if let Some((data, meta)) = self.cached(key).await? {
            self.objects.hit();
            return Ok(Some((slice(&data, &range), meta)));
        }
        if self.known_absent(key) {
            self.objects.hit();
            return Ok(None);
        }
        self.objects.miss();
        // Being fetched whole: the bytes wanted, as soon as they are in.
        if let Some(f) = self.filling_of(key) {
            match f.read(&range).await? {
                filling::Read::Got(data, meta) => return Ok(Some((data, meta))),
                filling::Read::Absent => return Ok(None),
                filling::Read::Elsewhere => {}
            }
        }
        // A read of everything (a metadata document) goes through the shared fetch too, so
        // that concurrent first readers of one document send one request.
        let everything = matches!(&range, ByteRange::Range(r) if r.start == 0 && r.end == u64::MAX);
        if self.wants_whole(key) || (everything && self.cfg.capacity > 0) {
            return Ok(self
                .fetch_whole(key)
                .await?
                .map(|(data, meta)| (slice(&data, &range), meta)));
        }
        if let ByteRange::Range(r) = &range {
            if self.bounded_start(key, r) {
                match self.fetch_within(key, r.end).await? {
                    Some((data, meta)) if data.len() as u64 == meta.size.min(r.end) => {
                        return Ok(Some((slice(&data, &range), meta)));
                    }
                    None => return Ok(None),
                    Some(_) => {} // a shorter fetch was joined: read it here
                }
            }
        }
        let epoch = self.objects.epoch();
        let r = self.inner.get_ranged(key, range).await?;
        self.observe(key, r.as_ref().map(|(_, m)| m));
        // A read of an object whose size was not known yet may have returned all of it (a
        // metadata document read whole): keep it, so the next read sends no request.
        let whole = r.as_ref().filter(|(d, m)| d.len() as u64 == m.size && self.cfg.capacity > 0);
        if let Some(whole) = whole {
            if let Some((entry, size)) = self.entry(whole) {
                self.objects.insert_since(epoch, key, entry, size);
            }
        }
        Ok(r)
    }
}

/// Drop every entry of `lru` whose key starts with `prefix`.
fn pop_below<V>(lru: &mut LruCache<String, V>, prefix: &str) {
    let keys: Vec<String> =
        lru.iter().map(|(k, _)| k.clone()).filter(|k| k.starts_with(prefix)).collect();
    for k in keys {
        lru.pop(&k);
    }
}

/// Takes a fetch's filling out of the map when the fetch ends, unless another replaced it.
struct Unregister<'a> {
    cache: &'a CachingStore,
    key: &'a str,
    filling: Arc<Filling>,
}

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        let mut fillings = lock(&self.cache.filling);
        if fillings.get(self.key).is_some_and(|f| Arc::ptr_eq(f, &self.filling)) {
            fillings.remove(self.key);
        }
    }
}

/// `e` left the cache (evicted, replaced or invalidated).
fn left(e: &Entry) {
    let n = e.data.len() as u64;
    if let Some(why) = e.prefetched {
        crate::metrics::global().ahead(why).wasted.inc_by(n);
    }
}

crate::store::layers::layer_over!(CachingStore);

#[async_trait]
impl crate::store::layers::ReadLayer for CachingStore {
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        crate::store::found(key, self.read(key, ByteRange::Range(0..u64::MAX)).await?)
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        crate::store::found(key, self.read(key, ByteRange::Range(range)).await?)
    }

    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        self.read(key, range).await
    }

    /// A read from the start of an object this cache fetches whole (a chunk's lookup,
    /// `RawNamespace::chunk_meta`) is answered once the object's metadata is in; the fetch
    /// goes on into the cache, and the reads that follow take its bytes as they arrive. The
    /// body handed back is all of those bytes as one piece, once in. Any other read is a
    /// plain read of this cache, as one piece.
    async fn get_streamed(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(ObjectMeta, Body)>> {
        let plain =
            || async { Ok(crate::store::as_one_piece(self.read(key, range.clone()).await?)) };
        let limit = match &range {
            ByteRange::Range(r) if r.start == 0 && self.wants_whole(key) => u64::MAX,
            ByteRange::Range(r) if self.bounded_start(key, r) => r.end,
            _ => return plain().await,
        };
        let held = self.objects.contains(key) || self.known_absent(key);
        let Some(me) = self.me.upgrade().filter(|_| !held) else { return plain().await };
        let filling = self.filling_for(key);
        let owned = key.to_string();
        let task_filling = filling.clone();
        tokio::spawn(async move {
            if let Err(e) = me.fetch_into(&owned, limit, task_filling, None).await {
                tracing::debug!(key = ?owned, error = %e, "fetch failed");
            }
        });
        match filling.headers().await {
            filling::Headers::Found(meta) => {
                let (key, range) = (key.to_string(), range.clone());
                let body = async move {
                    match filling.read(&range).await? {
                        filling::Read::Got(data, _) => Ok(data),
                        _ => Err(StoreError::Io {
                            key,
                            source: std::io::Error::other("the fetch of this object stopped short"),
                        }),
                    }
                };
                Ok(Some((meta, Box::pin(futures::stream::once(body)) as Body)))
            }
            filling::Headers::Absent => Ok(None),
            filling::Headers::Failed(e) => Err(e),
            filling::Headers::Gone => plain().await,
        }
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        if self.known_absent(key) {
            return Ok(None);
        }
        let m = self.inner.head(key).await?;
        self.observe(key, m.as_ref());
        Ok(m)
    }
}

#[async_trait]
impl crate::store::layers::ListLayer for CachingStore {
    /// The bytes a lookup brought (a metadata document's, see `ListStore::lookup_reading`) are
    /// kept as a whole read's are, so the read that follows sends nothing. Without room for
    /// them, a plain lookup.
    async fn lookup_reading(&self, key: &str, limit: u64) -> StoreResult<(Lookup, Option<Bytes>)> {
        if self.cfg.capacity == 0 || key.is_empty() {
            return Ok((crate::store::ListStore::lookup(self, key).await?, None));
        }
        // Fetched ahead (`prefetch::documents::fetch_documents`) or being fetched: answered from
        // that, as a read of it would be, with no request of its own.
        if self.fetched_ahead(key) {
            let found = self.read(key, ByteRange::Range(0..limit)).await?;
            let file = found.as_ref().map(|(_, meta)| meta.clone());
            return Ok((Lookup { file, dir: false, dir_perms: None }, found.map(|(data, _)| data)));
        }
        let epoch = self.objects.epoch();
        let (l, data) = self.inner.lookup_reading(key, limit).await?;
        self.observe(key, l.file.as_ref());
        if let (Some(meta), Some(data)) = (&l.file, &data) {
            if data.len() as u64 == meta.size {
                if let Some((entry, size)) = self.entry(&(data.clone(), meta.clone())) {
                    self.objects.insert_since(epoch, key, entry, size);
                }
            }
        }
        Ok((l, data))
    }

    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        let listing = self.inner.list(prefix).await?;
        for (name, meta) in &listing.files {
            self.observe(&crate::store::join_key(prefix, name), Some(meta));
        }
        Ok(listing)
    }

    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        use futures::StreamExt;
        Box::pin(self.inner.list_pages(prefix).inspect(move |page| {
            for (name, meta) in page.iter().flat_map(|l| &l.files) {
                self.observe(&crate::store::join_key(prefix, name), Some(meta));
            }
        }))
    }

    /// A file listed without its metadata tells the cache nothing.
    fn list_entry_pages<'a>(&'a self, prefix: &'a str, wanted: MetaWanted) -> EntryPages<'a> {
        use futures::StreamExt;
        Box::pin(self.inner.list_entry_pages(prefix, wanted).inspect(move |page| {
            for (name, meta) in page.iter().flat_map(|l| &l.files) {
                if let Some(meta) = meta {
                    self.observe(&crate::store::join_key(prefix, name), Some(meta));
                }
            }
        }))
    }

    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        let l = self.inner.lookup(key).await?;
        if !key.is_empty() {
            self.observe(key, l.file.as_ref());
        }
        Ok(l)
    }
}

impl CachingStore {
    /// Whatever the outcome of `write` (a write of `changes` to the store below), the cached
    /// copies it changes go (`layers::forgetting`): after a conflict they are likely what was
    /// stale, and the writer's next read must see the store's current version.
    async fn write_through<T>(
        &self,
        changes: Changes<'_>,
        write: impl std::future::Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        forgetting(changes, |k| self.invalidate(k), |p| self.invalidate_prefix(p), write).await
    }
}

#[async_trait]
impl crate::store::layers::WriteLayer for CachingStore {
    async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        let put = self.inner.put_opts(key, data, mode);
        self.write_through(Changes::Keys(&[key]), put).await
    }

    async fn put_file(&self, key: &str, file: Spill, len: u64, mode: PutMode) -> StoreResult<()> {
        let put = self.inner.put_file(key, file, len, mode);
        self.write_through(Changes::Keys(&[key]), put).await
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.write_through(Changes::Keys(&[key]), self.inner.delete(key)).await
    }

    async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
        let delete = self.inner.delete_if_version(key, version);
        self.write_through(Changes::Keys(&[key]), delete).await
    }

    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.write_through(Changes::Keys(&[from, to]), self.inner.rename(from, to)).await
    }

    async fn rename_dir(&self, from: &str, to: &str) -> StoreResult<()> {
        let rename = self.inner.rename_dir(from, to);
        self.write_through(Changes::Trees(&[from, to]), rename).await
    }
}

#[async_trait]
impl crate::store::layers::HintsLayer for CachingStore {
    fn whole_object_limit(&self) -> u64 {
        if self.cfg.capacity > 0 {
            self.cfg.object_limit.min(self.cfg.capacity)
        } else {
            0
        }
    }

    /// Small objects are fetched whole into the cache (sharing a fetch already under way);
    /// larger ones are left to their reads. `size` may be an upper estimate of an object of
    /// unknown size (`RawNamespace`'s prefetch of a small array's chunks).
    async fn prefetch(&self, key: &str, size: u64, why: Ahead) {
        let known_large = self.sizes().peek(key).is_some_and(|(s, _)| *s > self.cfg.object_limit);
        let small = self.wants_whole(key) || size <= self.cfg.object_limit;
        let held = self.objects.contains(key) || self.known_absent(key);
        if self.cfg.capacity == 0 || known_large || !small || held {
            return;
        }
        let limit = if self.wants_whole(key) { u64::MAX } else { size };
        let fetched = self.fetch_into(key, limit, self.filling_for(key), Some(why)).await;
        if let Err(e) = fetched {
            tracing::debug!(key = ?key, error = %e, "prefetch failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::layers::recording::{RecordingStore, READS};
    use crate::store::prelude::*;
    use crate::store::StoreHints;

    /// A cache over a recording in-memory store whose reads each take `delay`.
    fn setup(
        capacity: u64,
        ttl: Duration,
        delay: Duration,
    ) -> (Arc<RecordingStore>, Arc<CachingStore>) {
        let c = Arc::new(RecordingStore::with_read_delay(Arc::new(MemoryStore::new()), delay));
        let cfg = CacheConfig { capacity, object_limit: 1000, ttl };
        (c.clone(), CachingStore::new(c, cfg))
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5k").unwrap(), 1536);
        assert_eq!(parse_size("0").unwrap(), 0);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert!(parse_size("99999999999999999999T").unwrap_err().contains("too large"));
        assert!(parse_size("16777216T").unwrap_err().contains("too large"));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("M").is_err());
        assert!(default_cache_bytes() > 0 && default_cache_bytes() <= 2 << 30);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_readers_share_one_fetch() {
        let (c, cache) = setup(1 << 20, Duration::from_secs(60), Duration::from_millis(100));
        c.put("k", Bytes::from(vec![7u8; 500])).await.unwrap();
        cache.lookup("k").await.unwrap(); // the size is known: small, so fetched whole
        let mut tasks = Vec::new();
        for i in 0..32u64 {
            let cache = cache.clone();
            tasks.push(tokio::spawn(async move { cache.get_range("k", i..i + 10).await.unwrap() }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap().as_ref(), &[7u8; 10]);
        }
        assert_eq!(c.count(&READS), 1, "one fetch for 32 concurrent readers");
        // Later reads of any range come from memory.
        assert_eq!(cache.get_range("k", 490..600).await.unwrap().len(), 10);
        assert_eq!(cache.get("k").await.unwrap().len(), 500);
        assert_eq!(c.count(&READS), 1);
        assert_eq!(cache.cached_bytes(), 500);
    }

    #[tokio::test]
    async fn evicts_by_bytes_lru_first() {
        let (c, cache) = setup(1000, Duration::from_secs(60), Duration::ZERO);
        for k in ["a", "b", "c"] {
            c.put(k, Bytes::from(vec![1u8; 400])).await.unwrap();
        }
        cache.list("").await.unwrap(); // learns every size
        cache.get("a").await.unwrap();
        cache.get("b").await.unwrap();
        assert_eq!(cache.cached_bytes(), 800);
        cache.get("a").await.unwrap(); // a is now the most recently used
        cache.get("c").await.unwrap(); // 1200 > 1000: b goes
        assert_eq!(cache.cached_bytes(), 800);
        assert_eq!(cache.cached_objects(), 2);
        let before = c.count(&READS);
        cache.get("a").await.unwrap();
        cache.get("c").await.unwrap();
        assert_eq!(c.count(&READS), before, "a and c still cached");
        cache.get("b").await.unwrap();
        assert_eq!(c.count(&READS), before + 1, "b was evicted");
    }

    #[tokio::test]
    async fn large_objects_pass_through_as_ranges() {
        let (c, cache) = setup(1 << 20, Duration::from_secs(60), Duration::ZERO);
        c.put("big", Bytes::from(vec![3u8; 5000])).await.unwrap();
        cache.lookup("big").await.unwrap();
        assert_eq!(cache.get_range("big", 10..20).await.unwrap().len(), 10);
        assert_eq!(cache.get_range("big", 10..20).await.unwrap().len(), 10);
        assert_eq!(c.count(&READS), 2);
        assert_eq!(cache.cached_bytes(), 0);
    }

    #[tokio::test]
    async fn unknown_size_reads_pass_through_then_cache() {
        let (c, cache) = setup(1 << 20, Duration::from_secs(60), Duration::ZERO);
        c.put("k", Bytes::from_static(b"hello world")).await.unwrap();
        assert_eq!(cache.get_range("k", 0..5).await.unwrap().as_ref(), b"hello");
        assert_eq!(cache.cached_objects(), 0);
        assert_eq!(cache.get_range("k", 6..11).await.unwrap().as_ref(), b"world");
        assert_eq!(cache.get_range("k", 0..11).await.unwrap().as_ref(), b"hello world");
        assert_eq!(c.count(&READS), 2);
    }

    /// A prefetch of `key` with the size estimate `size` in the background, under way when
    /// this returns (`setup`'s store answers in 100 ms).
    async fn prefetch_under_way(
        cache: &Arc<CachingStore>,
        key: &'static str,
        size: u64,
    ) -> tokio::task::JoinHandle<()> {
        let cache = cache.clone();
        let ahead =
            tokio::spawn(
                async move { StoreHints::prefetch(&*cache, key, size, Ahead::Array).await },
            );
        tokio::time::sleep(Duration::from_millis(20)).await;
        ahead
    }

    /// A chunk's lookup reads as much as the metadata bounds it to (`0..bound`): one fetch
    /// with a prefetch of the same chunk under way, and the bytes asked for whatever the
    /// object's true size.
    #[tokio::test(start_paused = true)]
    async fn a_bounded_read_shares_a_prefetch_of_an_object_of_unknown_size() {
        let (c, cache) = setup(1 << 20, Duration::from_secs(60), Duration::from_millis(100));
        c.put("chunk", Bytes::from(vec![9u8; 300])).await.unwrap();
        let ahead = prefetch_under_way(&cache, "chunk", 400).await;
        let (data, meta) =
            cache.get_ranged("chunk", ByteRange::Range(0..400)).await.unwrap().unwrap();
        ahead.await.unwrap();
        assert_eq!((data.len(), meta.size), (300, 300));
        assert_eq!(c.count(&READS), 1, "the lookup joined the prefetch");
        assert_eq!(cache.get("chunk").await.unwrap().len(), 300);
        assert_eq!(c.count(&READS), 1, "kept whole");

        // A bound below the true size: the bytes asked for, nothing kept; a prefetch with too
        // small a bound keeps nothing either.
        c.put("larger", Bytes::from(vec![4u8; 700])).await.unwrap();
        StoreHints::prefetch(&*cache, "larger", 500, Ahead::Array).await;
        assert_eq!(cache.cached_objects(), 1);
        let (data, meta) =
            cache.get_ranged("larger", ByteRange::Range(0..600)).await.unwrap().unwrap();
        assert_eq!((data.len(), meta.size), (600, 700));
        // A whole read that joins a prefetch whose estimate was too small still gets it all.
        c.put("under", Bytes::from(vec![6u8; 800])).await.unwrap();
        let ahead = prefetch_under_way(&cache, "under", 200).await;
        assert_eq!(cache.get("under").await.unwrap().len(), 800);
        ahead.await.unwrap();
        // Over the object limit (1000 here): never prefetched.
        c.put("huge", Bytes::from(vec![1u8; 2000])).await.unwrap();
        let before = c.count(&READS);
        StoreHints::prefetch(&*cache, "huge", 2000, Ahead::Array).await;
        assert_eq!(c.count(&READS), before);
        assert!(cache.get_ranged("absent", ByteRange::Range(0..10)).await.unwrap().is_none());
    }

    /// An object a prefetch found absent is absent to reads and HEADs with no request, until
    /// something writes it or the TTL ends.
    #[tokio::test(start_paused = true)]
    async fn an_absence_found_by_a_prefetch_is_kept_for_the_ttl() {
        let (c, cache) = setup(1 << 20, Duration::from_millis(300), Duration::ZERO);
        let asked = || c.count(&["get", "get_range", "get_ranged", "head"]);
        StoreHints::prefetch(&*cache, "c/1", 100, Ahead::Array).await;
        assert_eq!(asked(), 1);
        assert!(cache.get_ranged("c/1", ByteRange::Range(0..100)).await.unwrap().is_none());
        assert!(cache.head("c/1").await.unwrap().is_none());
        assert_eq!(asked(), 1, "absent, from memory");
        cache.put("c/1", Bytes::from_static(b"new")).await.unwrap();
        assert_eq!(cache.get("c/1").await.unwrap().as_ref(), b"new", "written: no longer absent");

        StoreHints::prefetch(&*cache, "c/2", 100, Ahead::Array).await;
        let before = asked();
        StoreHints::prefetch(&*cache, "c/2", 100, Ahead::Array).await;
        assert_eq!(asked(), before, "a known absence is not prefetched again");
        tokio::time::advance(Duration::from_millis(299)).await;
        assert!(cache.head("c/2").await.unwrap().is_none());
        assert_eq!(asked(), before, "within the TTL");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(cache.head("c/2").await.unwrap().is_none());
        assert_eq!(asked(), before + 1, "past the TTL the store is asked again");
    }

    /// A store whose answers come in two pieces: the first half at once, the rest when the
    /// test opens the gate (or an error, when `fail` is set).
    struct Trickle {
        inner: Arc<MemoryStore>,
        gate: Arc<tokio::sync::Semaphore>,
        fail: std::sync::atomic::AtomicBool,
        requests: std::sync::atomic::AtomicUsize,
        /// When set, the response headers wait for a permit of `headers`.
        hold_headers: std::sync::atomic::AtomicBool,
        headers: Arc<tokio::sync::Semaphore>,
    }

    impl Trickle {
        fn new() -> Arc<Self> {
            Arc::new(Trickle {
                inner: Arc::new(MemoryStore::new()),
                gate: Arc::new(tokio::sync::Semaphore::new(0)),
                fail: Default::default(),
                requests: Default::default(),
                hold_headers: Default::default(),
                headers: Arc::new(tokio::sync::Semaphore::new(0)),
            })
        }
        fn requests(&self) -> usize {
            self.requests.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    crate::store::layers::layer_over!(Trickle);

    #[async_trait]
    impl crate::store::layers::ReadLayer for Trickle {
        async fn get_ranged(
            &self,
            key: &str,
            range: ByteRange,
        ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
            self.requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.inner.get_ranged(key, range).await
        }
        async fn get_streamed(
            &self,
            key: &str,
            range: ByteRange,
        ) -> StoreResult<Option<(ObjectMeta, Body)>> {
            self.requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if self.hold_headers.load(std::sync::atomic::Ordering::SeqCst) {
                self.headers.acquire().await.expect("open").forget();
            }
            let Some((data, meta)) = self.inner.get_ranged(key, range).await? else {
                return Ok(None);
            };
            let (first, rest) = (data.slice(..data.len() / 2), data.slice(data.len() / 2..));
            let (gate, fail) =
                (self.gate.clone(), self.fail.load(std::sync::atomic::Ordering::SeqCst));
            let key = key.to_string();
            let rest = async move {
                gate.acquire().await.expect("open").forget();
                if fail {
                    return Err(StoreError::Io { key, source: std::io::Error::other("cut off") });
                }
                Ok(rest)
            };
            let first = futures::stream::iter([StoreResult::Ok(first)]);
            let body = futures::StreamExt::chain(first, futures::stream::once(rest));
            Ok(Some((meta, Box::pin(body))))
        }
    }

    impl crate::store::layers::ListLayer for Trickle {}

    impl crate::store::layers::WriteLayer for Trickle {}

    impl crate::store::layers::HintsLayer for Trickle {}

    fn trickling(capacity: u64) -> (Arc<Trickle>, Arc<CachingStore>) {
        let t = Trickle::new();
        let cfg = CacheConfig { capacity, object_limit: 1000, ttl: Duration::from_secs(60) };
        (t.clone(), CachingStore::new(t, cfg))
    }

    async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(Duration::from_secs(5), f).await.unwrap_or_else(|_| panic!("{what}"))
    }

    /// A chunk's lookup (a bounded read from the start, `get_streamed`) is answered with the
    /// headers; reads of bytes already in are answered before the rest arrives, reads of the
    /// rest once it has; one request in all, and the object kept whole.
    #[tokio::test(start_paused = true)]
    async fn reads_of_an_object_being_fetched_whole_take_its_bytes_as_they_arrive() {
        use futures::StreamExt;
        let (t, cache) = trickling(1 << 20);
        let data: Vec<u8> = (0..600u32).map(|i| i as u8).collect();
        t.inner.put("c/0", Bytes::from(data.clone())).await.unwrap();
        let (meta, body) = within("headers", cache.get_streamed("c/0", ByteRange::Range(0..800)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(meta.size, 600);
        let head = within("the first half", cache.get_range("c/0", 10..200)).await.unwrap();
        assert_eq!(head.as_ref(), &data[10..200]);
        let tail = tokio::spawn({
            let cache = cache.clone();
            async move { cache.get_range("c/0", 250..600).await.unwrap() }
        });
        let suffix = tokio::spawn({
            let cache = cache.clone();
            async move { cache.get_ranged("c/0", ByteRange::Suffix(8)).await.unwrap().unwrap().0 }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!tail.is_finished() && !suffix.is_finished(), "bytes not in yet: they wait");
        t.gate.add_permits(1);
        assert_eq!(within("the rest", tail).await.unwrap().as_ref(), &data[250..600]);
        assert_eq!(suffix.await.unwrap().as_ref(), &data[592..]);
        let whole: Vec<Bytes> = body.map(|p| p.unwrap()).collect().await;
        assert_eq!(whole.concat(), data, "the lookup's body is the whole object");
        assert_eq!(t.requests(), 1);
        assert_eq!(cache.get("c/0").await.unwrap().as_ref(), &data[..]);
        assert_eq!((t.requests(), cache.cached_bytes()), (1, 600), "kept whole");
    }

    /// A fetch cut off half way: whoever waits for the rest gets the error, nothing is kept,
    /// and the next read asks again.
    #[tokio::test(start_paused = true)]
    async fn a_fetch_cut_off_half_way_fails_its_waiting_readers_and_keeps_nothing() {
        let (t, cache) = trickling(1 << 20);
        t.inner.put("c/0", Bytes::from(vec![5u8; 600])).await.unwrap();
        t.fail.store(true, std::sync::atomic::Ordering::SeqCst);
        let (meta, _) = within("headers", cache.get_streamed("c/0", ByteRange::Range(0..800)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(meta.size, 600);
        let tail = tokio::spawn({
            let cache = cache.clone();
            async move { cache.get_range("c/0", 400..600).await }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        t.gate.add_permits(1);
        let err = within("the error", tail).await.unwrap().unwrap_err();
        assert!(matches!(err, StoreError::Io { .. }), "{err:?}");
        assert_eq!(cache.cached_objects(), 0);
        t.fail.store(false, std::sync::atomic::Ordering::SeqCst);
        t.gate.add_permits(1);
        assert_eq!(
            within("a new fetch", cache.get_range("c/0", 400..600)).await.unwrap().len(),
            200
        );
        assert_eq!(t.requests(), 2);
    }

    /// A whole read of "doc" that runs the fetch in its own future and gives up after 50 ms,
    /// and a read of its tail that starts 20 ms in (and so waits on that fetch).
    #[allow(clippy::type_complexity)]
    fn a_quitter_and_a_waiter(
        cache: &Arc<CachingStore>,
    ) -> (
        impl std::future::Future<Output = Result<StoreResult<Bytes>, tokio::time::error::Elapsed>> + '_,
        tokio::task::JoinHandle<StoreResult<Bytes>>,
    ) {
        let runner = tokio::time::timeout(Duration::from_millis(50), cache.get("doc"));
        let waiter = tokio::spawn({
            let cache = cache.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                cache.get_range("doc", 500..600).await
            }
        });
        (runner, waiter)
    }

    /// A fetch dropped half way (its reader went away): a reader waiting for its bytes is
    /// not left waiting, it reads them itself.
    #[tokio::test(start_paused = true)]
    async fn a_reader_of_an_abandoned_fetch_reads_for_itself() {
        let (t, cache) = trickling(1 << 20);
        t.inner.put("doc", Bytes::from(vec![3u8; 600])).await.unwrap();
        let (runner, waiter) = a_quitter_and_a_waiter(&cache);
        assert!(runner.await.is_err(), "the first reader gave up");
        t.gate.add_permits(2);
        let got = within("the waiting reader", waiter).await.unwrap().unwrap();
        assert_eq!(got.as_ref(), &[3u8; 100]);
        assert_eq!(t.requests(), 2);
    }

    /// Absent at the lookup: absent to a read that follows. Once the lookup's fetch has
    /// ended, the absence is not kept (only a prefetch's is): the read asks again. (While
    /// the fetch is still leaving, a read takes its answer instead; the test waits for it to
    /// end, which made it flaky on a busy machine before.)
    #[tokio::test(start_paused = true)]
    async fn a_streamed_lookup_of_an_absent_object() {
        let (t, cache) = trickling(1 << 20);
        assert!(cache.get_streamed("c/9", ByteRange::Range(0..800)).await.unwrap().is_none());
        for _ in 0..1000 {
            if cache.filling_of("c/9").is_none() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(cache.get_ranged("c/9", ByteRange::Range(0..800)).await.unwrap().is_none());
        assert_eq!(t.requests(), 2, "an absence found by a lookup is not kept");
        // No memory cache: a plain read, whole.
        let (t, cache) = trickling(0);
        t.inner.put("c/0", Bytes::from(vec![1u8; 10])).await.unwrap();
        let (meta, _) = cache.get_streamed("c/0", ByteRange::Range(0..800)).await.unwrap().unwrap();
        assert_eq!((meta.size, t.requests(), cache.cached_objects()), (10, 1, 0));
    }

    #[tokio::test]
    async fn a_whole_read_of_unknown_size_is_kept_when_small() {
        let (c, cache) = setup(1 << 20, Duration::from_secs(60), Duration::ZERO);
        c.put("doc", Bytes::from_static(b"{\"zarr_format\": 3}")).await.unwrap();
        c.put("big", Bytes::from(vec![5u8; 5000])).await.unwrap();
        assert_eq!(cache.get("doc").await.unwrap().as_ref(), b"{\"zarr_format\": 3}");
        assert_eq!(cache.get("big").await.unwrap().len(), 5000);
        assert_eq!(c.count(&READS), 2);
        assert_eq!(cache.get("doc").await.unwrap().len(), 18);
        assert_eq!(cache.get_range("doc", 1..6).await.unwrap().as_ref(), b"\"zarr");
        assert_eq!(c.count(&READS), 2, "the small document came from memory");
        assert_eq!(cache.get("big").await.unwrap().len(), 5000);
        assert_eq!(c.count(&READS), 3, "over the object limit: not kept");
        assert_eq!(cache.cached_objects(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_first_reads_of_a_whole_document_share_one_fetch() {
        let (c, cache) = setup(1 << 20, Duration::from_secs(60), Duration::from_millis(100));
        c.put("zarr.json", Bytes::from_static(b"{}")).await.unwrap();
        let readers: Vec<_> = (0..8)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.get("zarr.json").await.unwrap() })
            })
            .collect();
        for r in readers {
            assert_eq!(r.await.unwrap().as_ref(), b"{}");
        }
        assert_eq!(c.count(&READS), 1, "size unknown, yet one fetch for 8 concurrent readers");
        assert!(matches!(cache.get("absent").await, Err(StoreError::NotFound(_))));
    }

    #[tokio::test]
    async fn writes_invalidate_and_versions_validate() {
        let (c, cache) = setup(1 << 20, Duration::from_secs(60), Duration::ZERO);
        cache.put("k", Bytes::from_static(b"one")).await.unwrap();
        cache.lookup("k").await.unwrap();
        assert_eq!(cache.get("k").await.unwrap().as_ref(), b"one");
        cache.put("k", Bytes::from_static(b"two")).await.unwrap();
        assert_eq!(cache.get("k").await.unwrap().as_ref(), b"two");
        // Changed behind our back: fresh metadata with another version drops the copy.
        cache.lookup("k").await.unwrap();
        cache.get("k").await.unwrap();
        c.put("k", Bytes::from_static(b"three")).await.unwrap();
        assert_eq!(cache.get("k").await.unwrap().as_ref(), b"two", "trusted within the TTL");
        cache.lookup("k").await.unwrap();
        assert_eq!(cache.get("k").await.unwrap().as_ref(), b"three");
        cache.rename("k", "j").await.unwrap();
        assert!(matches!(cache.get("k").await, Err(StoreError::NotFound(_))));
        cache.delete("j").await.unwrap();
        assert!(matches!(cache.get("j").await, Err(StoreError::NotFound(_))));
        assert_eq!(cache.cached_objects(), 0);
    }

    #[tokio::test]
    async fn stale_entries_are_confirmed_with_a_head() {
        let (c, cache) = setup(1 << 20, Duration::ZERO, Duration::ZERO);
        c.put("k", Bytes::from_static(b"one")).await.unwrap();
        cache.lookup("k").await.unwrap();
        cache.get("k").await.unwrap();
        let (gets, heads) = (c.count(&READS), c.count(&["head"]));
        assert_eq!(cache.get("k").await.unwrap().as_ref(), b"one");
        assert_eq!(c.count(&READS), gets, "served from memory after a HEAD");
        assert_eq!(c.count(&["head"]), heads + 1);
        c.put("k", Bytes::from_static(b"two")).await.unwrap();
        assert_eq!(cache.get("k").await.unwrap().as_ref(), b"two");
    }

    /// A fetch dropped while its request is out (before the headers): a reader that found
    /// its filling reads for itself instead of waiting forever.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reader_of_a_fetch_dropped_before_its_headers_is_not_left_waiting() {
        let (t, cache) = trickling(1 << 20);
        t.inner.put("doc", Bytes::from(vec![3u8; 600])).await.unwrap();
        t.hold_headers.store(true, std::sync::atomic::Ordering::SeqCst);
        let (runner, waiter) = a_quitter_and_a_waiter(&cache);
        assert!(runner.await.is_err(), "the first reader gave up before the headers");
        t.hold_headers.store(false, std::sync::atomic::Ordering::SeqCst);
        t.headers.add_permits(10);
        t.gate.add_permits(10);
        let got = within("the waiting reader", waiter).await.unwrap().unwrap();
        assert_eq!(got.as_ref(), &[3u8; 100]);
    }

    /// A write while a streamed lookup starts (after it registered its filling, before its
    /// fetch runs) does not leave the lookup waiting: the fetch fills the lookup's filling.
    #[tokio::test]
    async fn a_streamed_lookup_is_not_left_waiting_by_a_write() {
        let (t, cache) = trickling(1 << 20);
        t.inner.put("c/0", Bytes::from(vec![1u8; 600])).await.unwrap();
        t.gate.add_permits(10);
        let mut lookup = Box::pin(cache.get_streamed("c/0", ByteRange::Range(0..800)));
        assert!(futures::poll!(&mut lookup).is_pending(), "waits for the spawned fetch");
        cache.put("c/0", Bytes::from(vec![2u8; 600])).await.unwrap();
        let (meta, _) = within("the lookup", lookup).await.unwrap().unwrap();
        assert_eq!(meta.size, 600);
    }
}
