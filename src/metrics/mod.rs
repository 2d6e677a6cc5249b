//! Process-wide metrics: one Prometheus registry (the `prometheus` crate) that every layer
//! counts into, served at `/metrics` by `--metrics-addr` (see `server`) and read back by the
//! `--stats-interval` log line (`crate::stats`), so the two can never disagree.
//!
//! The hot paths (a FUSE request, a backend request, a cache lookup) touch only children
//! resolved once at start-up: a counter bump is one relaxed atomic add and a histogram
//! observation two, with no lock and no label lookup. Labelled series that are resolved per
//! event (errors by errno) are on error paths only.

pub mod openmetrics;
pub mod server;

use std::cell::Cell;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

/// Every series name starts with this.
pub const PREFIX: &str = "zarr_mount";

/// FUSE operations, spelled out (the names of the `fuser::Filesystem` callbacks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Lookup,
    Getattr,
    Setattr,
    Open,
    Read,
    Write,
    Flush,
    Release,
    Fsync,
    Create,
    Mkdir,
    Unlink,
    Rmdir,
    Rename,
    Link,
    Opendir,
    Readdir,
    Readdirplus,
    Ioctl,
    Other,
}

impl Op {
    pub const ALL: [Op; 20] = [
        Op::Lookup,
        Op::Getattr,
        Op::Setattr,
        Op::Open,
        Op::Read,
        Op::Write,
        Op::Flush,
        Op::Release,
        Op::Fsync,
        Op::Create,
        Op::Mkdir,
        Op::Unlink,
        Op::Rmdir,
        Op::Rename,
        Op::Link,
        Op::Opendir,
        Op::Readdir,
        Op::Readdirplus,
        Op::Ioctl,
        Op::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Lookup => "lookup",
            Op::Getattr => "getattr",
            Op::Setattr => "setattr",
            Op::Open => "open",
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Release => "release",
            Op::Fsync => "fsync",
            Op::Create => "create",
            Op::Mkdir => "mkdir",
            Op::Unlink => "unlink",
            Op::Rmdir => "rmdir",
            Op::Rename => "rename",
            Op::Link => "link",
            Op::Opendir => "opendir",
            Op::Readdir => "readdir",
            Op::Readdirplus => "readdirplus",
            Op::Ioctl => "ioctl",
            Op::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Kinds of backend request (the `kind` label), one per `Store` data operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A whole object.
    Get,
    /// A byte range of an object (with its metadata).
    Range,
    Head,
    /// A conditional GET confirming a cached object (a 304 carries no body), or its fallback.
    Revalidate,
    /// Is a name an object, a directory, both? (a HEAD and/or a LIST on object stores)
    Lookup,
    List,
    Put,
    Delete,
    /// A rename (a server-side copy and a delete on object stores).
    Copy,
    /// Creating or removing an empty directory (local stores).
    Dir,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::Get,
        Kind::Range,
        Kind::Head,
        Kind::Revalidate,
        Kind::Lookup,
        Kind::List,
        Kind::Put,
        Kind::Delete,
        Kind::Copy,
        Kind::Dir,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Get => "get",
            Kind::Range => "range",
            Kind::Head => "head",
            Kind::Revalidate => "revalidate",
            Kind::Lookup => "lookup",
            Kind::List => "list",
            Kind::Put => "put",
            Kind::Delete => "delete",
            Kind::Copy => "copy",
            Kind::Dir => "dir",
        }
    }
}

/// The in-memory caches (the `cache` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKind {
    /// Small objects kept whole in front of a remote store (`store/layers/cache.rs`).
    Objects,
    /// Parsed shard indexes (`src/views/unsharded/shard_indexes.rs`).
    ShardIndex,
    /// Decoded chunks of the decoded and v2 views (`src/views/shared/decoded_cache.rs`).
    Decoded,
    /// Lookups, attributes and opens answered from the filesystem's metadata cache without
    /// leaving the FUSE thread.
    Metadata,
}

