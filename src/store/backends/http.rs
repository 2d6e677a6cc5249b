//! A plain Zarr tree on a static HTTP server (`http(s)://host/data.zarr`: nginx, a CDN, S3
//! website hosting). Bytes come from the object-store backend below; this layer answers
//! what static servers cannot:
//!
//! - **Is a name a directory?** A HEAD that does not follow redirects: a directory's URL
//!   without its trailing slash answers with a redirect to `name/` (nginx, Apache, Caddy,
//!   S3 website hosting, Python's http.server), so the name is a directory, whether or not
//!   the server would list it. A 403 is a directory only when a metadata document of the
//!   tree's format exists below it (servers that refuse directories outright).
//! - **What is in a directory?** Static servers have no listing (object_store asks WebDAV
//!   PROPFIND, which they refuse). Where the root holds consolidated metadata, the hierarchy
//!   it describes is listed (a [`KeyTree`] handed in from above, see zarr::consolidated);
//!   the files of a listed directory are checked with one HEAD each, 16 at a time, so a
//!   listing shows only what exists, with real sizes. A directory the tree does not cover is
//!   listed from the server's index page where it has one (nginx autoindex, HTML or JSON;
//!   Apache's and Python's look alike: relative links), its files checked the same way.
//!   Elsewhere listing a directory is `Unsupported` (ENOTSUP), while every name can still be
//!   opened by its path.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use reqwest::header::{CONTENT_LENGTH, ETAG, LAST_MODIFIED, LOCATION};

use crate::store::egress::Egress;
use crate::store::{
    error_chain, join_key, validate_key, Listing, Lookup, ObjectMeta, Store, StoreError,
    StoreResult,
};

/// A directory tree known without listing the server (consolidated metadata).
pub trait KeyTree: Send + Sync + 'static {
    /// Is `key` a directory of the tree?
    fn is_dir(&self, key: &str) -> bool;
    /// The names in directory `dir` (name, is a directory), sorted; `None` when the tree does
    /// not cover `dir`. Files may be absent on the server (they are checked).
    fn children(&self, dir: &str) -> Option<Vec<(String, bool)>>;
}

/// Parses one root document into a tree: `Ok(None)` when it describes none.
pub type ParseTree = fn(&str, &[u8]) -> Result<Option<Arc<dyn KeyTree>>, String>;

/// Where a tree can come from, handed in by the layer that knows the format.
#[derive(Clone, Copy)]
pub struct TreeSource {
    /// Keys at the root to read, in order; the first that yields a tree is used.
    pub documents: &'static [&'static str],
    pub parse: ParseTree,
    /// Names whose presence below a name (`name/<marker>`) makes it a directory.
    pub markers: &'static [&'static str],
}

/// How many HEADs a listing keeps in flight.
const LISTING_HEADS: usize = 16;
/// Attempts of one HEAD when the server cannot be reached or answers 5xx.
const HEAD_ATTEMPTS: u32 = 3;

/// What a HEAD without redirects says about a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    File(ObjectMeta),
    Dir,
    Missing,
    /// A redirect elsewhere: only the backend (which follows redirects) can tell.
    Moved,
    /// 403: a directory the server will not show, or a file it will not serve.
    Forbidden,
}

/// Classify a HEAD answer for the name at `url` (pure; see the module comment).
pub fn classify(url: &url::Url, status: u16, headers: &[(&str, &str)]) -> Result<Answer, String> {
    let header =
        |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| *v);
    match status {
        200..=299 => {
            let size = header("content-length")
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| format!("HEAD {status} without a Content-Length"))?;
            let modified = header("last-modified").and_then(|v| httpdate::parse_http_date(v).ok());
            let millis = modified
                .and_then(|m| m.duration_since(SystemTime::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis());
            // The same version tag the object-store backend derives from a GET of this object.
            let version = header("etag").map_or_else(|| format!("{millis}-{size}"), str::to_string);
            Ok(Answer::File(ObjectMeta {
                size,
                modified: modified.unwrap_or(SystemTime::UNIX_EPOCH),
                version,
                perms: None,
            }))
        }
        300..=399 => {
            let Some(target) = header("location").and_then(|l| url.join(l).ok()) else {
                return Ok(Answer::Moved);
            };
            // The host may differ behind a proxy; the path tells.
            if target.path() == format!("{}/", url.path()) {
                Ok(Answer::Dir)
            } else {
                Ok(Answer::Moved)
            }
        }
        404 | 410 => Ok(Answer::Missing),
        403 => Ok(Answer::Forbidden),
        _ => Err(format!("HEAD answered {status}")),
    }
}

