//! `--metrics-addr`: a small HTTP/1 server (hyper) on the mount's tokio runtime that answers
//! `GET /metrics` with every series in the Prometheus text format, or in OpenMetrics when the
//! scraper's `Accept` header asks for `application/openmetrics-text`. Anything else is 404
//! (or 405 for another method on `/metrics`).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Content type of the Prometheus text exposition format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Called before each scrape to bring gauges read from the filesystem up to date.
pub type Refresh = Arc<dyn Fn() + Send + Sync>;

/// `--metrics-addr` as given -> the address to bind: a bare port (`9464` or `:9464`) means
/// the loopback interface; `HOST:PORT` (`0.0.0.0:9464`, `[::1]:9464`, `localhost:9464`) is
/// taken as it is.
pub fn parse_addr(s: &str) -> Result<String, String> {
    let t = s.trim();
    let port_only = t.strip_prefix(':').unwrap_or(t);
    if !port_only.is_empty() && port_only.bytes().all(|b| b.is_ascii_digit()) {
        let port: u16 =
            port_only.parse().map_err(|_| format!("{s:?}: the port must be 1-65535"))?;
        return Ok(format!("127.0.0.1:{port}"));
    }
    let (host, port) =
        t.rsplit_once(':').ok_or_else(|| format!("{s:?}: expected HOST:PORT or PORT"))?;
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("{s:?}: expected HOST:PORT or PORT (e.g. 127.0.0.1:9464)"));
    }
    Ok(t.to_string())
}

/// Bind the listening socket (before the mount, so a taken port fails the start).
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serve scrapes on `listener` until the runtime ends.
pub async fn serve(listener: TcpListener, refresh: Refresh) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let refresh = refresh.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let refresh = refresh.clone();
                async move { Ok::<_, Infallible>(answer(&req, &refresh)) }
            });
            if let Err(e) =
                http1::Builder::new().serve_connection(TokioIo::new(stream), service).await
            {
                tracing::debug!(error = %e, "metrics: connection ended with an error");
            }
        });
    }
}

fn answer(req: &Request<Incoming>, refresh: &Refresh) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        Response::builder()
            .status(status)
            .header(hyper::header::CONTENT_TYPE, content_type)
            .body(Full::new(Bytes::from(body)))
            .expect("a valid response")
    };
    if req.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, "text/plain", "not found: try /metrics\n".into());
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "use GET\n".into());
    }
    refresh();
    if wants_openmetrics(req) {
        let body = super::openmetrics::encode(super::global().gather());
        return reply(StatusCode::OK, super::openmetrics::CONTENT_TYPE, body);
    }
    let body = super::global().encode_text();
    reply(StatusCode::OK, TEXT_FORMAT, body)
}

/// Whether the scraper accepts OpenMetrics (Prometheus lists it first when it does).
fn wants_openmetrics(req: &Request<Incoming>) -> bool {
    req.headers()
        .get_all(hyper::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_to_loopback() {
        assert_eq!(parse_addr("9464").unwrap(), "127.0.0.1:9464");
        assert_eq!(parse_addr(":9464").unwrap(), "127.0.0.1:9464");
        assert_eq!(parse_addr("0.0.0.0:9464").unwrap(), "0.0.0.0:9464");
        assert_eq!(parse_addr("[::1]:9464").unwrap(), "[::1]:9464");
        assert_eq!(parse_addr("localhost:1").unwrap(), "localhost:1");
        for bad in ["", "host", "host:", ":", "host:99999", "99999", "1.2.3.4:x"] {
            assert!(parse_addr(bad).is_err(), "{bad:?} accepted");
        }
    }
}
