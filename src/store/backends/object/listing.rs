//! Listings one level at a time, paged, with keys object_store cannot parse hidden; lookups
//! (an object request and a directory probe at once).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path;
use object_store::ObjectStore;

use crate::store::{
    join_key, name_problem, validate_key, ByteRange, ListPages, Listing, Lookup, ObjectMeta,
    StoreError, StoreResult,
};
use crate::store::{ListStore, ReadStore};

use super::{to_meta, ObjectStoreBackend};

/// Why an object that is also a prefix is left out of listings (logged once per key).
pub(super) const SHADOWED: &str =
    "also a prefix of other keys: the directory is shown, this object is not reachable";

/// Entries per listing page (S3's maximum).
pub(super) const LIST_PAGE: usize = 1000;

/// The raw key object_store refused to parse in a listing response, if that is what `e` is.
/// object_store turns every listed key into a `Path` and fails the whole page on the first
/// key it cannot parse (`..`, `.` or an empty segment, an ASCII control character).
pub(super) fn unparseable_key(e: &object_store::Error) -> Option<&str> {
    use object_store::path::Error as P;
    match e {
        object_store::Error::InvalidPath {
            source: P::EmptySegment { path } | P::BadSegment { path, .. },
        } => Some(path),
        _ => None,
    }
}

/// Why object_store refuses a raw key (for the log line).
pub(super) fn unparseable_reason(key: &str) -> &'static str {
    let trimmed = key.strip_prefix('/').unwrap_or(key);
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    if let Some(problem) = trimmed.split('/').find_map(name_problem) {
        problem
    } else if key.chars().any(|c| c.is_ascii_control()) {
        "control character (the object store client cannot address it)"
    } else {
        "the object store client cannot parse it"
    }
}

/// Where a listing resumes after skipping `raw` (a key, or a common prefix ending in '/').
/// For a prefix, past every key below it: the largest character makes a start-after that
/// only keys made of it could follow (those would show the same prefix again, deduplicated).
pub(super) fn skip_past(raw: &str) -> String {
    if raw.ends_with('/') {
        format!("{raw}{}", char::MAX)
    } else {
        raw.to_string()
    }
}

/// One level of a delimiter listing, page by page, that survives keys object_store cannot
/// parse. With object_store alone, one such key anywhere in a page fails the whole listing:
/// the directory gives an error and hides all its good neighbours.
///
/// Pages follow the server's continuation tokens. When a page fails on an unparseable key,
/// the listing goes on from the last entry it has (start-after), with pages halved until the
/// page holding only the bad entry, which is passed to `hide` and stepped over; pages then
/// grow back. A bad key costs about 2·log2(1000) extra requests; a clean directory costs
/// exactly what it did before.
pub(super) struct LevelPager {
    pub(super) pager: Arc<dyn PaginatedListStore>,
    /// The listed prefix with its trailing '/' ("" for the bucket root).
    pub(super) level: String,
    pub(super) token: Option<String>,
    /// The greatest raw key (or `skip_past` of a common prefix) listed so far: the next page
    /// starts after it when there is no token, and nothing listed later sorts before it.
    pub(super) cursor: Option<String>,
    pub(super) page: usize,
    pub(super) done: bool,
}

impl LevelPager {
    pub(super) fn new(pager: Arc<dyn PaginatedListStore>, level: String) -> Self {
        LevelPager { pager, level, token: None, cursor: None, page: LIST_PAGE, done: false }
    }

    /// The objects and common prefixes of the next page; `None` once the level is done.
    pub(super) async fn next(
        &mut self,
        hide: &mut impl FnMut(&str),
    ) -> object_store::Result<Option<(Vec<object_store::ObjectMeta>, Vec<Path>)>> {
        while !self.done {
            let opts = PaginatedListOptions {
                delimiter: Some("/".into()),
                max_keys: Some(self.page),
                offset: if self.token.is_none() { self.cursor.clone() } else { None },
                page_token: self.token.take(),
                ..Default::default()
            };
            let prefix = if self.level.is_empty() { None } else { Some(self.level.as_str()) };
            match self.pager.list_paginated(prefix, opts).await {
                Ok(r) => {
                    for o in &r.result.objects {
                        // A directory marker "dir/" comes back as the path "dir".
                        self.cursor = self.cursor.take().max(Some(o.location.to_string()));
                    }
                    for p in &r.result.common_prefixes {
                        self.cursor = self.cursor.take().max(Some(skip_past(&format!("{p}/"))));
                    }
                    self.token = r.page_token;
                    self.done = self.token.is_none();
                    self.page = (self.page * 2).min(LIST_PAGE);
                    return Ok(Some((r.result.objects, r.result.common_prefixes)));
                }
                Err(e) => {
                    let Some(bad) = unparseable_key(&e) else {
                        self.done = true;
                        return Err(e);
                    };
                    if self.page > 1 {
                        self.page /= 2; // the bad entry is in the first `page` entries after the cursor
                        continue;
                    }
                    // A page of one entry failed: that entry is `bad`. Step over it, unless the
                    // server does not honour start-after (no progress), where this must stop.
                    let next = skip_past(bad);
                    if self.cursor.as_deref().is_some_and(|c| c >= next.as_str()) {
                        self.done = true;
                        return Err(e);
                    }
                    hide(bad);
                    self.cursor = Some(next);
                }
            }
        }
        Ok(None)
    }
}

