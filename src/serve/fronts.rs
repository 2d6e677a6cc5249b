//! The threads that answer HTTP: `--http-threads` of them, each a single-threaded tokio
//! runtime taking connections from the one listener and keeping each connection, and the
//! store work its requests start, on itself. A work-stealing runtime hands tasks between its
//! workers, and each hand-over wakes a thread: measured, that doubled the user-space CPU of a
//! small request (about 12 µs against 6) and made the threads' futex calls the costliest part
//! of the kernel's share after the socket itself. nginx's worker processes are the same
//! model. The listener is shared, not one per thread (`SO_REUSEPORT` would hash connections
//! onto threads whatever their load): the first idle thread accepts, and gives the
//! connection to the thread with the fewest open (`spread`).
//!
//! Everything a request reaches (the views, the store stack and its caches) is shared by all
//! threads; a task a request spawns (a read-ahead, a background fill) runs on that request's
//! thread. A blocking call (a disk read that would wait) goes to that runtime's blocking pool.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;

use super::handler::Served;
use super::spread::{Front, Spread};
use super::Limits;

/// Serve `listener` on `threads` threads until `stop` completes, then let each drain its
/// connections (`Limits::drain`). An error is a thread or runtime that could not be started.
pub async fn run(
    listener: tokio::net::TcpListener,
    threads: usize,
    served: Arc<Served>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    stop: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let listener = listener.into_std()?;
    listener.set_nonblocking(true)?; // as tokio's listeners need it
    let (stopping, stopped) = watch::channel(false);
    // One connection bound for all threads: `server::run` takes permits from it.
    let connections = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let mut started = Vec::with_capacity(threads);
    for (i, front) in Spread::fronts(threads).into_iter().enumerate() {
        let thread = (|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name(format!("zarr-mount-http-{i}"))
                .max_blocking_threads(blocking_threads(threads))
                .build()?;
            let listener = listener.try_clone()?;
            let (served, tls, limits) = (served.clone(), tls.clone(), limits.clone());
            let (connections, stopped) = (connections.clone(), stopped.clone());
            std::thread::Builder::new().name(format!("zarr-mount-http-{i}")).spawn(move || {
                runtime.block_on(answer(listener, front, connections, served, tls, limits, stopped))
            })
        })();
        match thread {
            Ok(t) => started.push(t),
            Err(e) => {
                let _ = stopping.send(true);
                join(started).await;
                return Err(e);
            }
        }
    }
    stop.await;
    tracing::info!(
        "stopping: no new connections; the responses in flight get up to {:?}",
        limits.drain
    );
    let _ = stopping.send(true);
    join(started).await;
    Ok(())
}

/// Threads answering requests when `--http-threads` is not given: one per CPU this process
/// may use. `main` gives `serve` a malloc arena per HTTP thread by it, before parsing flags.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Threads of each HTTP thread's blocking pool (disk reads that would wait, cache files): the
/// one runtime before them had tokio's 512 in all, which the threads now share.
fn blocking_threads(threads: usize) -> usize {
    (TOTAL_BLOCKING_THREADS / threads.max(1)).max(8)
}

const TOTAL_BLOCKING_THREADS: usize = 512;

/// One thread's work: accept and answer until `stopped` says so.
async fn answer(
    listener: std::net::TcpListener,
    front: Front,
    connections: Arc<tokio::sync::Semaphore>,
    served: Arc<Served>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
    mut stopped: watch::Receiver<bool>,
) {
    // Registered with this thread's runtime, so that its readiness wakes this thread.
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "serve: an HTTP thread cannot listen");
            return;
        }
    };
    let stop = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    super::server::run(listener, front, connections, served, tls, &limits, stop).await;
}

/// Wait for the threads to end (each drains its connections first), off the caller's worker.
async fn join(threads: Vec<std::thread::JoinHandle<()>>) {
    let _ = tokio::task::spawn_blocking(move || {
        for t in threads {
            let _ = t.join();
        }
    })
    .await;
}
