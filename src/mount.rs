//! Putting a mount together: open the store for SOURCE, wrap it in the chosen view, build the
//! filesystem and serve it.

use std::sync::Arc;

use crate::cli::MountConfig;
use crate::daemon::Readiness;
use crate::fs::{FsConfig, ZarrFs};
use crate::fuse::session::{serve, SessionError, SessionOptions};
use crate::prefetch::documents::fetch_documents;
use crate::source::{Cloud, Location, Source};
use crate::store::backends::http::{KeyTree, TreeSource};
use crate::store::backends::local::LocalStore;
use crate::store::backends::object::{ObjectStoreBackend, Reached};
use crate::store::backends::zip::ZipStore;
use crate::store::layers::cache::{CacheConfig, CachingStore};
use crate::store::layers::metered::MeteredStore;
use crate::store::Store;
use crate::store::StoreHints;
use crate::views::shared::namespace::Namespace;
use crate::views::ViewOptions;
use crate::zarr::consolidated;

/// Set when the store could not be reached, was refused or does not exist at mount time
/// (the endpoint, the credentials or the bucket are wrong): the exit code is then 2, like a
/// bad argument, not 1.
static SOURCE_REFUSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Did the mount fail because the source is wrong (see `SOURCE_REFUSED`)?
pub fn source_refused() -> bool {
    SOURCE_REFUSED.load(std::sync::atomic::Ordering::SeqCst)
}

pub(crate) async fn open_store(cfg: &MountConfig) -> Result<Arc<dyn Store>, SessionError> {
    match &cfg.source {
        Source::Directory(location) => open_directory(location, cfg, true).await,
        Source::Zip(location) => {
            // The archive is one object in a directory store (local or remote).
            let (parent, name) = split_archive_location(location)?;
            let backing = open_directory(&parent, cfg, false).await?;
            let zip =
                ZipStore::open(backing, &name).await.map_err(|e| SessionError(e.to_string()))?;
            tracing::info!(archive = %zip.describe(), entries = zip.len(), "zip archive opened");
            Ok(Arc::new(zip))
        }
        Source::Reference(location) => {
            // The reference file and the target stores are opened like a directory SOURCE of
            // their location (same options), but without an object cache of their own: the
            // cache sits above the reference store, keyed by chunk file, so a referenced range
            // is fetched once, whole, by one ranged read, and a target file (say a 5 MB NetCDF)
            // is never downloaded whole for one chunk. --cache-size bounds it as usual.
            let mut target_cfg = cfg.clone();
            target_cfg.cache_size = 0;
            // One disk cache per --cache-dir: it stays with the mount's own backend.
            target_cfg.disk_cache = None;
            // An http(s) target on an internal host needs authorizing, unless it is on the
            // reference file's own origin (store/egress.rs).
            let own = match location {
                Location::Remote { url, .. } => Some(url.clone()),
                Location::Local(_) => None,
            };
            // Their redirects and resolved addresses obey the same rule.
            target_cfg.remote.egress = Some(Arc::new(crate::store::egress::Egress {
                authorized: cfg.authorize_virtual.clone(),
                own: own.clone(),
            }));
            let opener: crate::store::backends::reference::TargetOpener = Arc::new(move |loc| {
                if let Location::Remote { cloud: Cloud::Http, url } = loc {
                    crate::store::egress::check_http_target(
                        url,
                        &target_cfg.authorize_virtual,
                        own.as_deref(),
                    )?;
                }
                directory_store(loc, &target_cfg).map_err(|e| e.0)
            });
            let authorize = &cfg.authorize_virtual;
            let refs = crate::store::backends::reference::ReferenceStore::open(
                location, opener, authorize,
            )
            .await
            .map_err(|e| SessionError(e.to_string()))?;
            Ok(with_object_cache(Arc::new(refs), cfg))
        }
        Source::Icechunk(location) => {
            use crate::store::backends::icechunk::{IcechunkOptions, IcechunkStore};
            let opts = IcechunkOptions {
                reference: cfg.icechunk_ref.clone(),
                ttl: cfg.metadata_ttl,
                authorize: cfg.authorize_virtual.clone(),
            };
            // A missing repository or ref is a wrong SOURCE: one line, exit code 2.
            let store = IcechunkStore::open(location, &cfg.remote, &opts).await.map_err(|e| {
                SOURCE_REFUSED.store(true, std::sync::atomic::Ordering::SeqCst);
                SessionError(format!("cannot mount {e}"))
            })?;
            Ok(with_object_cache(Arc::new(MeteredStore::new(Arc::new(store))), cfg))
        }
    }
}