/// The names an index page (`GET dir/`) links to directly below it: (name, is a directory).
/// JSON is nginx's `autoindex_format json` (`[{"name":..,"type":"directory"|"file"},..]`);
/// HTML is any page of relative links (`<a href="name">`, `name/` for a directory). Links
/// that leave the directory (`../`, `/x`, `http://..`, `?C=N`) are not names in it. `None`
/// when the page is neither.
pub fn parse_index(content_type: &str, body: &str) -> Option<Vec<(String, bool)>> {
    let mut out: Vec<(String, bool)> = Vec::new();
    if content_type.contains("json") {
        let serde_json::Value::Array(items) = serde_json::from_str(body).ok()? else { return None };
        for it in items {
            let name = it.get("name")?.as_str()?.to_string();
            let is_dir = it.get("type").and_then(|t| t.as_str()) == Some("directory");
            out.push((name, is_dir));
        }
    } else if content_type.contains("html") {
        for part in body.split("<a href=\"").skip(1) {
            let Some(href) = part.split('"').next() else { continue };
            let href = href
                .replace("&quot;", "\"")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&#39;", "'")
                .replace("&amp;", "&");
            if href.starts_with(['/', '?', '#']) || href.contains("://") {
                continue;
            }
            let (raw, is_dir) = match href.strip_suffix('/') {
                Some(d) => (d, true),
                None => (href.as_str(), false),
            };
            let Ok(name) = percent_encoding::percent_decode_str(raw).decode_utf8() else {
                continue;
            };
            out.push((name.into_owned(), is_dir));
        }
    } else {
        return None;
    }
    // A name that cannot be a file name (`a/b`, `..`) is no entry of this directory.
    out.retain(|(n, _)| crate::store::name_problem(n).is_none());
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    Some(out)
}

/// The mount-time check of an `http(s)://` SOURCE: one HEAD of its URL, not following
/// redirects (a directory's redirect leads to an index page that may have no Content-Length,
/// which object_store refuses). Any HTTP answer is a server; only one that cannot be reached
/// fails, with the reason on one line.
pub async fn check(url: &str) -> Result<(), String> {
    let clean = url.split(['?', '#']).next().unwrap_or(url);
    let client = client(None).map_err(|e| scrub_userinfo(&e))?;
    match client.head(clean).send().await {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("cannot reach the server: {}", scrub_userinfo(&error_chain(&e)))),
    }
}

/// The client of every request this layer sends itself: no redirects followed; with `egress`,
/// names resolved by its rule (store/egress.rs).
fn client(egress: Option<&Arc<Egress>>) -> Result<reqwest::Client, String> {
    egress
        .map_or_else(reqwest::Client::builder, |e| e.client_builder())
        .redirect(reqwest::redirect::Policy::none())
        .timeout(crate::store::egress::REQUEST_TIMEOUT)
        .connect_timeout(crate::store::egress::CONNECT_TIMEOUT)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}

/// The static-hosting layer over the backend that reads the bytes.
pub struct HttpStore {
    inner: Arc<dyn Store>,
    client: reqwest::Client,
    /// The mount's URL with a trailing slash (user info kept: reqwest sends it as basic auth).
    base: url::Url,
    source: Option<TreeSource>,
    tree: tokio::sync::OnceCell<Option<Arc<dyn KeyTree>>>,
    warned_unlisted: std::sync::atomic::AtomicBool,
}

