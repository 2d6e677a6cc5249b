//! `zarr-mount serve`: open the store stack once (one disk cache, one memory cache), build one
//! filesystem per served view with the code that builds a mount's, bind the listener, say
//! ready (a line on stdout, systemd's READY=1) and serve until SIGTERM or SIGINT.

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::cli::MountConfig;
use crate::fs::{FsConfig, ZarrFs};
use crate::fuse::notify;
use crate::fuse::session::SessionError;
use crate::mount::{backend_kind, build_namespace, open_store};
use crate::serve::handler::Served;
use crate::serve::ServeConfig;

/// Serve until a signal; an error is one line (`mount::source_refused` tells a wrong SOURCE).
pub fn run(cfg: MountConfig, serve: ServeConfig) -> Result<(), SessionError> {
    // This runtime opens the store and runs signals, metrics and stats; requests are answered
    // on the HTTP threads' own runtimes (`serve::fronts`).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("zarr-mount-serve")
        .build()
        .map_err(|e| SessionError(format!("cannot start the runtime: {e}")))?;
    let result = rt.block_on(serve_views(cfg, serve));
    if let Err(e) = &result {
        notify::stopping(&e.0);
    }
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    crate::serve::access_lines::flush_global();
    result
}

async fn serve_views(cfg: MountConfig, serve: ServeConfig) -> Result<(), SessionError> {
    // Bound before the store opens, so a taken port fails the start at once.
    let listener = crate::serve::server::bind(serve.listen)
        .map_err(|e| SessionError(format!("--listen {}: cannot listen: {e}", serve.listen)))?;
    let metrics = match &cfg.metrics_addr {
        Some(addr) => Some(
            crate::metrics::server::bind(addr)
                .await
                .map_err(|e| SessionError(format!("--metrics-addr {addr}: cannot listen: {e}")))?,
        ),
        None => None,
    };
    crate::clock::install_test_hook().map_err(SessionError)?;
    crate::metrics::global().set_build_info("serve", &backend_kind(&cfg.source));
    let store = open_store(&cfg).await?;
    let described = store.describe();
    // One filesystem per view over the one store stack: the views share its caches.
    let views: Vec<(crate::views::ViewKind, Arc<ZarrFs>)> = serve
        .views
        .iter()
        .map(|&view| {
            let view_cfg = MountConfig { view, ..cfg.clone() };
            let ns = build_namespace(&view_cfg, store.clone());
            let fs_cfg = FsConfig {
                metadata_ttl: cfg.metadata_ttl,
                read_only: true,
                passthrough: false,
                perms: cfg.perms,
            };
            let fs =
                ZarrFs::new(ns, fs_cfg).with_metadata_cache_entries(cfg.metadata_cache_entries);
            (view, Arc::new(fs))
        })
        .collect();
    if let Some(listener) = metrics {
        let fss: Vec<Arc<ZarrFs>> = views.iter().map(|(_, fs)| fs.clone()).collect();
        let refresh: crate::metrics::server::Refresh = Arc::new(move || {
            let m = crate::metrics::global();
            let (handles, inodes) = fss
                .iter()
                .map(|fs| fs.gauges())
                .fold((0, 0), |(h, i), g| (h + g.open_handles, i + g.known_inodes));
            m.open_handles.set(handles as i64);
            m.known_inodes.set(inodes as i64);
        });
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "serving metrics at http://{addr}/metrics");
        }
        tokio::spawn(crate::metrics::server::serve(listener, refresh));
    }
    let backend = Arc::new(Semaphore::new(serve.limits.backend_requests));
    let served = Arc::new(Served::new(views, serve.access.clone(), backend));
    let local = listener.local_addr().map_err(|e| SessionError(format!("--listen: {e}")))?;
    let scheme = if serve.tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{local}/");
    let names: Vec<&str> = serve.views.iter().map(|v| v.name()).collect();
    let status = format!("serving {described} at {url} ({})", names.join(", "));
    if cfg.stats_interval > 0 {
        tokio::spawn(crate::mount::log_stats(
            cfg.stats_interval,
            std::time::Instant::now(),
            status.clone(),
        ));
    }
    // The ready line: scripts and tests wait for it and read the address (with --listen
    // ADDR:0, the port the system chose) from it.
    println!("zarr-mount: {status}");
    tracing::info!("{status}");
    notify::ready(&status);
    let tls = serve.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let threads = serve.http_threads;
    crate::serve::fronts::run(listener, threads, served, tls, serve.limits.clone(), stop_signal())
        .await
        .map_err(|e| SessionError(format!("cannot start the HTTP threads: {e}")))?;
    notify::stopping("stopping");
    crate::serve::access_lines::flush_global(); // the last requests' lines before this one
    tracing::info!("signal received: stopped serving");
    Ok(())
}

/// SIGTERM or SIGINT.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        tracing::warn!("cannot install signal handlers: serving until killed");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