/// A directory store: a local directory, or an object-store prefix behind a small-object cache.
/// An object store is first asked one cheap request, so that a wrong endpoint, wrong
/// credentials or a missing bucket fail the mount with one line (exit 2). With `mounted`
/// (the directory is what the mount shows, not an archive's folder), the root's metadata
/// documents are fetched beside that request.
async fn open_directory(
    location: &Location,
    cfg: &MountConfig,
    mounted: bool,
) -> Result<Arc<dyn Store>, SessionError> {
    let Location::Remote { cloud, url } = location else {
        if let Location::Local(dir) = location {
            if mounted && std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none()) {
                warn_empty(&dir.display().to_string());
            }
        }
        return directory_store(location, cfg);
    };
    // A store that cannot be built (an option's value, a credentials file object_store cannot
    // read) is a wrong source too: exit 2.
    let backend = Arc::new(open_object_store(*cloud, url, cfg).inspect_err(|_| {
        SOURCE_REFUSED.store(true, std::sync::atomic::Ordering::SeqCst);
    })?);
    // A disk cache whose store answered a listing of the root within the TTL vouches for it
    // (a remount with a warm cache sends no request before the first read it cannot serve).
    let vouched = cfg.disk_cache.as_ref().is_some_and(|d| {
        let identity = crate::store::StoreHints::describe(&*backend);
        crate::store::layers::disk_cache::vouches_for(d, &identity, d.trust(cfg.metadata_ttl))
    });
    // The layers (a --cache-dir among them) open before the check, for the fetch below; a
    // wrong source is still the error reported first.
    let store =
        backend_layers(backend.clone(), *cloud, url, cfg).map(|l| with_object_cache(l, cfg));
    // The check's round trip also brings the root's metadata documents (or their absence)
    // into the caches: a reader that opens the mounted array or group first finds them there.
    let fetch = mounted && !vouched && fetches_documents(cfg);
    let documents = match &store {
        Ok(store) if fetch => Some(tokio::spawn(fetch_documents(store.clone(), String::new()))),
        _ => None,
    };
    let checked = match cloud {
        _ if vouched => Ok(Reached::Keys),
        crate::source::Cloud::Http => {
            crate::store::backends::http::check(url).await.map(|()| Reached::Unknown)
        }
        _ => backend.check().await,
    };
    if mounted && checked == Ok(Reached::Empty) {
        warn_empty(&crate::store::backends::object::display_url(url));
    }
    if let Err(why) = checked {
        documents.inspect(|task| task.abort());
        SOURCE_REFUSED.store(true, std::sync::atomic::Ordering::SeqCst);
        let url = crate::store::backends::object::display_url(url);
        return Err(SessionError(format!("cannot mount {url}: {why}")));
    }
    store
}

/// A source with no key below it still mounts (a writer may be about to fill it), but is
/// often a mistyped prefix: one warning line (on the terminal while a daemon starts, and in
/// the log).
fn warn_empty(source: &str) {
    tracing::warn!("{source} has no key below it: the mount shows an empty directory");
}

/// [`open_directory`] without the start-up check, for stores opened on first use (the targets
/// of a reference store), where a failure is an EIO on the files that need them.
fn directory_store(location: &Location, cfg: &MountConfig) -> Result<Arc<dyn Store>, SessionError> {
    match location {
        Location::Local(p) => LocalStore::open(p)
            .map(|s| Arc::new(MeteredStore::new(Arc::new(s))) as Arc<dyn Store>)
            .map_err(|e| SessionError(format!("cannot open {}: {e}", p.display()))),
        Location::Remote { cloud, url } => {
            let backend = Arc::new(open_object_store(*cloud, url, cfg)?);
            Ok(with_object_cache(backend_layers(backend, *cloud, url, cfg)?, cfg))
        }
    }
}