impl CacheKind {
    pub const ALL: [CacheKind; 4] =
        [CacheKind::Objects, CacheKind::ShardIndex, CacheKind::Decoded, CacheKind::Metadata];

    pub fn name(self) -> &'static str {
        match self {
            CacheKind::Objects => "objects",
            CacheKind::ShardIndex => "shard_index",
            CacheKind::Decoded => "decoded",
            CacheKind::Metadata => "metadata",
        }
    }
}

/// The kinds of fetching ahead (the `kind` label of the read-ahead series).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ahead {
    /// Within one file: a sequential reader's growing window (`prefetch/within_file.rs`).
    ReadAhead,
    /// Across files: the next files of a directory read in listing order (`prefetch/across_files.rs`).
    ScanAhead,
    /// Every chunk of a small array, at its first chunk read (`prefetch/array.rs`).
    Array,
    /// A node's Zarr metadata documents: the root's while the mount starts, a `*.zarr`
    /// directory's at its lookup (`prefetch/documents.rs`).
    Documents,
}

impl Ahead {
    pub fn name(self) -> &'static str {
        match self {
            Ahead::ReadAhead => "read_ahead",
            Ahead::ScanAhead => "scan_ahead",
            Ahead::Array => "array",
            Ahead::Documents => "documents",
        }
    }
}

/// Latency buckets in seconds: 50 µs (a request served from memory) to 30 s (a backend retrying).
const LATENCY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
];

/// Chunks written by one shard rewrite.
const CHUNK_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0];

pub struct FuseMetrics {
    requests: Vec<IntCounter>,
    duration: Vec<Histogram>,
    errors: IntCounterVec,
    pub in_flight: IntGauge,
    pub read_bytes: IntCounter,
    pub written_bytes: IntCounter,
}

impl FuseMetrics {
    pub fn requests(&self, op: Op) -> &IntCounter {
        &self.requests[op.index()]
    }

    pub fn duration(&self, op: Op) -> &Histogram {
        &self.duration[op.index()]
    }

    /// A request of `op` answered with `errno`.
    pub fn error(&self, op: Op, errno: i32) {
        self.errors.with_label_values(&[op.name(), errno_name(errno)]).inc();
    }

    /// Requests answered with `errno` so far, over all operations.
    pub fn errors_with(&self, errno: i32) -> u64 {
        let name = errno_name(errno);
        self.error_counts(|_, e| e == name)
    }

    /// Errors so far whose (operation, errno name) pass `pick`.
    pub fn error_counts(&self, pick: impl Fn(&str, &str) -> bool) -> u64 {
        use prometheus::core::Collector;
        let families = self.errors.collect();
        let label = |m: &prometheus::proto::Metric, n: &str| {
            m.get_label().iter().find(|l| l.name() == n).map(|l| l.value().to_string())
        };
        families
            .iter()
            .flat_map(|f| f.get_metric())
            .filter(|m| {
                pick(&label(m, "op").unwrap_or_default(), &label(m, "errno").unwrap_or_default())
            })
            .map(|m| m.get_counter().get_value() as u64)
            .sum()
    }
}

pub struct BackendMetrics {
    requests: Vec<IntCounter>,
    duration: Vec<Histogram>,
    first_byte: Vec<Histogram>,
    received: Vec<IntCounter>,
    sent: Vec<IntCounter>,
    errors: IntCounterVec,
}

impl BackendMetrics {
    pub fn requests(&self, k: Kind) -> &IntCounter {
        &self.requests[k as usize]
    }
    pub fn duration(&self, k: Kind) -> &Histogram {
        &self.duration[k as usize]
    }
    pub fn first_byte(&self, k: Kind) -> &Histogram {
        &self.first_byte[k as usize]
    }
    pub fn received(&self, k: Kind) -> &IntCounter {
        &self.received[k as usize]
    }
    pub fn sent(&self, k: Kind) -> &IntCounter {
        &self.sent[k as usize]
    }
    /// A request of kind `k` failed; `error` is the short class of the error.
    pub fn error(&self, k: Kind, error: &str) {
        self.errors.with_label_values(&[k.name(), error]).inc();
    }
    pub fn errors(&self, k: Kind, error: &str) -> u64 {
        self.errors.with_label_values(&[k.name(), error]).get()
    }
}

