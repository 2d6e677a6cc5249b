//! One request -> one response: method and token checks, the path to a view's filesystem,
//! then a directory page or a file (whole, a range, or 304), every failure as its status.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::Semaphore;

use super::access::Access;
use super::access_log::{self, Logged};
use super::body::{self, Body};
use super::errors::status_of;
use super::listing::{self, Entry};
use super::paths::{self, Target};
use super::ranges::{self, Decision, Ranged, Validators};
use super::walk::{self, OpenFile};
use super::walks::Walks;
use crate::fs::{FileKind, FsError, FsResult, ZarrFs};
use crate::views::ViewKind;

/// What every request is answered from.
pub struct Served {
    /// The served views, each its own filesystem over the one store stack.
    views: Vec<View>,
    pub access: Access,
    /// The bound on lookups, listings and reads in flight at once.
    pub backend: Arc<Semaphore>,
}

/// One served view: its filesystem and the walks of it kept for a while.
struct View {
    kind: ViewKind,
    fs: Arc<ZarrFs>,
    walks: Walks,
}

const ALLOW: &str = "GET, HEAD, OPTIONS";

impl Served {
    pub fn new(
        views: Vec<(ViewKind, Arc<ZarrFs>)>,
        access: Access,
        backend: Arc<Semaphore>,
    ) -> Self {
        let views = views
            .into_iter()
            .map(|(kind, fs)| {
                let walks = Walks::new(fs.config().metadata_ttl);
                View { kind, fs, walks }
            })
            .collect();
        Served { views, access, backend }
    }

    fn view(&self, kind: ViewKind) -> Option<&View> {
        self.views.iter().find(|v| v.kind == kind)
    }

    /// Answer `req` from `client`; the body logs the request when it ends.
    pub async fn answer<B>(&self, req: Request<B>, client: SocketAddr) -> Response<Logged> {
        let started = Instant::now();
        let (parts, _) = req.into_parts();
        let path = parts.uri.path().to_string();
        let target = paths::parse(&path);
        let view = match &target {
            Ok(Some(Target::View { view, .. })) => view.name(),
            Ok(Some(Target::Index)) => "index",
            _ => "none",
        };
        let mut response = self.respond(&parts.method, &parts.headers, target).await;
        self.access.add_cors(&parts.headers, response.headers_mut());
        let status = response.status().as_u16();
        // hyper drops a body once its Content-Length is sent, without polling it to its end.
        let length = (parts.method != Method::HEAD)
            .then(|| response.headers().get(hyper::header::CONTENT_LENGTH))
            .flatten()
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let request = access_log::Request { client, method: parts.method, path, view, started };
        response.map(|b| Logged::new(b, request, status, length))
    }

    async fn respond(
        &self,
        method: &Method,
        headers: &HeaderMap,
        target: Result<Option<Target>, paths::BadPath>,
    ) -> Response<Body> {
        if method == Method::OPTIONS {
            let mut r = plain(StatusCode::NO_CONTENT, None);
            r.headers_mut().insert(header::ALLOW, HeaderValue::from_static(ALLOW));
            self.access.add_preflight(headers, r.headers_mut());
            return r;
        }
        if method != Method::GET && method != Method::HEAD {
            let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, Some("read-only: use GET or HEAD"));
            r.headers_mut().insert(header::ALLOW, HeaderValue::from_static(ALLOW));
            return r;
        }
        if !self.access.authorized(headers) {
            let mut r = plain(StatusCode::UNAUTHORIZED, Some("a bearer token is required"));
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
        let head = method == Method::HEAD;
        match target {
            Err(bad) => plain(StatusCode::BAD_REQUEST, Some(&bad.to_string())),
            Ok(None) => plain(StatusCode::NOT_FOUND, Some("no such view")),
            Ok(Some(Target::Index)) => self.index(headers, head),
            Ok(Some(Target::View { view, components, slash })) => match self.view(view) {
                None => plain(StatusCode::NOT_FOUND, Some("this view is not served")),
                Some(v) => self.path(v, &components, slash, headers, head).await,
            },
        }
    }

    /// `/`: a directory page of the served views.
    fn index(&self, headers: &HeaderMap, head: bool) -> Response<Body> {
        let entries: Vec<Entry> = self
            .views
            .iter()
            .map(|v| Entry { name: v.kind.name().to_string(), dir: true, size: None })
            .collect();
        page(headers, "/", &entries, head)
    }