fn open_object_store(
    cloud: crate::source::Cloud,
    url: &str,
    cfg: &MountConfig,
) -> Result<ObjectStoreBackend, SessionError> {
    ObjectStoreBackend::open(cloud, url, &cfg.remote).map_err(|e| {
        SessionError(format!(
            "cannot open {}: {e}",
            crate::store::backends::object::display_url(url)
        ))
    })
}

/// The backend behind the metering layer: the backend series of `/metrics` count what the
/// backend itself is asked, below every cache. Plain HTTP gets the lookups and listings of
/// static hosting (store/backends/http.rs) on top of the backend.
fn metered(
    backend: Arc<ObjectStoreBackend>,
    cloud: crate::source::Cloud,
    url: &str,
) -> Result<Arc<dyn Store>, SessionError> {
    let store: Arc<dyn Store> = match cloud {
        crate::source::Cloud::Http => {
            let tree = Some(CONSOLIDATED_TREE);
            let egress = backend.egress();
            let http = crate::store::backends::http::HttpStore::new(backend, url, tree, egress)
                .map_err(|e| SessionError(e.to_string()))?;
            Arc::new(http)
        }
        _ => backend,
    };
    Ok(Arc::new(MeteredStore::new(store)))
}

/// The tree a static HTTP store reads from consolidated metadata instead of listing the
/// server: wired here because the store may not know Zarr and the format may not know stores.
const CONSOLIDATED_TREE: TreeSource = TreeSource {
    documents: &consolidated::ROOT_DOCUMENTS,
    parse: |key, doc| match consolidated::parse_document(key, doc) {
        Ok(Some(h)) => Ok(Some(Arc::new(h) as Arc<dyn KeyTree>)),
        Ok(None) => Ok(None),
        Err(e) => Err(e.to_string()),
    },
    markers: &["zarr.json", ".zgroup", ".zarray"],
};

impl KeyTree for consolidated::Hierarchy {
    fn is_dir(&self, key: &str) -> bool {
        consolidated::Hierarchy::is_dir(self, key)
    }
    fn children(&self, dir: &str) -> Option<consolidated::Children> {
        consolidated::Hierarchy::children(self, dir)
    }
}

/// `store` behind the small-object memory cache (`--cache-size`; 0 disables it).
fn with_object_cache(store: Arc<dyn Store>, cfg: &MountConfig) -> Arc<dyn Store> {
    if cfg.cache_size == 0 {
        return store;
    }
    let cache = CacheConfig {
        capacity: cfg.cache_size,
        object_limit: crate::store::layers::cache::DEFAULT_OBJECT_LIMIT,
        ttl: cfg.metadata_ttl,
    };
    CachingStore::new(store, cache)
}

/// The `backend` label of `build_info`: where the bytes are, and `+zip` for an archive.
pub(crate) fn backend_kind(source: &Source) -> String {
    use crate::source::Cloud;
    let place = match source.location() {
        Location::Local(_) => "local",
        Location::Remote { cloud: Cloud::S3, .. } => "s3",
        Location::Remote { cloud: Cloud::Gcs, .. } => "gcs",
        Location::Remote { cloud: Cloud::Azure, .. } => "azure",
        Location::Remote { cloud: Cloud::Http, .. } => "http",
    };
    match source {
        Source::Zip(_) => format!("{place}+zip"),
        Source::Directory(_) => place.to_string(),
        Source::Reference(_) => format!("{place}+reference"),
        Source::Icechunk(_) => format!("{place}+icechunk"),
    }
}

