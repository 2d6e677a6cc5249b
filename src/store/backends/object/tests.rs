//! The object-store backend's unit tests, on object_store's in-memory store and fakes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload};

use crate::store::location::Cloud;
use crate::store::{ByteRange, Listing, StoreError};
use crate::store::{ListStore, ReadStore, StoreHints, WriteStore};

use super::errors::*;
use super::listing::*;
use super::open::*;
use super::read::*;
use super::write::*;
use super::*;
use object_store::list::PaginatedListResult;
use object_store::memory::InMemory;

fn backend(prefix: &str) -> (Arc<InMemory>, ObjectStoreBackend) {
    let mem = Arc::new(InMemory::new());
    let b = ObjectStoreBackend::new(mem.clone(), prefix, "memory://test".into());
    (mem, b)
}

#[test]
fn urls_split_into_bucket_and_prefix() {
    assert_eq!(split_url("s3://b/p/q/"), ("s3://b".into(), "p/q".into()));
    assert_eq!(split_url("s3://b"), ("s3://b".into(), "".into()));
    assert_eq!(split_url("gs://b//x?y"), ("gs://b".into(), "x".into()));
    assert_eq!(strip_userinfo("https://u:pw@h/x"), "https://h/x");
}

#[test]
fn unknown_option_keys_are_rejected() {
    let ok = vec![("aws_virtual_hosted_style_request".to_string(), "true".to_string())];
    assert!(check_options(Cloud::S3, &ok).is_ok());
    let bad = vec![("no_such_key".to_string(), "1".to_string())];
    assert!(check_options(Cloud::S3, &bad).unwrap_err().contains("no_such_key"));
    assert!(check_options(Cloud::Http, &[("timeout".into(), "5s".into())]).is_ok());
}

#[test]
fn secrets_are_scrubbed() {
    let e = object_store::Error::Generic {
        store: "S3",
        source: "bad signature for key SECRETVALUE".into(),
    };
    let msg = map_err_with("k", e, &["SECRETVALUE".into()]).to_string();
    assert!(!msg.contains("SECRETVALUE"), "{msg}");
}

#[tokio::test]
async fn round_trip_below_a_prefix() {
    let (mem, b) = backend("pre/fix");
    b.put("a/zarr.json", Bytes::from_static(b"{}")).await.unwrap();
    b.put("a/c/0", Bytes::from_static(b"0123456789")).await.unwrap();
    b.put("top", Bytes::from_static(b"t")).await.unwrap();
    assert!(mem.head(&Path::from("pre/fix/a/c/0")).await.is_ok());
    let root = b.list("").await.unwrap();
    assert_eq!(root.dirs, vec!["a"]);
    assert_eq!(root.files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), vec!["top"]);
    let a = b.list("a").await.unwrap();
    assert_eq!(a.dirs, vec!["c"]);
    assert_eq!(a.files[0].0, "zarr.json");
    assert_eq!(b.get_range("a/c/0", 2..5).await.unwrap(), Bytes::from_static(b"234"));
    let (d, m) = b.get_ranged("a/c/0", ByteRange::Suffix(3)).await.unwrap().unwrap();
    assert_eq!((d.as_ref(), m.size), (&b"789"[..], 10));
    let (d, m) = b.get_ranged("a/c/0", ByteRange::Range(20..30)).await.unwrap().unwrap();
    assert_eq!((d.len(), m.size), (0, 10));
    assert!(b.get_ranged("a/c/9", ByteRange::Suffix(3)).await.unwrap().is_none());
    let l = b.lookup("a").await.unwrap();
    assert!(l.dir && l.file.is_none());
    let l = b.lookup("a/zarr.json").await.unwrap();
    assert!(!l.dir && l.file.is_some());
    assert!(b.lookup("nope").await.unwrap().file.is_none());
    b.rename("top", "a/moved").await.unwrap();
    assert!(b.head("top").await.unwrap().is_none());
    assert_eq!(b.get("a/moved").await.unwrap(), Bytes::from_static(b"t"));
    assert!(matches!(b.delete("top").await, Err(StoreError::NotFound(_))));
    b.delete("a/moved").await.unwrap();
    assert!(!b.has_real_dirs());
}

