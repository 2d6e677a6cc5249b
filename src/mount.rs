//! Putting a mount together: open the store for SOURCE, wrap it in the chosen view, build the
//! filesystem and serve it.

use std::sync::Arc;

use crate::cli::MountConfig;
use crate::daemon::Readiness;
use crate::fs::namespace::{Namespace, RawNamespace};
use crate::fs::{FsConfig, ZarrFs};
use crate::fuse::session::{serve, SessionError, SessionOptions};
use crate::source::{Location, Source};
use crate::store::cache::{CacheConfig, CachingStore};
use crate::store::local::LocalStore;
use crate::store::object::ObjectStoreBackend;
use crate::store::Store;
use crate::view::ViewKind;

fn open_store(cfg: &MountConfig) -> Result<Arc<dyn Store>, SessionError> {
    match &cfg.source {
        Source::Directory(Location::Local(p)) => LocalStore::open(p)
            .map(|s| Arc::new(s) as Arc<dyn Store>)
            .map_err(|e| SessionError(format!("cannot open {}: {e}", p.display()))),
        // Object stores: the backend, behind a cache of small objects.
        Source::Directory(Location::Remote { cloud, url }) => {
            let backend = ObjectStoreBackend::open(*cloud, url, &cfg.remote)
                .map_err(|e| SessionError(format!("cannot open {}: {e}", crate::store::object::display_url(url))))?;
            let backend: Arc<dyn Store> = Arc::new(backend);
            if cfg.cache_size == 0 {
                return Ok(backend);
            }
            let cache = CacheConfig {
                capacity: cfg.cache_size,
                object_limit: crate::store::cache::DEFAULT_OBJECT_LIMIT,
                ttl: cfg.metadata_ttl,
            };
            Ok(Arc::new(CachingStore::new(backend, cache)))
        }
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
    let store = match rt.block_on(async { open_store(&cfg) }) {
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
