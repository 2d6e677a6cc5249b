//! The server loop: accept connections (at most `--max-connections` at once), TLS when
//! configured, HTTP/1.1 with keep-alive or HTTP/2 as the client offers, and a watchdog that
//! closes a connection with no traffic either way for the idle timeout (an idle keep-alive
//! connection, or a client too slow to take its response).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::handler::Served;
use super::spread::{Front, Handed, Seat, Spread};
use super::Limits;

/// Connections the kernel queues for `accept` (capped by `net.core.somaxconn`). A burst of
/// clients connecting at once, while the workers are busy answering, must be queued: a
/// connection refused for a full queue costs its client a SYN retransmission, a second.
const BACKLOG: u32 = 1024;

/// A listener on `addr` with a `BACKLOG` queue (the standard library's is 128).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?; // as the standard library's bind: a restart reuses the port
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

/// Serve `listener` as the HTTP thread `front` until `stop` completes; then wait up to
/// `Limits::drain` for the connections in flight. `connections` holds
/// `Limits::max_connections` permits, shared by every thread that accepts from the same
/// listener. A connection this thread accepts is answered by the thread `front.spread` seats
/// it on; the connections other threads hand this one arrive through `front.handed`.
pub async fn run(
    listener: TcpListener,
    front: Front,
    connections: Arc<Semaphore>,
    served: Arc<Served>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: &Limits,
    stop: impl Future<Output = ()>,
) {
    tokio::pin!(stop);
    let Front { thread: me, spread, mut handed } = front;
    loop {
        // Cancel-safe: a permit taken but not used goes back, and `accept` loses nothing.
        let accept = async {
            let permit = connections.clone().acquire_owned().await.expect("never closed");
            (permit, listener.accept().await)
        };
        let taken = tokio::select! {
            _ = &mut stop => break,
            Some(h) = handed.recv() => match TcpStream::from_std(h.stream) {
                Ok(stream) => Taken { stream, client: h.client, permit: h.permit, seat: h.seat },
                Err(e) => {
                    tracing::warn!(error = %e, "serve: a handed connection cannot be registered");
                    continue;
                }
            },
            (permit, accepted) = accept => match accepted {
                Ok((stream, client)) => {
                    let seat = spread.seat(me);
                    if seat.thread() != me {
                        hand_over(&spread, stream, client, permit, seat);
                        continue;
                    }
                    Taken { stream, client, permit, seat }
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "serve: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (served, tls, limits) = (served.clone(), tls.clone(), limits.clone());
        tokio::spawn(async move {
            let Taken { stream, client, permit, seat } = taken;
            connection(stream, client, served, tls, &limits).await;
            drop((permit, seat));
        });
    }
    // Connections handed to this thread and not taken are closed unanswered, as are those
    // the kernel still queues: stopping takes no new connections.
    drop(handed);
    // Every permit back: no connection left on any thread (each thread waits its turn).
    let all = limits.max_connections as u32;
    let drained = tokio::time::timeout(limits.drain, connections.acquire_many(all)).await;
    if drained.is_err() {
        tracing::info!("serve: stopping with connections still open");
    }
}

/// Give a connection accepted here to the thread `seat` names. If that thread is stopping,
/// the connection is closed unanswered, as stopping takes no new connections.
fn hand_over(
    spread: &Spread,
    stream: TcpStream,
    client: SocketAddr,
    permit: OwnedSemaphorePermit,
    seat: Seat,
) {
    // Out of this runtime's reactor, to be registered with the other thread's.
    let stream = match stream.into_std() {
        Ok(s) => s,
        Err(e) => return tracing::warn!(%client, error = %e, "serve: cannot hand a connection"),
    };
    if spread.hand(Handed { stream, client, permit, seat }).is_err() {
        tracing::debug!(%client, "serve: closing a connection handed to a stopping thread");
    }
}

/// A connection this thread answers: its socket, client, connection permit and seat.
struct Taken {
    stream: TcpStream,
    client: SocketAddr,
    permit: OwnedSemaphorePermit,
    seat: Seat,
}

async fn connection(
    stream: TcpStream,
    client: SocketAddr,
    served: Arc<Served>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: &Limits,
) {
    let _ = stream.set_nodelay(true);
    let progress = Arc::new(Progress::new());
    let watched = Watched { inner: stream, progress: progress.clone() };
    let serve = async {
        match tls {
            Some(acceptor) => match acceptor.accept(watched).await {
                Ok(tls_stream) => http(tls_stream, client, served, limits).await,
                Err(e) => tracing::debug!(%client, error = %e, "TLS handshake failed"),
            },
            None => http(watched, client, served, limits).await,
        }
    };
    tokio::select! {
        _ = serve => {}
        _ = progress.stalled(limits.idle_timeout) => {
            tracing::debug!(%client, "closing a connection idle for {:?}", limits.idle_timeout);
        }
    }
}

async fn http<S>(io: S, client: SocketAddr, served: Arc<Served>, limits: &Limits)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let served = served.clone();
        async move { Ok::<_, std::convert::Infallible>(served.answer(req, client).await) }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.h2_streams)
        .max_header_list_size(limits.max_header_bytes as u32);
    if let Err(e) = builder.serve_connection(TokioIo::new(io), service).await {
        tracing::debug!(%client, error = %e, "connection ended with an error");
    }
}

/// When a connection last moved a byte either way.
struct Progress {
    start: Instant,
    /// Milliseconds since `start` of the last byte read or written.
    last: AtomicU64,
}

impl Progress {
    fn new() -> Self {
        Progress { start: Instant::now(), last: AtomicU64::new(0) }
    }

    fn touch(&self) {
        self.last.store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Completes once no byte moved for `idle`.
    async fn stalled(&self, idle: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last.load(Ordering::Relaxed));
            let due = last + idle;
            if Instant::now() >= due {
                return;
            }
            tokio::time::sleep_until(due.into()).await;
        }
    }
}

/// A stream that notes each byte it moves in its `Progress`.
struct Watched<S> {
    inner: S,
    progress: Arc<Progress>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.progress.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.progress.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.progress.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// More clients than the standard library's queue of 128 connect before the first accept:
    /// every one is queued (a full queue would leave a client waiting a second for its SYN's
    /// retransmission).
    #[tokio::test]
    async fn a_burst_of_connections_is_queued_not_dropped() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let clients = tokio::task::spawn_blocking(move || {
            (0..300)
                .map(|_| std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)))
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .unwrap()
        .expect("every client connects while none is accepted yet");
        for _ in &clients {
            listener.accept().await.unwrap();
        }
    }
}