    async fn path(
        &self,
        v: &View,
        components: &[String],
        slash: bool,
        headers: &HeaderMap,
        head: bool,
    ) -> Response<Body> {
        let (fs, view) = (&v.fs, v.kind);
        let url = paths::url_path(view, components, slash);
        // A kept walk that leads to a failure is dropped and the path walked again, so only a
        // fresh walk answers a failure; a file replaced between its lookup and its open
        // (ESTALE) is looked up once more.
        let mut fresh_only = false;
        let mut retried = false;
        loop {
            let kept = if fresh_only { None } else { v.walks.get(&url) };
            let was_kept = kept.is_some();
            let walked = match kept {
                Some(w) => w,
                None => match self.bounded(walk::walk(fs, components)).await {
                    Ok(w) => Arc::new(w),
                    Err(e) => return failure(&url, &e),
                },
            };
            if walked.attr.kind == FileKind::Dir {
                if !slash {
                    // A directory's URL ends with '/', so relative links resolve inside it.
                    let mut r = plain(StatusCode::MOVED_PERMANENTLY, None);
                    let to = paths::url_path(view, components, true);
                    if let Ok(v) = HeaderValue::from_str(&to) {
                        r.headers_mut().insert(header::LOCATION, v);
                    }
                    return r;
                }
                return match self.bounded(walk::list(&walked)).await {
                    Ok(listed) => {
                        if !was_kept {
                            v.walks.keep(&url, walked);
                        }
                        let entries: Vec<Entry> = listed
                            .into_iter()
                            .map(|e| Entry {
                                dir: e.kind == FileKind::Dir,
                                size: e.attr.filter(|_| e.kind == FileKind::File).map(|a| a.size),
                                name: e.name,
                            })
                            .collect();
                        page(headers, &url, &entries, head)
                    }
                    Err(_) if was_kept => {
                        v.walks.drop_walk(&url);
                        fresh_only = true;
                        continue;
                    }
                    Err(e) => failure(&url, &e),
                };
            }
            if slash {
                if was_kept {
                    v.walks.drop_walk(&url);
                    fresh_only = true;
                    continue;
                }
                return plain(StatusCode::NOT_FOUND, Some("not a directory"));
            }
            let name = components.last().map_or("", String::as_str);
            match self.bounded(OpenFile::open(walked.clone())).await {
                Ok(file) => {
                    if !was_kept {
                        v.walks.keep(&url, walked);
                    }
                    return self.file(file, name, url, headers, head).await;
                }
                Err(_) if was_kept => {
                    v.walks.drop_walk(&url);
                    fresh_only = true;
                }
                Err(FsError::Stale) if !retried => retried = true,
                Err(e) => return failure(&url, &e),
            }
        }
    }

    /// A file: 304, 412, 416, or its bytes (whole or one range): read before the headers when
    /// they fit one read, else streamed.
    async fn file(
        &self,
        file: OpenFile,
        name: &str,
        url: String,
        headers: &HeaderMap,
        head: bool,
    ) -> Response<Body> {
        let len = file.node.size;
        let validators = Validators {
            etag: file.node.content_version().map(|v| ranges::etag_of(&v, len)),
            modified: file.node.modified,
        };
        let mut r = Response::new(body::empty());
        let h = r.headers_mut();
        h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        if let Some(tag) = validators.etag.as_deref().and_then(|t| HeaderValue::from_str(t).ok()) {
            h.insert(header::ETAG, tag);
        }
        let date = httpdate::fmt_http_date(validators.modified);
        if let Ok(v) = HeaderValue::from_str(&date) {
            h.insert(header::LAST_MODIFIED, v);
        }
        let range = match ranges::decide(headers, &validators, len) {
            Decision::NotModified => {
                *r.status_mut() = StatusCode::NOT_MODIFIED;
                return r;
            }
            Decision::Failed => {
                *r.status_mut() = StatusCode::PRECONDITION_FAILED;
                return r;
            }
            Decision::Send { range } => range,
        };
        let h = r.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(super::media::content_type(name)));
        let bytes = match range {
            Ranged::Whole => 0..len,
            Ranged::Part(part) => {
                *r.status_mut() = StatusCode::PARTIAL_CONTENT;
                let cr = format!("bytes {}-{}/{len}", part.start, part.end - 1);
                r.headers_mut().insert(header::CONTENT_RANGE, header_value(&cr));
                part
            }
            Ranged::Unsatisfiable => {
                let mut r = plain(StatusCode::RANGE_NOT_SATISFIABLE, None);
                r.headers_mut()
                    .insert(header::CONTENT_RANGE, header_value(&format!("bytes */{len}")));
                return r;
            }
        };
        let count = bytes.end - bytes.start;
        r.headers_mut().insert(header::CONTENT_LENGTH, header_value(&count.to_string()));
        if head || count == 0 {
            return r;
        }
        if count > body::PIECE {
            *r.body_mut() = body::file(file, bytes, self.backend.clone(), url);
            return r;
        }
        match body::read_small(&file, bytes, &self.backend, &url).await {
            Ok(data) => *r.body_mut() = body::full(data),
            Err(e) => return failure(&url, &e),
        }
        r
    }

    /// `work` under a permit of the backend bound.
    async fn bounded<T>(
        &self,
        work: impl std::future::Future<Output = FsResult<T>>,
    ) -> FsResult<T> {
        let _permit =
            self.backend.acquire().await.map_err(|_| FsError::NotSupported("shutting down"))?;
        work.await
    }
}

/// A directory page, HTML or JSON as the client accepts.
fn page(headers: &HeaderMap, url: &str, entries: &[Entry], head: bool) -> Response<Body> {
    let (text, kind) = if listing::wants_json(headers) {
        (listing::json(url, entries), "application/json")
    } else {
        (listing::html(url, entries), "text/html; charset=utf-8")
    };
    let mut r = Response::new(if head { body::empty() } else { body::full(text.clone()) });
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(header::CONTENT_LENGTH, header_value(&text.len().to_string()));
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    r
}

/// A failed lookup, listing or open: its status with a one-line body; a 5xx is logged.
fn failure(url: &str, e: &FsError) -> Response<Body> {
    let status = status_of(e);
    if super::errors::is_failure(status) {
        tracing::warn!(url, status = status.as_u16(), error = %e, "request failed");
    }
    plain(status, Some(&e.to_string()))
}

/// A response with a one-line text body (or none).
fn plain(status: StatusCode, text: Option<&str>) -> Response<Body> {
    let mut r = Response::new(body::empty());
    *r.status_mut() = status;
    if let Some(text) = text {
        let line = format!(
            "{} {}: {}\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or(""),
            text.replace('\n', " ")
        );
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        r.headers_mut().insert(header::CONTENT_LENGTH, header_value(&line.len().to_string()));
        *r.body_mut() = body::full(line);
    }
    r
}

fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).expect("digits, spaces, dashes and slashes make a header value")
}