/// An S3-like delimiter listing over raw keys: sorted, start-after and continuation
/// tokens as S3 has them, and every entry parsed into a `Path` the way object_store's S3
/// client does (the first unparseable key fails the whole page).
struct FakeS3 {
    keys: std::collections::BTreeSet<String>,
    requests: std::sync::atomic::AtomicUsize,
    /// A server that ignores start-after (the listing must stop, not loop).
    ignores_offset: bool,
    /// Every listing fails as a server that is down does.
    down: std::sync::atomic::AtomicBool,
}

impl FakeS3 {
    fn new(keys: &[String]) -> Self {
        FakeS3 {
            keys: keys.iter().cloned().collect(),
            requests: Default::default(),
            ignores_offset: false,
            down: Default::default(),
        }
    }

    fn page(
        &self,
        level: &str,
        opts: &PaginatedListOptions,
    ) -> object_store::Result<PaginatedListResult> {
        self.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.down.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(object_store::Error::Generic {
                store: "FakeS3",
                source: "error sending request: connection refused".into(),
            });
        }
        let offset = if self.ignores_offset { None } else { opts.offset.as_deref() };
        let token = opts.page_token.as_deref();
        let mut entries: Vec<(String, bool)> = Vec::new();
        for k in &self.keys {
            let Some(rest) = k.strip_prefix(level) else { continue };
            if offset.is_some_and(|o| k.as_str() <= o) {
                continue;
            }
            // A token is the last entry returned: continue past every key it covers.
            if token.is_some_and(|t| k.as_str() <= t || (t.ends_with('/') && k.starts_with(t))) {
                continue;
            }
            let entry = match rest.find('/') {
                Some(i) => (format!("{level}{}", &rest[..=i]), true),
                None => (k.clone(), false),
            };
            if entries.last() != Some(&entry) {
                entries.push(entry);
            }
        }
        let max = opts.max_keys.unwrap_or(1000);
        let page_token = (entries.len() > max).then(|| entries[max - 1].0.clone());
        entries.truncate(max);
        let common_prefixes = entries
            .iter()
            .filter(|e| e.1)
            .map(|e| Path::parse(&e.0))
            .collect::<Result<Vec<_>, _>>()?;
        let objects = entries
            .iter()
            .filter(|e| !e.1)
            .map(|e| {
                Ok(object_store::ObjectMeta {
                    location: Path::parse(&e.0)?,
                    last_modified: Default::default(),
                    size: 1,
                    e_tag: Some(format!("\"{}\"", e.0.len())),
                    version: None,
                })
            })
            .collect::<object_store::Result<Vec<_>>>()?;
        Ok(PaginatedListResult {
            result: object_store::ListResult {
                common_prefixes,
                objects,
                extensions: Default::default(),
            },
            page_token,
        })
    }
}

#[async_trait]
impl PaginatedListStore for FakeS3 {
    async fn list_paginated(
        &self,
        prefix: Option<&str>,
        opts: PaginatedListOptions,
    ) -> object_store::Result<PaginatedListResult> {
        self.page(prefix.unwrap_or(""), &opts)
    }
}

fn over_fake(fake: Arc<FakeS3>, prefix: &str) -> ObjectStoreBackend {
    let mut b = ObjectStoreBackend::new(Arc::new(InMemory::new()), prefix, "fake://bkt".into());
    b.pager = Some(fake);
    b
}

fn names(l: &Listing) -> (Vec<&str>, Vec<&str>) {
    (l.files.iter().map(|f| f.0.as_str()).collect(), l.dirs.iter().map(String::as_str).collect())
}

