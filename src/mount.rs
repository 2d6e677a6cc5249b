//! Putting a mount together: open the store for SOURCE, wrap it in the chosen view, build the
//! filesystem and serve it.

use std::sync::Arc;

use crate::cli::MountConfig;
use crate::daemon::Readiness;
use crate::fs::namespace::{Namespace, RawNamespace};
use crate::fs::{FsConfig, ZarrFs};
use crate::fuse::session::{serve, SessionError, SessionOptions};
use crate::source::{Location, Source};
use crate::store::local::LocalStore;
use crate::store::Store;
use crate::view::ViewKind;

fn open_store(source: &Source) -> Result<Arc<dyn Store>, SessionError> {
    match source {
        Source::Directory(Location::Local(p)) => LocalStore::open(p)
            .map(|s| Arc::new(s) as Arc<dyn Store>)
            .map_err(|e| SessionError(format!("cannot open {}: {e}", p.display()))),
        other => Err(SessionError(format!("{other:?} is not supported yet"))),
    }
}

fn build_namespace(view: ViewKind, store: Arc<dyn Store>, ttl: std::time::Duration) -> Arc<dyn Namespace> {
    let raw = RawNamespace::new(store);
    match view {
        ViewKind::Raw => Arc::new(raw),
        ViewKind::Unsharded => Arc::new(crate::fs::unsharded::UnshardedNamespace::new(raw, ttl)),
        ViewKind::Decoded | ViewKind::V2 => unreachable!("rejected by cli::validate"),
    }
}

pub fn run(cfg: MountConfig, mut readiness: Readiness) -> Result<(), SessionError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("zarr-mount-io")
        .build()
        .map_err(|e| SessionError(format!("cannot start the runtime: {e}")))?;
    let store = match open_store(&cfg.source) {
        Ok(s) => s,
        Err(e) => {
            readiness.failed(&e.0);
            return Err(e);
        }
    };
    let fs_name = store.describe();
    let ns = {
        let _guard = rt.enter();
        build_namespace(cfg.view, store, cfg.metadata_ttl)
    };
    let fs = Arc::new(ZarrFs::new(ns, FsConfig { metadata_ttl: cfg.metadata_ttl, read_only: cfg.read_only }));
    let opts = SessionOptions {
        mountpoint: cfg.mountpoint.clone(),
        fs_name,
        read_only: cfg.read_only,
        allow_other: cfg.allow_other,
        uid: cfg.uid,
        gid: cfg.gid,
        threads: cfg.fuse_threads,
    };
    let log_file = cfg.log_file.clone();
    let result = serve(&rt, fs, &opts, || {
        if readiness.is_daemon() {
            readiness.ready();
            crate::daemon::detach_stdio(log_file.as_deref());
        }
    });
    if let Err(e) = &result {
        readiness.failed(&e.0);
    }
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    result
}