impl HttpStore {
    /// `inner` reads the bytes of `url` (an `http(s)://` URL); `source` says where a tree
    /// can be found (`None`: names can be opened, directories not listed).
    /// `egress`: the rule of the backend's own requests (ObjectStoreBackend::egress).
    pub fn new(
        inner: Arc<dyn Store>,
        url: &str,
        source: Option<TreeSource>,
        egress: Option<Arc<Egress>>,
    ) -> StoreResult<Self> {
        let clean = url.split(['?', '#']).next().unwrap_or(url).trim_end_matches('/');
        let bad = |m: String| StoreError::Backend { key: String::new(), message: m };
        let base = url::Url::parse(&format!("{clean}/"))
            .map_err(|e| bad(format!("{}: {e}", inner.describe())))?;
        let client = client(egress.as_ref()).map_err(bad)?;
        Ok(HttpStore {
            inner,
            client,
            base,
            source,
            tree: tokio::sync::OnceCell::new(),
            warned_unlisted: Default::default(),
        })
    }

    fn url(&self, key: &str, slash: bool) -> url::Url {
        let mut u = self.base.clone();
        if let Ok(mut segs) = u.path_segments_mut() {
            segs.pop_if_empty();
            if !key.is_empty() {
                segs.extend(key.split('/'));
            }
            if slash {
                segs.push("");
            }
        }
        u
    }

    /// HEAD `key` without following redirects, retrying unreachable servers and 5xx briefly.
    async fn head_raw(&self, key: &str) -> StoreResult<Answer> {
        let url = self.url(key, false);
        let mut last = String::new();
        for attempt in 0..HEAD_ATTEMPTS {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
            }
            match self.client.head(url.clone()).send().await {
                Ok(r) if r.status().is_server_error() => {
                    last = format!("HEAD answered {}", r.status())
                }
                Ok(r) => {
                    let wanted = [CONTENT_LENGTH, LAST_MODIFIED, ETAG, LOCATION];
                    let headers: Vec<(&str, &str)> = wanted
                        .iter()
                        .filter_map(|h| Some((h.as_str(), r.headers().get(h)?.to_str().ok()?)))
                        .collect();
                    return classify(&url, r.status().as_u16(), &headers)
                        .map_err(|m| self.backend_err(key, m));
                }
                Err(e) => last = format!("HEAD failed: {}", error_chain(&e)),
            }
        }
        Err(self.backend_err(key, last))
    }

    fn backend_err(&self, key: &str, message: String) -> StoreError {
        StoreError::Backend { key: key.to_string(), message: scrub_userinfo(&message) }
    }

    /// File, directory or nothing, following what the raw HEAD leaves open.
    async fn resolve(&self, key: &str) -> StoreResult<Lookup> {
        let dir = Lookup { file: None, dir: true, dir_perms: None };
        match self.head_raw(key).await? {
            Answer::File(meta) => Ok(Lookup { file: Some(meta), dir: false, dir_perms: None }),
            Answer::Dir => Ok(dir),
            Answer::Missing => Ok(Lookup::default()),
            Answer::Moved => {
                Ok(Lookup { file: self.inner.head(key).await?, dir: false, dir_perms: None })
            }
            Answer::Forbidden => {
                for m in self.source.map_or(&[][..], |s| s.markers) {
                    if matches!(self.head_raw(&join_key(key, m)).await?, Answer::File(_)) {
                        return Ok(dir);
                    }
                }
                Err(StoreError::PermissionDenied(key.to_string()))
            }
        }
    }

    /// The server's index page of `dir`, if it serves one (see [`parse_index`]).
    async fn index_page(&self, dir: &str) -> StoreResult<Option<Vec<(String, bool)>>> {
        let url = self.url(dir, true);
        let r = match self.client.get(url).send().await {
            Ok(r) => r,
            Err(e) => {
                let m = format!("GET of the index page failed: {}", error_chain(&e));
                return Err(self.backend_err(dir, m));
            }
        };
        match r.status().as_u16() {
            200 => {}
            403 | 404 | 405 | 410 | 300..=399 => return Ok(None),
            s => return Err(self.backend_err(dir, format!("GET of the index page answered {s}"))),
        }
        let ct = r
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        let body = r.text().await.map_err(|e| self.backend_err(dir, error_chain(&e)))?;
        Ok(parse_index(&ct, &body))
    }

    /// The tree from the root documents, read once; a failure to reach the server is not
    /// remembered (the next listing tries again), a document that is no tree is.
    async fn tree(&self) -> StoreResult<Option<Arc<dyn KeyTree>>> {
        let Some(source) = self.source else { return Ok(None) };
        let found = self
            .tree
            .get_or_try_init(|| async {
                for doc in source.documents {
                    let bytes = match self.inner.get(doc).await {
                        Ok(b) => b,
                        Err(StoreError::NotFound(_)) => continue,
                        Err(e) => return Err(e),
                    };
                    match (source.parse)(doc, &bytes) {
                        Ok(Some(tree)) => {
                            tracing::info!(document = doc, "listing the mount from its consolidated metadata");
                            return Ok(Some(tree));
                        }
                        Ok(None) => {}
                        Err(e) => tracing::warn!(document = doc, error = %e, "unusable consolidated metadata; not listed from it"),
                    }
                }
                Ok(None)
            })
            .await?;
        Ok(found.clone())
    }
}

