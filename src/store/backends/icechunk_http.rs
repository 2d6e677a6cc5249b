//! How an Icechunk repository's HTTP(S) virtual chunks are fetched: with a client whose every
//! redirect and every resolved address obeys the same rule as the container's first URL
//! (`store::egress`). Icechunk's own HTTP fetcher follows redirects anywhere and connects to
//! whatever a name resolves to at the time; a repository is data from somewhere else, so a
//! container on a public host must not be able to redirect a chunk read to the instance's
//! metadata service, nor a name re-point to a loopback service after it was checked.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use icechunk::config::HttpConfig;
use icechunk::format::manifest::{Checksum, VirtualReferenceError, VirtualReferenceErrorKind};
use icechunk::virtual_chunks::{HttpVirtualChunkFetcher, HttpVirtualChunkResponse};
use reqwest::header::{HeaderName, HeaderValue, ETAG, LAST_MODIFIED, RANGE};
use reqwest::StatusCode;

use crate::store::egress::Egress;

/// The fetcher Icechunk calls for every virtual chunk of an HTTP(S) container.
#[derive(Debug)]
pub struct GuardedFetcher {
    client: reqwest::Client,
}

impl GuardedFetcher {
    /// A fetcher whose requests obey `egress` (the user's `--authorize-virtual` prefixes).
    pub fn new(egress: Egress) -> Result<Self, String> {
        let client = Arc::new(egress)
            .client_builder()
            .connect_timeout(crate::store::egress::CONNECT_TIMEOUT)
            .timeout(crate::store::egress::REQUEST_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot build the HTTP client of virtual chunks: {e}"))?;
        Ok(GuardedFetcher { client })
    }
}

fn fetch_error(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> VirtualReferenceError {
    VirtualReferenceError::capture(VirtualReferenceErrorKind::FetchError(e.into()))
}

#[async_trait]
impl HttpVirtualChunkFetcher for GuardedFetcher {
    async fn fetch(
        &self,
        url: &str,
        range: &Range<u64>,
        _checksum: Option<&Checksum>,
        config: &HttpConfig,
        user_agent: &str,
    ) -> Result<HttpVirtualChunkResponse, VirtualReferenceError> {
        let want = range.end.checked_sub(range.start).filter(|&n| n > 0);
        let Some(want) = want else {
            return Ok(HttpVirtualChunkResponse {
                data: Default::default(),
                etag: None,
                last_modified: None,
            });
        };
        let mut req = self
            .client
            .get(url)
            .header(RANGE, format!("bytes={}-{}", range.start, range.end - 1))
            .header(reqwest::header::USER_AGENT, user_agent);
        // The repository's own static headers (an API key, say), as Icechunk sends them; never
        // one that would redirect the request itself.
        for (name, value) in &config.headers {
            let (Ok(name), Ok(value)) =
                (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value.as_str()))
            else {
                continue;
            };
            if name != reqwest::header::HOST {
                req = req.header(name, value);
            }
        }
        let resp = req.send().await.map_err(fetch_error)?;
        let status = resp.status();
        let whole = status == StatusCode::OK;
        if status != StatusCode::PARTIAL_CONTENT && !whole {
            return Err(fetch_error(format!("{url}: HTTP {status}")));
        }
        let etag = resp.headers().get(ETAG).and_then(|v| v.to_str().ok()).map(str::to_string);
        let last_modified = resp
            .headers()
            .get(LAST_MODIFIED)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v).ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| u32::try_from(d.as_secs()).ok());
        // A server that ignores ranges sends the whole file: read no further than the chunk's
        // end, so a large file is not held for one chunk.
        let (skip, limit) = if whole { (range.start, range.end) } else { (0, want) };
        let mut body = resp;
        let mut data = Vec::with_capacity(want.min(64 << 20) as usize);
        let mut at = 0u64;
        while at < limit {
            let Some(piece) = body.chunk().await.map_err(fetch_error)? else { break };
            let (from, to) = (at, at + piece.len() as u64);
            at = to;
            let lo = skip.max(from).min(to);
            let hi = limit.min(to);
            if lo < hi {
                data.extend_from_slice(&piece[(lo - from) as usize..(hi - from) as usize]);
            }
        }
        Ok(HttpVirtualChunkResponse { data: data.into(), etag, last_modified })
    }
}