/// What a page of `ObjectStoreBackend::list_pages` still owes: files that a common prefix of
/// the same name in a later page may yet shadow.
pub(super) struct PagedLevel {
    pub(super) pager: LevelPager,
    /// Files held back: in the byte order of a listing, `x` comes before `x-y` and `x.z`, and
    /// those before `x/`, so the prefix `x/` (which hides the object `x`, see `list`) may
    /// come pages later. Held until the listing has passed `x/`: a handful at a time.
    pub(super) held: std::collections::BTreeMap<String, ObjectMeta>,
    /// The last directory handed out (a prefix stepped into past a bad key may come again).
    pub(super) last_dir: Option<String>,
    pub(super) finished: bool,
}

impl ObjectStoreBackend {
    /// `list_pages` of `prefix`, from just after the name `after` if given.
    pub(super) fn level_pages<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&'a str>,
    ) -> ListPages<'a> {
        use futures::stream::{self, StreamExt};
        let Some(pager) = self.pager.clone() else {
            return Box::pin(stream::once(self.list(prefix)));
        };
        if let Err(e) = validate_key(prefix) {
            return Box::pin(stream::once(async { Err(e) }));
        }
        let full = self.full_key(prefix);
        let level = if full.is_empty() { String::new() } else { format!("{full}/") };
        let mut pager = LevelPager::new(pager, level);
        pager.cursor = after.filter(|a| !a.is_empty()).map(|name| format!("{}{name}", pager.level));
        let state = PagedLevel { pager, held: Default::default(), last_dir: None, finished: false };
        stream::unfold(state, move |mut st| async move {
            if st.finished {
                return None;
            }
            let level = st.pager.level.clone();
            let (objects, prefixes) = match st.pager.next(&mut |key| self.hide(key, None)).await {
                Ok(Some(page)) => page,
                Ok(None) | Err(object_store::Error::NotFound { .. }) => (Vec::new(), Vec::new()),
                Err(e) => {
                    st.finished = true;
                    return Some((Err(self.err(prefix, e)), st));
                }
            };
            let mut page = self.level_listing(prefix, &level, &objects, &prefixes);
            page.dirs.sort();
            page.dirs.dedup();
            page.dirs.retain(|d| st.last_dir.as_ref().is_none_or(|last| d > last));
            if let Some(last) = page.dirs.last() {
                st.last_dir = Some(last.clone());
            }
            st.held.extend(page.files.drain(..));
            for d in &page.dirs {
                if st.held.remove(d).is_some() {
                    self.hide(&format!("{level}{d}"), Some(SHADOWED));
                }
            }
            // Files the listing has passed the prefix of (`name/` sorts before the cursor) can
            // no longer be shadowed; at the end, none can.
            if st.pager.done {
                st.finished = true;
                page.files = std::mem::take(&mut st.held).into_iter().collect();
            } else {
                let cursor = st.pager.cursor.clone().unwrap_or_default();
                let keep = st.held.keys().find(|name| format!("{level}{name}/") >= cursor).cloned();
                let rest = match keep {
                    Some(first_kept) => st.held.split_off(&first_kept),
                    None => Default::default(),
                };
                page.files = std::mem::replace(&mut st.held, rest).into_iter().collect();
            }
            Some((Ok(page), st))
        })
        .boxed()
    }

    /// The entries of one listed level (`level`: the full prefix with its '/'), by name,
    /// unsorted; names that cannot be file names are hidden (and logged once).
    pub(super) fn level_listing(
        &self,
        prefix: &str,
        level: &str,
        objects: &[object_store::ObjectMeta],
        prefixes: &[Path],
    ) -> Listing {
        let full = level.strip_suffix('/').unwrap_or(level);
        let mut listing = Listing::default();
        for d in prefixes {
            // object_store drops the prefix's trailing '/' (and a leading one: the root-level
            // prefix "/" of a key like "/lead" arrives as the empty path).
            let raw = format!("{d}/");
            match raw.strip_prefix(level).and_then(|r| r.strip_suffix('/')) {
                Some(name) if name_problem(name).is_none() => listing.dirs.push(name.to_string()),
                Some(name) => self.hide(&raw, name_problem(name)),
                None => self.hide(&raw, Some("outside the listed directory")),
            }
        }
        for o in objects {
            // Skip the directory marker of this level ("dir/" objects, parsed to "dir").
            if o.location.as_ref() == full {
                continue;
            }
            match o.location.as_ref().strip_prefix(level) {
                Some(name) if name_problem(name).is_none() => {
                    self.shapes.note(&join_key(prefix, name), o.size);
                    listing.files.push((name.to_string(), to_meta(o)))
                }
                Some(name) => self.hide(o.location.as_ref(), name_problem(name)),
                None => self.hide(o.location.as_ref(), Some("outside the listed directory")),
            }
        }
        listing
    }

    /// `file` (the key's HEAD or GET) and the directory probe of `key`, sent together. A
    /// probe that shows a directory decides at once, `(Ok(None), Ok(true))`: the directory is
    /// what the mount shows (a key that is also a prefix is hidden behind it), so the object
    /// request is not waited for (see `lookup`).
    pub(super) async fn with_dir_probe<T>(
        &self,
        key: &str,
        file: impl std::future::Future<Output = StoreResult<Option<T>>>,
    ) -> (StoreResult<Option<T>>, StoreResult<bool>) {
        use futures::future::{select, Either};
        let probe = self.probe_dir(key);
        futures::pin_mut!(file, probe);
        match select(file, probe).await {
            Either::Right((Ok(true), _)) => (Ok(None), Ok(true)),
            Either::Right((dir, file)) => (file.await, dir),
            Either::Left((file, probe)) => (file, probe.await),
        }
    }

    /// Is there anything below `key/`? One small LIST where the store can page, else a full level.
    pub(super) async fn probe_dir(&self, key: &str) -> StoreResult<bool> {
        let dir = if key.is_empty() { self.prefix.clone() } else { self.full_key(key) };
        if let Some(pager) = &self.pager {
            let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
            let opts = PaginatedListOptions {
                delimiter: Some("/".into()),
                max_keys: Some(2),
                ..Default::default()
            };
            let page = match pager
                .list_paginated(if prefix.is_empty() { None } else { Some(prefix.as_str()) }, opts)
                .await
            {
                Ok(page) => page,
                // A key object_store refuses to parse (`dir/../x`, a control character) is
                // still a key below `dir/`: the directory exists (its listing hides that key).
                Err(e) if unparseable_key(&e).is_some() => return Ok(true),
                Err(e) => return Err(self.err(key, e)),
            };
            return Ok(!page.result.objects.is_empty() || !page.result.common_prefixes.is_empty());
        }
        let path = Path::parse(&dir)
            .map_err(|_| StoreError::InvalidKey(key.to_string(), "not a valid object key"))?;
        match self.store.list_with_delimiter(Some(&path)).await {
            Ok(l) => Ok(!l.objects.is_empty() || !l.common_prefixes.is_empty()),
            Err(
                object_store::Error::NotFound { .. } | object_store::Error::NotImplemented { .. },
            ) => Ok(false),
            Err(e) => Err(self.err(key, e)),
        }
    }

    /// Does a listing show `key` itself as an object? One LIST from `key` (no trailing '/')
    /// of one entry: in a listing's byte order the key itself comes before every other key
    /// that starts with it. `Err` where there is no paginated listing (plain HTTP) or it fails.
    pub(super) async fn listed_as_object(&self, key: &str) -> StoreResult<bool> {
        let Some(pager) = &self.pager else {
            return Err(StoreError::Unsupported("listing"));
        };
        let full = self.full_key(key);
        let opts = PaginatedListOptions {
            delimiter: Some("/".into()),
            max_keys: Some(1),
            ..Default::default()
        };
        let page = pager.list_paginated(Some(&full), opts).await.map_err(|e| self.err(key, e))?;
        Ok(page.result.objects.iter().any(|o| o.location.as_ref() == full))
    }
}

