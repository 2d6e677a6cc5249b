//! `zarr-mount serve`: every view of the store over HTTP, the second front door beside `fuse`.
//! Each served view is one `ZarrFs`, built by the code that builds a mount's, over one store
//! stack shared by all of them; a request walks it by path components as the kernel walks a
//! mount and reads through an open handle, so a path answers the bytes that the same path of
//! a mount of that view shows. Read-only: GET and HEAD (and CORS preflights).
//!
//! One job per file: `paths` (URLs -> views and names), `ranges` (Range and the conditional
//! headers), `listing` (directory pages), `media` (content types), `errors` (errors ->
//! statuses), `access` (token and CORS), `walk` (lookups and open files on a `ZarrFs`),
//! `walks` (recent walks kept for the metadata TTL), `body` (small bodies read whole, others
//! streamed), `access_log` (the log line and the HTTP series), `access_lines` (the log's
//! output, batched), `handler` (a request -> a response), `server` (connections), `fronts` (the
//! threads that answer), `spread` (which thread answers a connection), `tls` (certificates).

pub mod access;
pub mod access_lines;
pub mod access_log;
pub mod body;
pub mod errors;
pub mod fronts;
pub mod handler;
pub mod listing;
pub mod media;
pub mod paths;
pub mod ranges;
pub mod server;
pub mod spread;
pub mod tls;
pub mod walk;
pub mod walks;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::views::ViewKind;

/// Everything `serve` adds to a mount's configuration, validated.
#[derive(Clone)]
pub struct ServeConfig {
    pub listen: SocketAddr,
    /// The views to serve, each under `/<name>/`.
    pub views: Vec<ViewKind>,
    pub access: access::Access,
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    pub limits: Limits,
    /// Threads answering requests (`fronts`).
    pub http_threads: usize,
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("listen", &self.listen)
            .field("views", &self.views)
            .field("token", &self.access.token.as_ref().map(|_| "<set>"))
            .field("cors", &self.access.cors)
            .field("tls", &self.tls.is_some())
            .field("limits", &self.limits)
            .field("http_threads", &self.http_threads)
            .finish()
    }
}

/// Bounds on what clients may hold.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections served at once; more wait to be accepted.
    pub max_connections: usize,
    /// A connection with no byte moving either way for this long is closed.
    pub idle_timeout: Duration,
    /// The time a client has to send a request's headers.
    pub header_timeout: Duration,
    /// Bytes of a request's headers (HTTP/1 buffer, HTTP/2 header list).
    pub max_header_bytes: usize,
    /// Streams of one HTTP/2 connection at once.
    pub h2_streams: u32,
    /// Lookups, listings and reads in flight at once over all connections.
    pub backend_requests: usize,
    /// At shutdown, how long the connections in flight may take to finish.
    pub drain: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            idle_timeout: Duration::from_secs(60),
            header_timeout: Duration::from_secs(30),
            max_header_bytes: 64 << 10,
            h2_streams: 128,
            backend_requests: 64,
            drain: Duration::from_secs(5),
        }
    }
}