/// Messages never carry `user:password@` of a URL.
fn scrub_userinfo(message: &str) -> String {
    message
        .split(' ')
        .map(|w| match (w.find("://"), w.find('@')) {
            (Some(i), Some(j)) if j > i => format!("{}{}", &w[..i + 3], &w[j + 1..]),
            _ => w.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Only lookups and listings are HTTP's own; reads and everything else go to the backend.
impl crate::store::layers::Layer for HttpStore {
    type Below = dyn Store;
    fn inner(&self) -> &dyn Store {
        self.inner.as_ref()
    }
}

#[async_trait]
impl crate::store::layers::ReadLayer for HttpStore {
    /// Reads pass through to the backend, so their bytes reach the cache as they arrive.
    async fn get_streamed(
        &self,
        key: &str,
        range: crate::store::ByteRange,
    ) -> StoreResult<Option<(ObjectMeta, crate::store::Body)>> {
        self.inner.get_streamed(key, range).await
    }

    /// A directory is no object here (the backend would follow its redirect to an index page).
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        validate_key(key)?;
        if key.is_empty() {
            return Ok(None);
        }
        Ok(self.resolve(key).await?.file)
    }
}

#[async_trait]
impl crate::store::layers::ListLayer for HttpStore {
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        validate_key(prefix)?;
        let mut children = self.tree().await?.and_then(|t| t.children(prefix));
        if children.is_none() {
            children = self.index_page(prefix).await?;
        }
        let Some(children) = children else {
            if !self.warned_unlisted.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(
                    store = %self.inner.describe(),
                    dir = prefix,
                    "this static HTTP server has no index page of the directory, and no \
                     consolidated metadata covers it: listing is not supported (names can \
                     still be opened)"
                );
            }
            return Err(StoreError::Unsupported(
                "listing a directory on a static HTTP server without consolidated metadata or an index page",
            ));
        };
        let mut listing = Listing::default();
        let files = children.into_iter().filter_map(|(name, is_dir)| {
            if is_dir {
                listing.dirs.push(name);
                None
            } else {
                Some(name)
            }
        });
        let files: Vec<String> = files.collect();
        let found: Vec<(String, Lookup)> = futures::stream::iter(files)
            .map(|name| async move {
                let l = self.resolve(&join_key(prefix, &name)).await?;
                Ok::<_, StoreError>((name, l))
            })
            .buffered(LISTING_HEADS)
            .try_collect()
            .await?;
        for (name, l) in found {
            if l.dir {
                listing.dirs.push(name);
            } else if let Some(meta) = l.file {
                listing.files.push((name, meta));
            }
        }
        listing.dirs.sort();
        Ok(listing)
    }

    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        validate_key(key)?;
        if key.is_empty() {
            return Ok(Lookup { file: None, dir: true, dir_perms: None });
        }
        if self.tree().await?.is_some_and(|t| t.is_dir(key)) {
            return Ok(Lookup { file: None, dir: true, dir_perms: None });
        }
        self.resolve(key).await
    }
}

impl crate::store::layers::WriteLayer for HttpStore {}