/// The series of one cache.
pub struct CacheMetrics {
    pub hits: IntCounter,
    pub misses: IntCounter,
    pub evictions: IntCounter,
    /// Bytes held now, summed over every instance of this cache in the process.
    pub bytes: IntGauge,
    /// The bound of those bytes, summed likewise.
    pub capacity: IntGauge,
}

impl CacheMetrics {
    pub fn hit(&self) {
        self.hits.inc();
    }
    pub fn miss(&self) {
        self.misses.inc();
    }
    /// The bytes held changed by `delta`.
    pub fn held(&self, delta: i64) {
        self.bytes.add(delta);
    }
}

/// What a revalidation of a disk-cached object found (the `result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revalidation {
    /// The store still has the cached version: its bytes are served from disk.
    Unchanged,
    /// Another version: fetched again, the old one's files dropped.
    Changed,
    /// Gone from the store: dropped from the cache.
    Deleted,
}

impl Revalidation {
    pub const ALL: [Revalidation; 3] =
        [Revalidation::Unchanged, Revalidation::Changed, Revalidation::Deleted];

    pub fn name(self) -> &'static str {
        match self {
            Revalidation::Unchanged => "unchanged",
            Revalidation::Changed => "changed",
            Revalidation::Deleted => "deleted",
        }
    }
}

/// The series of the disk cache (`--cache-dir`).
pub struct DiskCacheMetrics {
    /// Blocks (or whole-object copies) read from disk.
    pub hits: IntCounter,
    /// Blocks fetched from the store because the cache had none.
    pub misses: IntCounter,
    /// Bytes served from disk (a copy handed to the kernel counts whole).
    pub read_bytes: IntCounter,
    revalidations: Vec<IntCounter>,
    /// Block and copy files deleted to stay within --cache-max-size.
    pub evictions: IntCounter,
    /// Block and copy files that failed their check (dropped, fetched again).
    pub corrupt: IntCounter,
}

impl DiskCacheMetrics {
    pub fn revalidations(&self, r: Revalidation) -> &IntCounter {
        &self.revalidations[r as usize]
    }
}

/// Requests answered by `zarr-mount serve`: by view (`index` for `/`, `none` for a path in no
/// view) and status class, the body bytes sent, and the time to the end of the response.
pub struct HttpMetrics {
    requests: IntCounterVec,
    bytes: IntCounterVec,
    duration: HistogramVec,
    /// Each view's and status class's series, found once: a lookup by labels hashes them and
    /// takes the vector's lock, which every HTTP thread would share on every request. A series
    /// still appears only once a request has used it.
    series: [[std::sync::OnceLock<HttpSeries>; STATUS_CLASSES.len()]; HTTP_VIEWS.len()],
}

/// The `view` labels of the HTTP series.
const HTTP_VIEWS: [&str; 8] =
    ["raw", "unsharded", "decoded", "v2", "v2-decoded", "flat", "index", "none"];
const STATUS_CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

struct HttpSeries {
    requests: IntCounter,
    bytes: IntCounter,
    duration: Histogram,
}

impl HttpMetrics {
    fn new(requests: IntCounterVec, bytes: IntCounterVec, duration: HistogramVec) -> Self {
        let series = Default::default();
        HttpMetrics { requests, bytes, duration, series }
    }