/// The layers below the memory cache: metering (the backend series count what the backend
/// itself is asked) and, with `--cache-dir`, the disk cache.
fn backend_layers(
    backend: Arc<ObjectStoreBackend>,
    cloud: crate::source::Cloud,
    url: &str,
    cfg: &MountConfig,
) -> Result<Arc<dyn Store>, SessionError> {
    let store = metered(backend, cloud, url)?;
    match &cfg.disk_cache {
        Some(disk) => open_disk_cache(store, disk, cfg),
        None => Ok(store),
    }
}

/// `--cache-dir`: the persistent block cache, between the backend and the memory cache (so
/// shard indexes and whole small objects read through any view land in it too).
fn open_disk_cache(
    backend: Arc<dyn Store>,
    disk: &crate::store::layers::disk_cache::DiskCacheOptions,
    cfg: &MountConfig,
) -> Result<Arc<dyn Store>, SessionError> {
    use crate::store::layers::disk_cache::{
        DiskCache, DiskCacheConfig, DiskCacheStore, BLOCK_SIZE, COPY_MAX,
    };
    let dcfg = DiskCacheConfig {
        max_bytes: disk.max_bytes,
        block_size: BLOCK_SIZE,
        copy_max: COPY_MAX,
        ttl: disk.trust(cfg.metadata_ttl),
    };
    let store = DiskCacheStore::open(backend, disk.lock.clone(), dcfg)
        .map_err(|e| SessionError(format!("--cache-dir {}: {e}", disk.lock.dir().display())))?
        .with_next_dirs(crate::prefetch::next_directories::next_directories);
    Ok(Arc::new(DiskCache(Arc::new(store))))
}

/// `dir/data.zip` -> (`dir`, `data.zip`), for paths and URLs alike.
fn split_archive_location(location: &Location) -> Result<(Location, String), SessionError> {
    match location {
        Location::Local(p) => {
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| SessionError(format!("{}: not a file name", p.display())))?;
            let parent = p.parent().map(|d| d.to_path_buf()).unwrap_or_else(|| ".".into());
            Ok((Location::Local(parent), name.to_string()))
        }
        Location::Remote { cloud, url } => {
            let clean = url.split(['?', '#']).next().unwrap_or(url).trim_end_matches('/');
            let (parent, name) = clean
                .rsplit_once('/')
                .ok_or_else(|| SessionError(format!("{url}: no archive name")))?;
            if parent.ends_with(':') || parent.ends_with(":/") {
                return Err(SessionError(format!(
                    "{url}: the archive must be an object inside a bucket"
                )));
            }
            Ok((Location::Remote { cloud: *cloud, url: parent.to_string() }, name.to_string()))
        }
    }
}

/// Whether the mount fetches Zarr metadata documents ahead (`prefetch::documents`):
/// the root's at start and a `*.zarr` directory's at its lookup. Only where a document's
/// lookup is one GET (object stores; plain HTTP pays a HEAD and probes) and where the memory
/// cache keeps the answers for a while (a cache, a TTL above zero).
fn fetches_documents(cfg: &MountConfig) -> bool {
    let object_store = matches!(
        &cfg.source,
        Source::Directory(Location::Remote { cloud, .. }) if *cloud != Cloud::Http
    );
    object_store && cfg.cache_size > 0 && !cfg.metadata_ttl.is_zero()
}

pub(crate) fn build_namespace(cfg: &MountConfig, store: Arc<dyn Store>) -> Arc<dyn Namespace> {
    let opts = ViewOptions {
        metadata_ttl: cfg.metadata_ttl,
        array_prefetch: cfg.array_prefetch,
        document_fetch: fetches_documents(cfg),
        cache_size: cfg.cache_size,
        v2_ome: cfg.v2_ome,
    };
    crate::views::build(cfg.view, store, &opts)
}