impl crate::store::layers::HintsLayer for HttpStore {
    fn has_real_dirs(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> url::Url {
        url::Url::parse(s).unwrap()
    }

    #[test]
    fn redirects_to_the_name_with_a_slash_are_directories() {
        let u = url("http://h:8080/data.zarr/g");
        for loc in
            ["http://h:8080/data.zarr/g/", "/data.zarr/g/", "g/", "http://other/data.zarr/g/"]
        {
            assert_eq!(classify(&u, 301, &[("Location", loc)]).unwrap(), Answer::Dir, "{loc}");
        }
        for loc in ["/elsewhere/", "/data.zarr/g", "/data.zarr/g/index.html"] {
            assert_eq!(classify(&u, 302, &[("location", loc)]).unwrap(), Answer::Moved, "{loc}");
        }
        assert_eq!(classify(&u, 308, &[]).unwrap(), Answer::Moved);
    }

    #[test]
    fn files_missing_names_and_errors() {
        let u = url("http://h/x/zarr.json");
        let hs = [
            ("Content-Length", "123"),
            ("Last-Modified", "Mon, 23 Nov 2026 20:39:19 GMT"),
            ("ETag", "\"6923-7b\""),
        ];
        let Answer::File(m) = classify(&u, 200, &hs).unwrap() else { panic!() };
        assert_eq!((m.size, m.version.as_str()), (123, "\"6923-7b\""));
        assert_eq!(m.modified, httpdate::parse_http_date("Mon, 23 Nov 2026 20:39:19 GMT").unwrap());
        let Answer::File(m) = classify(&u, 200, &hs[..2]).unwrap() else { panic!() };
        assert_eq!(m.version, format!("{}-123", 1_795_466_359_000u64));
        assert!(classify(&u, 200, &[]).is_err(), "a size is required");
        assert_eq!(classify(&u, 404, &[]).unwrap(), Answer::Missing);
        assert_eq!(classify(&u, 410, &[]).unwrap(), Answer::Missing);
        assert_eq!(classify(&u, 403, &[]).unwrap(), Answer::Forbidden);
        assert!(classify(&u, 500, &[]).is_err());
        assert!(classify(&u, 401, &[]).is_err());
    }

    #[test]
    fn index_pages_of_nginx_and_others() {
        let html = r#"<html><body><h1>Index of /x/</h1><hr><pre><a href="../">../</a>
<a href="sub/">sub/</a>                                23-Nov-2026 21:04       -
<a href="a%20b%26c.txt">a b&amp;c.txt</a>            23-Nov-2026 21:04       3
<a href=".zattrs">.zattrs</a>            23-Nov-2026 21:04       3
<a href="q&amp;a">q&amp;a</a> <a href=".hidden">.hidden</a> <a href="./">.</a>
<a href="/elsewhere/">x</a> <a href="?C=N;O=D">Name</a> <a href="http://h/x">y</a>
<a href="a%2Fb">bad</a> <a href="zarr.json">zarr.json</a></pre></body></html>"#;
        let got = parse_index("text/html", html).unwrap();
        let want = [
            (".hidden", false),
            (".zattrs", false),
            ("a b&c.txt", false),
            ("q&a", false),
            ("sub", true),
            ("zarr.json", false),
        ];
        assert_eq!(got, want.map(|(n, d)| (n.to_string(), d)));
        let json = r#"[{"name":"c","type":"directory","mtime":"Mon, 23 Nov 2026 21:04:00 GMT"},
            {"name":"zarr.json","type":"file","mtime":"Mon, 23 Nov 2026 21:04:00 GMT","size":2},
            {"name":"..","type":"directory"}]"#;
        let got = parse_index("application/json", json).unwrap();
        assert_eq!(got, [("c".to_string(), true), ("zarr.json".to_string(), false)]);
        assert_eq!(parse_index("application/octet-stream", "x"), None);
        assert_eq!(parse_index("application/json", "{}"), None);
        assert_eq!(parse_index("text/html", "<html>no links</html>"), Some(vec![]));
    }

    #[test]
    fn user_info_never_reaches_a_message() {
        assert_eq!(
            scrub_userinfo("HEAD failed: error sending request for url (http://u:pw@h/x)"),
            "HEAD failed: error sending request for url (http://h/x)"
        );
    }
}