#[tokio::test]
async fn hostile_keys_are_hidden_and_their_neighbours_listed() {
    let long = "L".repeat(300);
    let mut keys: Vec<String> = [
        "d/ok",
        "d/../escape",
        "d/./dot",
        "d//double",
        "d/trailing/",
        "/lead",
        "d/ctl\u{1}x",
        "d/tab\tx",
        "d/del\u{7f}x",
        "d/back\\slash",
        "d/pct%2Fenc",
        "d/sp ace é 日本",
        "d/x",
        "d/x/y",
        "d/..",
        "d/.",
        "e/../../../etc/passwd",
        "top",
    ]
    .iter()
    .map(|k| k.to_string())
    .collect();
    keys.push(format!("d/{long}"));
    keys.push(format!("d/{long}/inner"));
    // Enough good neighbours for several pages, on both sides of every bad key.
    keys.extend((0..2500).map(|i| format!("d/g{i:04}")));
    let fake = Arc::new(FakeS3::new(&keys));
    let b = over_fake(fake.clone(), "");

    let d = b.list("d").await.unwrap();
    let (files, dirs) = names(&d);
    let mut want_files = vec!["back\\slash", "ok", "pct%2Fenc", "sp ace é 日本", "x"];
    let good: Vec<String> = (0..2500).map(|i| format!("g{i:04}")).collect();
    want_files.extend(good.iter().map(String::as_str));
    want_files.sort();
    assert_eq!(files, want_files);
    assert_eq!(dirs, vec!["trailing", "x"]);
    let requests = fake.requests.load(std::sync::atomic::Ordering::Relaxed);
    assert!(requests < 3 + 10 * 20, "{requests} requests");
    for hidden in
        ["d/../", "d/./", "d//", "d/ctl\u{1}x", "d/tab\tx", "d/del\u{7f}x", "d/..", "d/.", "d/x"]
    {
        assert!(b.hidden.was_reported(hidden), "{hidden:?} not reported");
    }
    assert!(b.hidden.was_reported(&format!("d/{long}")));
    assert!(b.hidden.was_reported(&format!("d/{long}/")));

    let root = b.list("").await.unwrap();
    assert_eq!(names(&root), (vec!["top"], vec!["d", "e"]));
    assert!(b.hidden.was_reported("/"));
    // `e` holds only a hostile key: it exists, and lists empty.
    assert!(b.lookup("e").await.unwrap().dir);
    assert_eq!(names(&b.list("e").await.unwrap()), (vec![], vec![]));
    // The directory marker `d/trailing/` makes an empty directory, not a file.
    assert_eq!(names(&b.list("d/trailing").await.unwrap()), (vec![], vec![]));
    assert_eq!(names(&b.list("d/x").await.unwrap()), (vec!["y"], vec![]));

    // Below a mount prefix, the same.
    let b = over_fake(fake.clone(), "d");
    assert_eq!(names(&b.list("").await.unwrap()).1, vec!["trailing", "x"]);
}

/// Every page of `list_pages`, and the requests made before the first page came.
async fn pages_of(b: &ObjectStoreBackend, fake: &FakeS3, prefix: &str) -> (Vec<Listing>, usize) {
    use futures::StreamExt;
    let before = fake.requests.load(std::sync::atomic::Ordering::Relaxed);
    let mut pages = b.list_pages(prefix);
    let first = pages.next().await.expect("a first page").unwrap();
    let to_first = fake.requests.load(std::sync::atomic::Ordering::Relaxed) - before;
    let mut all = vec![first];
    while let Some(page) = pages.next().await {
        all.push(page.unwrap());
    }
    (all, to_first)
}