    pub fn observe(&self, view: &str, status: u16, bytes: u64, seconds: f64) {
        let class = match status {
            100..=199 => 0,
            200..=299 => 1,
            300..=399 => 2,
            400..=499 => 3,
            _ => 4,
        };
        let Some(v) = HTTP_VIEWS.iter().position(|&name| name == view) else {
            debug_assert!(false, "an HTTP view label not in HTTP_VIEWS: {view}");
            return;
        };
        let s = self.series[v][class].get_or_init(|| HttpSeries {
            requests: self.requests.with_label_values(&[view, STATUS_CLASSES[class]]),
            bytes: self.bytes.with_label_values(&[view]),
            duration: self.duration.with_label_values(&[view]),
        });
        s.requests.inc();
        s.bytes.inc_by(bytes);
        s.duration.observe(seconds);
    }

    /// Requests of `view` answered with a status of `class` (`2xx`, ...), for tests and stats.
    pub fn requests(&self, view: &str, class: &str) -> u64 {
        self.requests.with_label_values(&[view, class]).get()
    }
}

pub struct AheadMetrics {
    pub fetched: IntCounter,
    pub used: IntCounter,
    pub wasted: IntCounter,
}

pub struct Metrics {
    registry: Registry,
    started: Instant,
    pub fuse: FuseMetrics,
    pub backend: BackendMetrics,
    caches: Vec<CacheMetrics>,
    pub disk_cache: DiskCacheMetrics,
    read_ahead: AheadMetrics,
    scan_ahead: AheadMetrics,
    array_ahead: AheadMetrics,
    documents_ahead: AheadMetrics,
    pub shard_rewrites: IntCounter,
    pub shard_rewrite_chunks: Histogram,
    /// Rewrites that found the shard changed underneath them (compare-and-swap lost).
    pub shard_rewrite_conflicts: IntCounter,
    /// Rewrites started again after a conflict.
    pub shard_rewrite_retries: IntCounter,
    /// Puts and deletes sent with a condition (create-if-absent, update/delete-if-version).
    pub conditional_writes: IntCounter,
    /// Creates (O_EXCL, link, new inner chunks) refused because the key exists at the store.
    pub create_conflicts: IntCounter,
    /// Opens answered with a local copy that the kernel reads directly (FUSE passthrough).
    pub passthrough_opens: IntCounter,
    pub http: HttpMetrics,
    pub writeback_pending_buffers: IntGauge,
    pub writeback_pending_bytes: IntGauge,
    pub writeback_failures: IntCounter,
    /// Expiring credentials renewed, and renewals that failed (src/store/backends/renewing.rs).
    pub credential_renewals: IntCounter,
    pub credential_renewal_failures: IntCounter,
    pub resident_memory: IntGauge,
    pub open_handles: IntGauge,
    pub known_inodes: IntGauge,
    uptime: prometheus::Gauge,
    build_info: IntGaugeVec,
}

static GLOBAL: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process's metrics.
pub fn global() -> &'static Metrics {
    &GLOBAL
}

fn name(rest: &str) -> String {
    format!("{PREFIX}_{rest}")
}