pub fn run(cfg: MountConfig, mut readiness: Readiness) -> Result<(), SessionError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("zarr-mount-io")
        .build()
        .map_err(|e| SessionError(format!("cannot start the runtime: {e}")))?;
    // Bound before anything else, so a port already taken fails the start, not the scrape.
    let metrics_listener = match &cfg.metrics_addr {
        Some(addr) => match rt.block_on(crate::metrics::server::bind(addr)) {
            Ok(l) => Some(l),
            Err(e) => {
                let e = SessionError(format!("--metrics-addr {addr}: cannot listen: {e}"));
                readiness.failed(&e.0);
                return Err(e);
            }
        },
        None => None,
    };
    if let Err(e) = rt.block_on(async { crate::clock::install_test_hook() }) {
        let e = SessionError(e);
        readiness.failed(&e.0);
        return Err(e);
    }
    crate::metrics::global().set_build_info(cfg.view.name(), &backend_kind(&cfg.source));
    let store = match rt.block_on(open_store(&cfg)) {
        Ok(s) => s,
        Err(e) => {
            if source_refused() {
                readiness.refused(&e.0);
            } else {
                readiness.failed(&e.0);
            }
            return Err(e);
        }
    };
    let described = store.describe();
    let ns = {
        let _guard = rt.enter();
        build_namespace(&cfg, store)
    };
    let spill = crate::fs::write::spill::Spill::new(cfg.spill.clone());
    if !cfg.read_only {
        if let Err(e) = spill.check() {
            let e = SessionError(format!("--spill-dir {}: {e}", cfg.spill.dir.display()));
            readiness.failed(&e.0);
            return Err(e);
        }
    }
    let fs = Arc::new(
        ZarrFs::new(
            ns,
            FsConfig {
                metadata_ttl: cfg.metadata_ttl,
                read_only: cfg.read_only,
                passthrough: cfg.read_only && cfg.disk_cache.is_some(),
                perms: cfg.perms,
            },
        )
        .with_spill(spill)
        .with_metadata_cache_entries(cfg.metadata_cache_entries),
    );
    if let Some(listener) = metrics_listener {
        let fs = fs.clone();
        let refresh: crate::metrics::server::Refresh = Arc::new(move || {
            let g = fs.gauges();
            let m = crate::metrics::global();
            m.open_handles.set(g.open_handles as i64);
            m.known_inodes.set(g.known_inodes as i64);
            m.writeback_pending_buffers.set(g.write_buffers as i64);
            m.writeback_pending_bytes.set(g.buffer_bytes as i64);
        });
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "serving metrics at http://{addr}/metrics");
        }
        rt.spawn(crate::metrics::server::serve(listener, refresh));
    }
    let opts = SessionOptions {
        mountpoint: cfg.mountpoint.clone(),
        fs_name: cfg.source_text.clone(),
        read_only: cfg.read_only,
        allow_other: cfg.allow_other,
        threads: cfg.fuse_threads,
        read_ahead: cfg.read_ahead,
    };
    let log_file = cfg.log_file.clone();
    let started = std::time::Instant::now();
    let status = format!("mounted {described} on {}", cfg.mountpoint.display());
    if cfg.stats_interval > 0 {
        rt.spawn(log_stats(cfg.stats_interval, started, status.clone()));
    }
    let result = serve(&rt, fs, &opts, || {
        // READY=1 only now: the kernel has the mount, so dependent units can use it.
        crate::fuse::notify::ready(&status);
        if readiness.is_daemon() {
            readiness.ready();
            crate::daemon::detach_stdio(log_file.as_deref());
        }
    });
    if cfg.stats_interval > 0 {
        crate::stats::snapshot().log(started.elapsed().as_secs());
    }
    if let Err(e) = &result {
        readiness.failed(&e.0);
    }
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    result
}

/// `--stats-interval`: one INFO line of counters every `secs` seconds (and the same summary in
/// systemd's STATUS= line when run as a service).
pub(crate) async fn log_stats(secs: u64, started: std::time::Instant, status: String) {
    let mut every = tokio::time::interval(std::time::Duration::from_secs(secs));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await; // the first tick is immediate
    loop {
        every.tick().await;
        let snap = crate::stats::snapshot();
        snap.log(started.elapsed().as_secs());
        crate::fuse::notify::status(&format!("{status}; {}", snap.summary()));
    }
}