#[tokio::test]
async fn paged_listings_give_each_name_once_and_hide_an_object_shadowed_pages_later() {
    // Page 1 ends with the object `d/x`; its prefix `d/x/` comes in page 2, after `x-y`
    // and `x.z` (which sort before '/').
    let mut keys: Vec<String> = (0..999).map(|i| format!("d/a{i:03}")).collect();
    keys.extend(["d/x", "d/x-y", "d/x.z", "d/x/y", "d/x/z"].map(String::from));
    keys.extend((0..1500).map(|i| format!("d/z{i:04}")));
    // A key object_store cannot parse, in a later page: stepped over there.
    keys.push("d/zz\u{1}x".to_string());
    let fake = Arc::new(FakeS3::new(&keys));
    let b = over_fake(fake.clone(), "");
    let (pages, to_first) = pages_of(&b, &fake, "d").await;
    assert_eq!(to_first, 1, "the first page is one request");
    assert_eq!(pages[0].files.len(), 999, "`x` is held back until its prefix is passed");
    assert!(pages.len() >= 3, "{} pages", pages.len());
    let mut files: Vec<&str> =
        pages.iter().flat_map(|p| p.files.iter().map(|f| f.0.as_str())).collect();
    let dirs: Vec<&str> = pages.iter().flat_map(|p| p.dirs.iter().map(String::as_str)).collect();
    assert_eq!(dirs, vec!["x"]);
    assert!(b.hidden.was_reported("d/x"), "the shadowed object is logged");
    files.sort();
    let mut want = b.list("d").await.unwrap();
    want.files.retain(|f| f.0 != "x");
    assert_eq!(files, names(&want).0, "the pages hold what `list` does, once each");
    for p in &pages {
        assert!(p.files.windows(2).all(|w| w[0].0 < w[1].0), "each page sorted");
    }
    // An empty or missing directory is one empty page.
    let (pages, _) = pages_of(&b, &fake, "nothing").await;
    assert_eq!(pages.len(), 1);
    assert!(pages[0].files.is_empty() && pages[0].dirs.is_empty());
}

#[tokio::test]
async fn clean_listings_cost_one_request_per_page() {
    let keys: Vec<String> = (0..2500).map(|i| format!("a/k{i:04}")).collect();
    let fake = Arc::new(FakeS3::new(&keys));
    let b = over_fake(fake.clone(), "");
    assert_eq!(b.list("a").await.unwrap().files.len(), 2500);
    assert_eq!(fake.requests.load(std::sync::atomic::Ordering::Relaxed), 3);
}

#[tokio::test]
async fn runs_of_bad_keys_and_a_server_without_start_after() {
    // Nothing but bad keys, and bad keys on page boundaries.
    let mut keys: Vec<String> = (0..300).map(|i| format!("b/p{i:04}\u{1}/x")).collect();
    keys.extend((0..300).map(|i| format!("b/d{i:04}/x")));
    keys.extend((0..1200).map(|i| format!("b/k{i:04}")));
    keys.extend((0..300).map(|i| format!("b/z{i:04}\u{1}")));
    let fake = Arc::new(FakeS3::new(&keys));
    let b = over_fake(fake.clone(), "");
    let l = b.list("b").await.unwrap();
    assert_eq!((l.files.len(), l.dirs.len()), (1200, 300));
    assert!(b.hidden.was_reported("b/p0000\u{1}/"));
    let requests = fake.requests.load(std::sync::atomic::Ordering::Relaxed);
    assert!(requests < 600 * 4, "{requests} requests for 600 bad keys");
    assert!(b.hidden.was_reported("b/z0299\u{1}"));

    // A server that ignores start-after: an error for that directory, never a loop.
    let mut fake = FakeS3::new(&["c/ok".to_string(), "c/../x".to_string()]);
    fake.ignores_offset = true;
    let b = over_fake(Arc::new(fake), "");
    assert!(matches!(b.list("c").await, Err(StoreError::InvalidKey(..))));
}

#[test]
fn reasons_for_unparseable_keys() {
    assert_eq!(unparseable_reason("d/../"), "'.' or '..' as a name");
    assert!(unparseable_reason("d//").starts_with("empty name"));
    assert!(unparseable_reason("/").starts_with("empty name"));
    assert!(unparseable_reason("d/a\u{1}b").starts_with("control character"));
    assert_eq!(skip_past("d/x"), "d/x");
    assert_eq!(skip_past("d/x/"), format!("d/x/{}", char::MAX));
}

