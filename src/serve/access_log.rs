//! One access-log line per request (client, method, path, status, bytes, time; written by
//! `access_lines`) and the HTTP series of `/metrics`, both when the response body ends: a
//! streamed file's bytes and time are known only then.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use hyper::body::{Body as _, Frame, SizeHint};

use super::access_lines::{self, Line};
use super::body::Body;

/// What the line says of the request.
pub struct Request {
    pub client: SocketAddr,
    pub method: hyper::Method,
    pub path: String,
    /// The `view` label: the view's name, `index` or `none`.
    pub view: &'static str,
    pub started: Instant,
}

/// A response body that counts what it sends and writes the log line when dropped.
pub struct Logged {
    inner: Body,
    request: Request,
    status: u16,
    sent: u64,
    /// The body's Content-Length, if it has one.
    length: Option<u64>,
    failed: bool,
    ended: bool,
}

impl Logged {
    pub fn new(inner: Body, request: Request, status: u16, length: Option<u64>) -> Self {
        Logged { inner, request, status, sent: 0, length, failed: false, ended: false }
    }
}

impl hyper::body::Body for Logged {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                this.sent += frame.data_ref().map_or(0, |d| d.len() as u64);
            }
            Poll::Ready(Some(Err(_))) => this.failed = true,
            Poll::Ready(None) => this.ended = true,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        let r = &self.request;
        let elapsed = r.started.elapsed();
        // A body dropped before its end: the client left, or a read failed. hyper drops a body
        // without polling it to its end once it sent Content-Length bytes.
        let complete = !self.failed
            && (self.ended || self.inner.is_end_stream() || self.length == Some(self.sent));
        if let Some(lines) = access_lines::global() {
            let line = Line {
                client: r.client,
                method: r.method.as_str(),
                path: &r.path,
                status: self.status,
                bytes: self.sent,
                elapsed,
                complete,
            };
            lines.push(&line, std::time::SystemTime::now());
        }
        crate::metrics::global().http.observe(
            r.view,
            self.status,
            self.sent,
            elapsed.as_secs_f64(),
        );
    }
}