impl Metrics {
    fn new() -> Metrics {
        let registry = Registry::new();
        let reg = |c: Box<dyn prometheus::core::Collector>| {
            registry.register(c).expect("metric names are unique and valid");
        };
        let counter = |n: &str, help: &str| {
            let c = IntCounter::with_opts(Opts::new(name(n), help)).expect("valid counter");
            reg(Box::new(c.clone()));
            c
        };
        let gauge = |n: &str, help: &str| {
            let g = IntGauge::with_opts(Opts::new(name(n), help)).expect("valid gauge");
            reg(Box::new(g.clone()));
            g
        };
        let counter_vec = |n: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name(n), help), labels).expect("valid counter");
            reg(Box::new(c.clone()));
            c
        };
        let gauge_vec = |n: &str, help: &str, labels: &[&str]| {
            let g = IntGaugeVec::new(Opts::new(name(n), help), labels).expect("valid gauge");
            reg(Box::new(g.clone()));
            g
        };
        let histogram_vec = |n: &str, help: &str, labels: &[&str], buckets: &[f64]| {
            let opts = HistogramOpts::new(name(n), help).buckets(buckets.to_vec());
            let h = HistogramVec::new(opts, labels).expect("valid histogram");
            reg(Box::new(h.clone()));
            h
        };

        let fuse = {
            let requests = counter_vec(
                "fuse_requests_total",
                "FUSE requests received, by operation.",
                &["op"],
            );
            let duration = histogram_vec(
                "fuse_request_duration_seconds",
                "Time from receiving a FUSE request to replying to it, by operation.",
                &["op"],
                LATENCY_BUCKETS,
            );
            let ops = Op::ALL.iter().map(|op| op.name());
            FuseMetrics {
                requests: ops.clone().map(|o| requests.with_label_values(&[o])).collect(),
                duration: ops.map(|o| duration.with_label_values(&[o])).collect(),
                errors: counter_vec(
                    "fuse_request_errors_total",
                    "FUSE requests answered with an error, by operation and errno.",
                    &["op", "errno"],
                ),
                in_flight: gauge(
                    "fuse_requests_in_flight",
                    "FUSE requests received and not yet replied to.",
                ),
                read_bytes: counter(
                    "fuse_read_bytes_total",
                    "Bytes returned to readers of the mount.",
                ),
                written_bytes: counter(
                    "fuse_written_bytes_total",
                    "Bytes accepted from writers of the mount.",
                ),
            }
        };

        let backend = {
            let kinds = || Kind::ALL.iter().map(|k| k.name());
            let requests = counter_vec(
                "backend_requests_total",
                "Requests sent to the backend store (below every cache), by kind.",
                &["kind"],
            );
            let duration = histogram_vec(
                "backend_request_duration_seconds",
                "Backend request latency, until the whole answer is in, by kind.",
                &["kind"],
                LATENCY_BUCKETS,
            );
            let first_byte = histogram_vec(
                "backend_first_byte_seconds",
                "Backend reads: time until the answer starts (response headers), by kind.",
                &["kind"],
                LATENCY_BUCKETS,
            );
            let received = counter_vec(
                "backend_received_bytes_total",
                "Object bytes read from the backend, by kind.",
                &["kind"],
            );
            let sent = counter_vec(
                "backend_sent_bytes_total",
                "Object bytes written to the backend, by kind.",
                &["kind"],
            );
            BackendMetrics {
                requests: kinds().map(|k| requests.with_label_values(&[k])).collect(),
                duration: kinds().map(|k| duration.with_label_values(&[k])).collect(),
                first_byte: kinds().map(|k| first_byte.with_label_values(&[k])).collect(),
                received: kinds().map(|k| received.with_label_values(&[k])).collect(),
                sent: kinds().map(|k| sent.with_label_values(&[k])).collect(),
                errors: counter_vec(
                    "backend_errors_total",
                    "Backend requests that failed, by kind and error class.",
                    &["kind", "error"],
                ),
            }
        };

        let disk_cache = {
            let revalidations = counter_vec(
                "disk_cache_revalidations_total",
                "Cached objects confirmed with the store past the metadata TTL, by what was found.",
                &["result"],
            );
            DiskCacheMetrics {
                hits: counter(
                    "disk_cache_hits_total",
                    "Blocks (or whole-object copies) of the disk cache read from disk.",
                ),
                misses: counter(
                    "disk_cache_misses_total",
                    "Blocks fetched from the store because the disk cache had none.",
                ),
                read_bytes: counter(
                    "disk_cache_read_bytes_total",
                    "Bytes served from the disk cache instead of the store.",
                ),
                revalidations: Revalidation::ALL
                    .iter()
                    .map(|r| revalidations.with_label_values(&[r.name()]))
                    .collect(),
                evictions: counter(
                    "disk_cache_evictions_total",
                    "Disk cache files deleted to stay within --cache-max-size.",
                ),
                corrupt: counter(
                    "disk_cache_corrupt_total",
                    "Disk cache files that failed their check (dropped and fetched again).",
                ),
            }
        };

        let caches = {
            let hits = counter_vec("cache_hits_total", "Lookups served by a cache.", &["cache"]);
            let misses = counter_vec(
                "cache_misses_total",
                "Lookups a cache could not serve (the data was fetched or computed).",
                &["cache"],
            );
            let evictions = counter_vec(
                "cache_evictions_total",
                "Entries dropped to stay within a cache's bound.",
                &["cache"],
            );
            let bytes = gauge_vec("cache_bytes", "Bytes a cache holds now.", &["cache"]);
            let capacity =
                gauge_vec("cache_capacity_bytes", "The bound of a cache's bytes.", &["cache"]);
            CacheKind::ALL
                .iter()
                .map(|c| {
                    let l = [c.name()];
                    // The metadata cache is bounded by entries, not bytes, and evicts
                    // silently: it has no byte or eviction series rather than false zeros.
                    let sized = *c != CacheKind::Metadata;
                    let unlisted = || IntGauge::new("unlisted", "not exposed").expect("valid");
                    CacheMetrics {
                        hits: hits.with_label_values(&l),
                        misses: misses.with_label_values(&l),
                        evictions: if sized {
                            evictions.with_label_values(&l)
                        } else {
                            IntCounter::new("unlisted", "not exposed").expect("valid")
                        },
                        bytes: if sized { bytes.with_label_values(&l) } else { unlisted() },
                        capacity: if sized { capacity.with_label_values(&l) } else { unlisted() },
                    }
                })
                .collect()
        };

        let (read_ahead, scan_ahead, array_ahead, documents_ahead) = {
            let fetched = counter_vec(
                "ahead_fetched_bytes_total",
                "Bytes fetched before a reader asked for them, by kind (read_ahead within a \
                 file, scan_ahead across the files of a directory, array for the chunks of a \
                 small array).",
                &["kind"],
            );
            let used = counter_vec(
                "ahead_used_bytes_total",
                "Bytes fetched ahead that a reader then read.",
                &["kind"],
            );
            let wasted = counter_vec(
                "ahead_wasted_bytes_total",
                "Bytes fetched ahead that were dropped unread.",
                &["kind"],
            );
            let of = |a: Ahead| AheadMetrics {
                fetched: fetched.with_label_values(&[a.name()]),
                used: used.with_label_values(&[a.name()]),
                wasted: wasted.with_label_values(&[a.name()]),
            };
            (of(Ahead::ReadAhead), of(Ahead::ScanAhead), of(Ahead::Array), of(Ahead::Documents))
        };

        let shard_rewrite_chunks = {
            let opts = HistogramOpts::new(
                name("shard_rewrite_chunks"),
                "Chunk writes carried by one shard rewrite.",
            )
            .buckets(CHUNK_BUCKETS.to_vec());
            let h = Histogram::with_opts(opts).expect("valid histogram");
            reg(Box::new(h.clone()));
            h
        };
        let uptime = {
            let g = prometheus::Gauge::with_opts(Opts::new(
                name("uptime_seconds"),
                "Seconds since the process started.",
            ))
            .expect("valid gauge");
            reg(Box::new(g.clone()));
            g
        };

        Metrics {
            started: Instant::now(),
            fuse,
            backend,
            caches,
            disk_cache,
            read_ahead,
            scan_ahead,
            array_ahead,
            documents_ahead,
            shard_rewrites: counter(
                "shard_rewrites_total",
                "Shards rewritten to store chunk writes made through the unsharded view.",
            ),
            shard_rewrite_chunks,
            shard_rewrite_conflicts: counter(
                "shard_rewrite_conflicts_total",
                "Shard rewrites that found the shard changed by another writer.",
            ),
            shard_rewrite_retries: counter(
                "shard_rewrite_retries_total",
                "Shard rewrites started again after a conflict.",
            ),
            conditional_writes: counter(
                "conditional_writes_total",
                "Puts and deletes sent with a condition (create-if-absent, update/delete-if-version).",
            ),
            create_conflicts: counter(
                "create_conflicts_total",
                "Exclusive creates (O_EXCL, link, new inner chunks) refused: the key exists at the store.",
            ),
            passthrough_opens: counter(
                "passthrough_opens_total",
                "Opens answered with a disk cache copy that the kernel reads directly (FUSE passthrough).",
            ),
            http: HttpMetrics::new(
                counter_vec(
                    "http_requests_total",
                    "HTTP requests answered by `serve`, by view and status class.",
                    &["view", "class"],
                ),
                counter_vec(
                    "http_response_bytes_total",
                    "Body bytes sent by `serve`, by view.",
                    &["view"],
                ),
                histogram_vec(
                    "http_request_duration_seconds",
                    "Time from receiving an HTTP request to the end of its response, by view.",
                    &["view"],
                    LATENCY_BUCKETS,
                ),
            ),
            writeback_pending_buffers: gauge(
                "writeback_pending_buffers",
                "Files with written data held in memory, not yet stored.",
            ),
            writeback_pending_bytes: gauge(
                "writeback_pending_bytes",
                "Bytes of those files' buffers.",
            ),
            writeback_failures: counter(
                "writeback_failures_total",
                "Write-backs (flush, fsync, close, unmount) that failed to store a file.",
            ),
            credential_renewals: counter(
                "credential_renewals_total",
                "Expiring object-store credentials renewed before their expiry.",
            ),
            credential_renewal_failures: counter(
                "credential_renewal_failures_total",
                "Renewals of object-store credentials that failed (the old ones stay in use).",
            ),
            resident_memory: gauge(
                "process_resident_memory_bytes",
                "Resident memory of the daemon.",
            ),
            open_handles: gauge("open_handles", "Open file and directory handles of the mount."),
            known_inodes: gauge("known_inodes", "Inodes the kernel holds references to."),
            uptime,
            build_info: gauge_vec(
                "build_info",
                "Always 1; the labels say what runs: version, view and backend kind.",
                &["version", "view", "backend"],
            ),
            registry,
        }
    }

    pub fn cache(&self, c: CacheKind) -> &CacheMetrics {
        &self.caches[c as usize]
    }

    pub fn ahead(&self, a: Ahead) -> &AheadMetrics {
        match a {
            Ahead::ReadAhead => &self.read_ahead,
            Ahead::ScanAhead => &self.scan_ahead,
            Ahead::Array => &self.array_ahead,
            Ahead::Documents => &self.documents_ahead,
        }
    }

    /// Say what runs (the `build_info` series).
    pub fn set_build_info(&self, view: &str, backend: &str) {
        self.build_info.reset();
        self.build_info.with_label_values(&[env!("CARGO_PKG_VERSION"), view, backend]).set(1);
    }

    /// Values read at scrape time rather than counted as they change.
    pub fn refresh_process(&self) {
        self.uptime.set(self.started.elapsed().as_secs_f64());
        if let Some(rss) = resident_bytes() {
            self.resident_memory.set(rss as i64);
        }
    }

    /// The Prometheus text exposition format (version 0.0.4) of every series.
    pub fn encode_text(&self) -> String {
        self.refresh_process();
        let families = self.registry.gather();
        prometheus::TextEncoder::new().encode_to_string(&families).unwrap_or_else(|e| {
            tracing::error!(error = %e, "encoding metrics failed");
            String::new()
        })
    }

    /// Every series as gathered now (for the OpenMetrics encoding and for tests).
    pub fn gather(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.refresh_process();
        self.registry.gather()
    }
}