/// An object store over memory that refuses suffix ranges as some servers do, and
/// records every GET and HEAD it answers.
#[derive(Debug)]
struct Picky {
    inner: InMemory,
    /// `bytes=-N` with N > size: 500 (s3s-fs).
    refuse_long_suffix: bool,
    /// Any suffix range: not supported (object_store's Azure client).
    refuse_any_suffix: bool,
    /// HEAD answers after this long (a server retried on 500s).
    head_delay: Duration,
    /// Every HEAD answers 500 (s3s-fs, for a key that is a directory on its disk).
    head_500: bool,
    requests: Mutex<Vec<String>>,
}

impl Picky {
    fn new(refuse_long_suffix: bool, refuse_any_suffix: bool) -> Self {
        Picky {
            inner: InMemory::new(),
            refuse_long_suffix,
            refuse_any_suffix,
            head_delay: Duration::ZERO,
            head_500: false,
            requests: Default::default(),
        }
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.requests.lock().unwrap())
    }
}

impl std::fmt::Display for Picky {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Picky")
    }
}

#[async_trait]
impl ObjectStore for Picky {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: object_store::PutOptions,
    ) -> object_store::Result<object_store::PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: object_store::PutMultipartOptions,
    ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<object_store::GetResult> {
        let what = match (&options.range, options.head) {
            (_, true) => "HEAD".to_string(),
            (None, false) => "GET".to_string(),
            (Some(GetRange::Bounded(r)), false) => format!("GET {r:?}"),
            (Some(GetRange::Suffix(n)), false) => format!("GET -{n}"),
            (Some(GetRange::Offset(o)), false) => format!("GET {o}-"),
        };
        self.requests.lock().unwrap().push(what);
        if options.head {
            tokio::time::sleep(self.head_delay).await;
            if self.head_500 {
                return Err(object_store::Error::Generic {
                    store: "Picky",
                    source: "Error performing HEAD in 1ms, after 3 retries - Server returned \
                             non-2xx status code: 500 Internal Server Error: "
                        .into(),
                });
            }
        }
        if let Some(GetRange::Suffix(n)) = options.range {
            if self.refuse_any_suffix {
                return Err(object_store::Error::NotSupported {
                    source: "no suffix ranges here".into(),
                });
            }
            let size = self.inner.head(location).await?.size;
            if self.refuse_long_suffix && n > size {
                return Err(object_store::Error::Generic {
                    store: "Picky",
                    source: "Error performing GET in 1ms - Server returned non-2xx status \
                             code: 500 Internal Server Error: seek: Invalid argument"
                        .into(),
                });
            }
        }
        self.inner.get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(
        &self,
        prefix: Option<&Path>,
    ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }
    async fn list_with_delimiter(
        &self,
        prefix: Option<&Path>,
    ) -> object_store::Result<object_store::ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

fn picky(long: bool, any: bool) -> (Arc<Picky>, ObjectStoreBackend) {
    let p = Arc::new(Picky::new(long, any));
    let b = ObjectStoreBackend::new(p.clone(), "", "picky://b".into());
    (p, b)
}

async fn suffix(b: &ObjectStoreBackend, key: &str, n: u64) -> Option<(Vec<u8>, u64)> {
    b.get_ranged(key, ByteRange::Suffix(n)).await.unwrap().map(|(d, m)| (d.to_vec(), m.size))
}

#[tokio::test]
async fn known_sizes_never_send_an_over_long_suffix() {
    let (p, b) = picky(true, false);
    b.put("s", Bytes::from_static(b"0123456789")).await.unwrap();
    b.list("").await.unwrap(); // the listing tells the size
    p.take();
    assert_eq!(suffix(&b, "s", 64).await, Some((b"0123456789".to_vec(), 10)));
    assert_eq!(suffix(&b, "s", 10).await, Some((b"0123456789".to_vec(), 10)));
    assert_eq!(suffix(&b, "s", 4).await, Some((b"6789".to_vec(), 10)));
    assert_eq!(p.take(), vec!["GET", "GET", "GET -4"]);
    assert!(!b.shapes.suffix_refused());

    // A stale size never gives wrong bytes: grown (whole GET, last n kept) ...
    b.put("g", Bytes::from_static(b"ab")).await.unwrap();
    b.head("g").await.unwrap();
    p.inner.put(&Path::from("g"), PutPayload::from_static(b"abcdefgh")).await.unwrap();
    assert_eq!(suffix(&b, "g", 5).await, Some((b"defgh".to_vec(), 8)));
    // ... or shrunk below the suffix (refused, then HEAD + whole GET).
    p.inner.put(&Path::from("g"), PutPayload::from_static(b"xyz")).await.unwrap();
    p.take();
    assert_eq!(suffix(&b, "g", 5).await, Some((b"xyz".to_vec(), 3)));
    assert_eq!(p.take(), vec!["GET -5", "HEAD", "GET"]);
    // Deleted behind the mount's back: missing, not an error.
    p.inner.delete(&Path::from("g")).await.unwrap();
    assert_eq!(suffix(&b, "g", 5).await, None);
}

#[tokio::test]
async fn a_refused_suffix_falls_back_once_and_the_mount_remembers() {
    let (p, b) = picky(true, false);
    for k in ["a", "b", "c"] {
        p.inner.put(&Path::from(k), PutPayload::from_static(b"0123456789")).await.unwrap();
    }
    p.inner.put(&Path::from("empty"), PutPayload::from_static(b"")).await.unwrap();
    // Unknown size, a suffix this server accepts: one request.
    assert_eq!(suffix(&b, "a", 3).await, Some((b"789".to_vec(), 10)));
    assert_eq!(p.take(), vec!["GET -3"]);
    assert!(!b.shapes.suffix_refused());
    // Unknown size, over-long: refused, then HEAD + whole GET; remembered.
    assert_eq!(suffix(&b, "b", 100).await, Some((b"0123456789".to_vec(), 10)));
    assert_eq!(p.take(), vec!["GET -100", "HEAD", "GET"]);
    assert!(b.shapes.suffix_refused());
    // From now on a suffix of unknown size starts with the HEAD: no refused request.
    assert_eq!(suffix(&b, "c", 4).await, Some((b"6789".to_vec(), 10)));
    assert_eq!(p.take(), vec!["HEAD", "GET 6..10"]);
    assert_eq!(suffix(&b, "missing", 4).await, None);
    assert_eq!(p.take(), vec!["HEAD"]);
    assert_eq!(suffix(&b, "empty", 4).await, Some((vec![], 0)));
}

#[tokio::test]
async fn a_server_without_suffix_ranges_gets_bounded_ones() {
    let (p, b) = picky(false, true);
    p.inner.put(&Path::from("k"), PutPayload::from_static(b"0123456789")).await.unwrap();
    p.inner.put(&Path::from("j"), PutPayload::from_static(b"abcdef")).await.unwrap();
    assert_eq!(suffix(&b, "k", 4).await, Some((b"6789".to_vec(), 10)));
    assert_eq!(p.take(), vec!["GET -4", "HEAD", "GET 6..10"]);
    assert_eq!(suffix(&b, "j", 2).await, Some((b"ef".to_vec(), 6)));
    assert_eq!(p.take(), vec!["HEAD", "GET 4..6"]);
    // Known sizes: bounded is not needed for a suffix covering the object.
    assert_eq!(suffix(&b, "j", 6).await, Some((b"abcdef".to_vec(), 6)));
    assert_eq!(p.take(), vec!["GET"]);
}

/// On the paused clock the HEAD's 5 s latency passes only when nothing else can run: a
/// lookup that waited for it has seen the clock move by 5 s, one that did not has not.
#[tokio::test(start_paused = true)]
async fn a_directory_lookup_does_not_wait_for_a_slow_head() {
    let mut p = Picky::new(false, false);
    p.head_delay = Duration::from_secs(5);
    let p = Arc::new(p);
    p.inner.put(&Path::from("d/x"), PutPayload::from_static(b"x")).await.unwrap();
    let mut b = ObjectStoreBackend::new(p.clone(), "", "picky://b".into());
    b.pager = Some(Arc::new(FakeS3::new(&["d/x".to_string()])));
    let started = tokio::time::Instant::now();
    let l = b.lookup("d").await.unwrap();
    assert!(l.dir && l.file.is_none());
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    // A file still waits for its HEAD (it has to: the HEAD is what finds it).
    let l = b.lookup("d/x").await.unwrap();
    assert!(!l.dir && l.file.is_some_and(|m| m.size == 1));
    assert!(started.elapsed() >= Duration::from_secs(5));
}

/// s3s-fs answers HEAD of a key that is (or was) a directory on its disk with 500. Where
/// a listing answers and has no such object, every path sees "absent"; where the listing
/// shows the object, or fails too (an outage), the 500 stays an error.
#[tokio::test]
async fn a_500_on_head_means_absent_only_when_a_listing_says_so() {
    let mut p = Picky::new(false, false);
    p.head_500 = true;
    let p = Arc::new(p);
    let keys = ["d/x", "d/y-1", "d/y/z"].map(String::from);
    for k in &keys {
        p.inner.put(&Path::from(k.as_str()), PutPayload::from_static(b"x")).await.unwrap();
    }
    let fake = Arc::new(FakeS3::new(&keys));
    let mut b = ObjectStoreBackend::new(p.clone(), "", "picky://b".into());
    b.pager = Some(fake.clone());
    // "d/gone": nothing. "d/y": no object, but a directory and a sibling "d/y-1" listed
    // after it from the same prefix.
    for key in ["d/gone", "d/y"] {
        assert!(b.head(key).await.unwrap().is_none(), "{key}");
        assert!(matches!(b.delete(key).await, Err(StoreError::NotFound(_))), "{key}");
        assert!(matches!(b.delete_if_version(key, "v").await, Err(StoreError::NotFound(_))));
    }
    let l = b.lookup("d/gone").await.unwrap();
    assert!(!l.dir && l.file.is_none());
    let l = b.lookup("d/y").await.unwrap();
    assert!(l.dir && l.file.is_none());
    // The listing shows "d/x" as an object: its HEAD failure is an error, not "absent".
    assert!(matches!(b.head("d/x").await, Err(StoreError::Backend { .. })));
    assert!(b.lookup("d/x").await.is_err());
    // The listing fails too: an outage is an error everywhere.
    fake.down.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(matches!(b.head("d/gone").await, Err(StoreError::Backend { .. })));
    assert!(b.lookup("d/gone").await.is_err());
    assert!(b.delete("d/gone").await.is_err());
}

#[tokio::test]
async fn other_failures_are_not_taken_for_a_refused_suffix() {
    // A server that is down: the error comes back, no fallback, nothing remembered.
    let e = StoreError::Backend {
        key: "k".into(),
        message: "Error performing GET http://127.0.0.1:9/b/k in 3s - error sending \
                  request: Connection refused"
            .into(),
    };
    assert!(!refuses_suffix(&e));
    assert!(!refuses_suffix(&StoreError::NotFound("k".into())));
    assert!(!refuses_suffix(&StoreError::PermissionDenied("k".into())));
    let e503 = StoreError::Backend {
        key: "k".into(),
        message: "Server returned non-2xx status code: 503 Service Unavailable".into(),
    };
    assert!(!refuses_suffix(&e503));
    for code in ["416 Range Not Satisfiable", "500 Internal Server Error", "501 Not Implemented"] {
        let e = StoreError::Backend {
            key: "k".into(),
            message: format!("Server returned non-2xx status code: {code}: x"),
        };
        assert!(refuses_suffix(&e), "{code}");
    }
    assert!(refuses_suffix(&StoreError::Unsupported("this operation")));
}

#[tokio::test]
async fn large_puts_use_multipart_and_read_back() {
    let (_mem, b) = backend("");
    let data: Vec<u8> = (0..(MULTIPART_THRESHOLD + 12345)).map(|i| (i % 251) as u8).collect();
    b.put("big", Bytes::from(data.clone())).await.unwrap();
    assert_eq!(b.get("big").await.unwrap().len(), data.len());
    assert_eq!(
        b.get_range("big", 8_000_000..8_000_010).await.unwrap().as_ref(),
        &data[8_000_000..8_000_010]
    );
}