#[async_trait]
impl ListStore for ObjectStoreBackend {
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        validate_key(prefix)?;
        let full = self.full_key(prefix);
        let level = if full.is_empty() { String::new() } else { format!("{full}/") };
        let (objects, prefixes) = match &self.pager {
            Some(pager) => {
                let mut pages = LevelPager::new(pager.clone(), level.clone());
                let (mut objects, mut prefixes) = (Vec::new(), Vec::new());
                loop {
                    match pages.next(&mut |key| self.hide(key, None)).await {
                        Ok(Some((o, p))) => {
                            objects.extend(o);
                            prefixes.extend(p);
                        }
                        Ok(None) => break,
                        Err(object_store::Error::NotFound { .. }) => return Ok(Listing::default()),
                        Err(e) => return Err(self.err(prefix, e)),
                    }
                }
                (objects, prefixes)
            }
            // No paginated listing (plain HTTP): one key object_store cannot parse fails the
            // whole directory, with a log line from the caller.
            None => {
                let path = if full.is_empty() {
                    None
                } else {
                    Some(Path::parse(&full).map_err(|_| {
                        StoreError::InvalidKey(prefix.to_string(), "not a valid object key")
                    })?)
                };
                match self.store.list_with_delimiter(path.as_ref()).await {
                    Ok(r) => (r.objects, r.common_prefixes),
                    Err(object_store::Error::NotFound { .. }) => return Ok(Listing::default()),
                    Err(e) => return Err(self.err(prefix, e)),
                }
            }
        };
        let mut listing = self.level_listing(prefix, &level, &objects, &prefixes);
        listing.files.sort_by(|a, b| a.0.cmp(&b.0));
        listing.dirs.sort();
        listing.dirs.dedup();
        // A key that is also a prefix (`d/x` beside `d/x/y`) is shown as the directory (see
        // RawNamespace::lookup); say once that its own content is out of reach.
        for (name, _) in &listing.files {
            if listing.dirs.binary_search(name).is_ok() {
                self.hide(&format!("{level}{name}"), Some(SHADOWED));
            }
        }
        Ok(listing)
    }

    /// One page of the backend's listing at a time (where it pages: S3, GCS, Azure). Unlike
    /// `list`, an object shadowed by a prefix of the same name is left out (it is logged
    /// and cannot be read either way), so no name comes twice over the pages.
    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        self.level_pages(prefix, None)
    }

    fn list_pages_after<'a>(&'a self, prefix: &'a str, after: &'a str) -> ListPages<'a> {
        self.level_pages(prefix, Some(after))
    }

    /// HEAD of the key and a one-page LIST of `key/`, concurrently. A listing that shows a
    /// directory decides at once: the directory is what the mount shows (a key that is also a
    /// prefix is hidden behind it), so the HEAD is not waited for. That matters on servers
    /// that answer HEAD of a directory-like key with 500 (s3s-fs), which the client retries
    /// for about a second. A HEAD failure other than 404 is ignored when the listing shows a
    /// directory.
    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        validate_key(key)?;
        if key.is_empty() {
            return Ok(Lookup { file: None, dir: true, dir_perms: None });
        }
        let (head, dir) = self.with_dir_probe(key, self.head_opt(key)).await;
        let (file, dir) = settle_lookup(key, head, dir)?;
        Ok(Lookup { file, dir, dir_perms: None })
    }

    /// One GET of the first `limit` bytes in place of `lookup`'s HEAD and directory probe (see
    /// `ListStore::lookup_reading`: the name is a document's). The probe is a LIST, which stores
    /// answer more slowly than a GET (S3's LIST is several times slower, moto's too): waiting
    /// for it made the open of a Zarr array slower than zarr-python's own S3 store. A GET that
    /// fails (s3s-fs answers 500 for a key that is a directory on its disk) takes `lookup`'s
    /// path, which knows how to settle that.
    async fn lookup_reading(&self, key: &str, limit: u64) -> StoreResult<(Lookup, Option<Bytes>)> {
        validate_key(key)?;
        if key.is_empty() || limit == 0 {
            return Ok((self.lookup(key).await?, None));
        }
        match self.get_ranged(key, ByteRange::Range(0..limit)).await {
            Ok(Some((data, meta))) => {
                Ok((Lookup { file: Some(meta), dir: false, dir_perms: None }, Some(data)))
            }
            Ok(None) => Ok((Lookup { file: None, dir: false, dir_perms: None }, None)),
            Err(_) => Ok((self.lookup(key).await?, None)),
        }
    }
}

/// A lookup's answer from its object request and its directory probe (see `lookup`): a failed
/// object request is ignored when the probe shows a directory, a failed probe when the object
/// exists. `(object, is a directory)`.
pub(super) fn settle_lookup<T>(
    key: &str,
    file: StoreResult<Option<T>>,
    dir: StoreResult<bool>,
) -> StoreResult<(Option<T>, bool)> {
    match (file, dir) {
        (Ok(file), Ok(dir)) => Ok((file, dir)),
        (Err(_), Ok(true)) => Ok((None, true)),
        (Err(e), _) => Err(e),
        (Ok(Some(file)), Err(e)) => {
            tracing::debug!(key, error = %e, "directory probe failed; treating the key as a file");
            Ok((Some(file), false))
        }
        (Ok(None), Err(e)) => Err(e),
    }
}