/// Resident set size from /proc/self/statm (pages), in bytes.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// The symbolic name of the errno values a mount answers with; the number for others.
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTSUP => "ENOTSUP",
        libc::ENOTTY => "ENOTTY",
        libc::EBADF => "EBADF",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::EXDEV => "EXDEV",
        libc::EAGAIN => "EAGAIN",
        libc::EFBIG => "EFBIG",
        libc::ENODATA => "ENODATA",
        libc::EBUSY => "EBUSY",
        _ => "other",
    }
}

tokio::task_local! {
    /// Set by the metered store around one backend request: when the answer started.
    static FIRST_BYTE: Cell<Option<Duration>>;
    /// tokio's clock: the same as the system's in the daemon, paused in unit tests.
    static STARTED: tokio::time::Instant;
}

/// Run `fut` (one backend request) noting when a backend says its answer began
/// (`first_byte_now`); returns the output and that time, if the backend said.
pub async fn with_first_byte<F: std::future::Future>(fut: F) -> (F::Output, Option<Duration>) {
    FIRST_BYTE
        .scope(Cell::new(None), async {
            let out = STARTED.scope(tokio::time::Instant::now(), fut).await;
            (out, FIRST_BYTE.with(|c| c.get()))
        })
        .await
}

/// Called by a backend when the answer to the current request starts arriving (for object
/// stores: the response headers are in, the body not yet read). Nothing outside a request.
pub fn first_byte_now() {
    let Ok(started) = STARTED.try_with(|s| *s) else { return };
    let _ = FIRST_BYTE.try_with(|c| {
        if c.get().is_none() {
            c.set(Some(started.elapsed()));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_exposed_in_the_text_format() {
        let m = global();
        m.fuse.requests(Op::Read).inc();
        m.fuse.error(Op::Lookup, libc::ENOENT);
        m.set_build_info("unsharded", "local");
        let text = m.encode_text();
        for series in [
            "zarr_mount_fuse_requests_total{op=\"read\"}",
            "zarr_mount_fuse_request_errors_total{errno=\"ENOENT\",op=\"lookup\"}",
            "zarr_mount_fuse_request_duration_seconds_bucket{op=\"lookup\",le=\"0.001\"}",
            "zarr_mount_backend_requests_total{kind=\"range\"}",
            "zarr_mount_backend_first_byte_seconds_count{kind=\"get\"}",
            "zarr_mount_cache_hits_total{cache=\"shard_index\"}",
            "zarr_mount_cache_capacity_bytes{cache=\"decoded\"}",
            "zarr_mount_ahead_wasted_bytes_total{kind=\"scan_ahead\"}",
            "zarr_mount_shard_rewrite_conflicts_total",
            "zarr_mount_shard_rewrite_retries_total",
            "zarr_mount_shard_rewrite_chunks_bucket{le=\"1\"}",
            "zarr_mount_writeback_pending_bytes",
            "zarr_mount_process_resident_memory_bytes",
            "zarr_mount_uptime_seconds",
            "zarr_mount_build_info{backend=\"local\",version=\"",
        ] {
            assert!(text.contains(series), "{series} missing from:\n{text}");
        }
        assert!(m.fuse.errors_with(libc::ENOENT) >= 1);
    }

    #[test]
    fn every_served_view_has_its_http_series() {
        use clap::ValueEnum;
        for view in crate::views::ViewKind::value_variants() {
            assert!(HTTP_VIEWS.contains(&view.name()), "{} not in HTTP_VIEWS", view.name());
        }
        let http = &global().http;
        let before = http.requests("flat", "4xx");
        http.observe("flat", 404, 10, 0.001);
        http.observe("flat", 416, 0, 0.001);
        assert_eq!(http.requests("flat", "4xx"), before + 2);
        let text = global().encode_text();
        assert!(text.contains("zarr_mount_http_requests_total{class=\"4xx\",view=\"flat\"}"));
        assert!(text.contains("zarr_mount_http_response_bytes_total{view=\"flat\"}"));
    }

    #[tokio::test(start_paused = true)]
    async fn first_byte_is_noted_only_inside_a_request() {
        first_byte_now(); // outside: ignored, no panic
        let ((), at) = with_first_byte(async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            first_byte_now();
            tokio::time::sleep(Duration::from_millis(5)).await;
            first_byte_now(); // the first call counts
        })
        .await;
        assert_eq!(at, Some(Duration::from_millis(5)));
        let ((), none) = with_first_byte(async {}).await;
        assert_eq!(none, None);
    }
}
