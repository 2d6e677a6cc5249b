//! Command line: clap definitions, then validation into a plain `MountConfig`. Checks that
//! need the filesystem (does SOURCE exist, is MOUNTPOINT empty) happen here, before anything is
//! mounted, so a bad argument costs one line and exit code 2.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;

use crate::source::{Location, Source};
use crate::store::backends::object::RemoteOptions;
use crate::views::ViewKind;

pub mod serve;

#[derive(Debug, Parser)]
#[command(
    name = "zarr-mount",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("ZARR_MOUNT_BUILD"), ")"),
    about = "Mount a Zarr store as a directory; sharded Zarr v3 arrays appear as unsharded arrays of chunk files.",
    after_help = "SOURCE: a directory path, file:///path, s3://bucket/prefix, gs://, az://, http(s)://, \
                  or a .zip/.ozx archive (zip+URL for other names), \
                  or virtual references: a kerchunk .json file or a .parq/.parquet reference directory \
                  (reference+URL for other names), \
                  or an Icechunk repository: icechunk+PATH or icechunk+URL (a local repository directory is \
                  recognised by its layout).\n\n\
                  zarr-mount serve SOURCE [--listen ADDR:PORT]: every view over HTTP instead of a mount \
                  (zarr-mount serve --help)."
)]
pub struct Args {
    /// The Zarr store to mount.
    pub source: String,
    /// An existing, empty directory to mount it on; or /dev/fd/N, a /dev/fuse descriptor that
    /// a privileged helper mounted and handed to this process.
    pub mountpoint: PathBuf,
    /// Stay in the foreground (default: daemonize once the mount is live).
    #[arg(short, long)]
    pub foreground: bool,
    /// Refuse every write with EROFS.
    #[arg(long, alias = "ro")]
    pub read_only: bool,
    /// How the store is presented (decoded and v2 are read-only).
    #[arg(long, value_enum, default_value = "unsharded")]
    pub view: ViewKind,
    /// In the v2 and v2-decoded views, OME-Zarr 0.5 metadata of v3 groups is written as
    /// OME-Zarr 0.4 (`translate`), which the 0.4-only bioimaging readers need, or left as it
    /// is (`keep`).
    #[arg(long, value_enum, default_value = "translate", value_name = "MODE")]
    pub v2_ome: crate::views::OmeInV2,
    /// Let users other than the mounting user see the mount (needs user_allow_other in /etc/fuse.conf when not root).
    #[arg(long)]
    pub allow_other: bool,
    /// Owner shown for every file and directory (default: a local directory's own owners;
    /// the mounting user for other sources).
    #[arg(long)]
    pub uid: Option<u32>,
    /// Group shown for every file and directory (default: a local directory's own groups;
    /// the mounting user's group for other sources).
    #[arg(long)]
    pub gid: Option<u32>,
    /// Mode shown for every file, in octal, e.g. 0640 (default: a local directory's own
    /// modes; 0644 for other sources).
    #[arg(long, value_name = "MODE", value_parser = crate::perms::parse_mode)]
    pub file_mode: Option<u16>,
    /// Mode shown for every directory, in octal, e.g. 0750 (default: a local directory's own
    /// modes; 0755 for other sources).
    #[arg(long, value_name = "MODE", value_parser = crate::perms::parse_mode)]
    pub dir_mode: Option<u16>,
    /// Seconds that file and directory metadata (and absences) are cached; 0 = always ask the store.
    /// Default: 1 for local directories, 60 for object stores and zips.
    #[arg(long, value_name = "SECONDS")]
    pub metadata_ttl: Option<f64>,
    /// The kernel's read-ahead window for this mount, e.g. 4M; 0 leaves the kernel's default
    /// (128K). Setting it needs root (it is the mount's /sys/class/bdi/*/read_ahead_kb).
    /// Default: 1M, the largest READ the mount negotiates.
    #[arg(long, value_name = "SIZE")]
    pub read_ahead: Option<String>,
    /// Threads reading FUSE requests (the work itself runs on a tokio pool).
    #[arg(long, default_value_t = 2)]
    pub fuse_threads: usize,
    /// More log output (-v: debug, -vv: trace). RUST_LOG overrides, e.g. RUST_LOG=zarr_mount=debug.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Append logs to this file (a daemon otherwise discards them once the mount is live).
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    // ---- object stores (s3://, gs://, az://, http(s)://) ----
    /// Custom object-store endpoint, e.g. http://127.0.0.1:9000 for an S3-compatible server
    /// (default: from the environment, e.g. AWS_ENDPOINT_URL, else the provider's).
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// Region of an S3 bucket (default: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1).
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
    /// AWS profile for an s3:// source: its credentials (keys, SSO, credential_process,
    /// role_arn), region and endpoint_url from ~/.aws/config and ~/.aws/credentials
    /// (default: AWS_PROFILE, else `default`). See docs/SOURCES.md "Credentials".
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Send unsigned requests to an s3:// source, looking for no credentials (public buckets).
    #[arg(long)]
    pub no_sign_request: bool,
    /// An object_store builder option, e.g. -o aws_virtual_hosted_style_request=true (repeatable).
    #[arg(short = 'o', long = "option", value_name = "KEY=VALUE")]
    pub options: Vec<String>,
    /// Memory for whole small objects read from an object store, e.g. 512M or 2G; 0 disables.
    /// Default: 1/8 of RAM, at most 2G.
    #[arg(long, value_name = "SIZE")]
    pub cache_size: Option<String>,
    /// On an object store, a small array (its chunk objects at most this much by its
    /// metadata, at most 256 of them) is fetched whole into memory at its first chunk read,
    /// e.g. 64M; 0 disables. Default: 32M (at most a quarter of --cache-size).
    #[arg(long, value_name = "SIZE")]
    pub array_prefetch: Option<String>,
    /// Keep bytes read from an object store (or a remote zip) in this directory, across
    /// remounts and reboots; one mount per directory. See docs/PERFORMANCE.md "Disk cache".
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Bound of --cache-dir, e.g. 20G (least recently used blocks are dropped first). Default: 10G.
    #[arg(long, value_name = "SIZE")]
    pub cache_max_size: Option<String>,
    /// The data does not change: what --cache-dir holds is served without asking the store
    /// again, across remounts and past --metadata-ttl (a change at the store is not seen until
    /// the cache directory is emptied). See docs/PERFORMANCE.md "Disk cache".
    #[arg(long)]
    pub immutable: bool,
    // ---- write buffers ----
    /// Where files open for writing go once too large for memory (anonymous files: nothing is
    /// left there after a crash). Default: the system temp directory.
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Memory for the write buffers of all open files together, e.g. 256M (the default);
    /// beyond it, and for any file past --spill-threshold, buffers go to --spill-dir.
    #[arg(long, value_name = "SIZE")]
    pub write_buffer_budget: Option<String>,
    /// Size above which one file open for writing goes to --spill-dir (default 8M).
    #[arg(long, value_name = "SIZE")]
    pub spill_threshold: Option<String>,
    /// Resolved paths (and absences) the metadata cache holds at most, ~300 bytes each
    /// (default 200000). A walk of more keys than this gets no hits from it anyway.
    #[arg(long, value_name = "N")]
    pub metadata_cache_entries: Option<usize>,
    // ---- running as a service ----
    /// Log one INFO line of counters (requests per operation, errors, bytes read/written) every
    /// SECS seconds; 0 = never.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub stats_interval: u64,
    /// Serve Prometheus metrics at http://ADDR/metrics: HOST:PORT, or a bare PORT for the
    /// loopback interface (e.g. 9464). Off by default; see docs/OPERATIONS.md "Metrics".
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_addr: Option<String>,
    /// Read KEY=VALUE lines (e.g. AWS_SECRET_ACCESS_KEY=...) into the environment before
    /// anything else, so credentials stay off the command line and out of fstab.
    #[arg(long, value_name = "PATH")]
    pub env_file: Option<PathBuf>,
    // ---- Icechunk repositories ----
    /// The branch, tag or snapshot id to show (`branch:NAME`, `tag:NAME`, `snapshot:ID` to be
    /// explicit; a bare name is tried as a branch, a tag, then a snapshot id). Default: branch
    /// main. A branch is followed: its new commits show up after --metadata-ttl.
    #[arg(long = "ref", value_name = "REF")]
    pub icechunk_ref: Option<String>,
    /// Read virtual chunks from the repository's containers under this URL prefix that need
    /// authorizing: local files (file:///data/), S3 on an endpoint of the repository's own
    /// choosing other than --endpoint-url (s3://bucket/), and http(s) on a loopback, private or
    /// link-local host (http://10.0.0.5:8080/); `all`: every container. Other remote
    /// containers are always read, with credentials from the environment. For reference
    /// (kerchunk) sources: local files outside the reference file's own directory
    /// (file:///data/), and http(s) targets on such hosts, other than the reference file's own
    /// origin (repeatable).
    #[arg(long, value_name = "URL_PREFIX")]
    pub authorize_virtual: Vec<String>,
    /// Mount options in fstab form (`ro,view=raw,_netdev,key=value`), as the mount(8) helper
    /// mount.fuse.zarr-mount passes them; see docs/CONFIGURATION.md "fstab options".
    #[arg(long, value_name = "OPTIONS", allow_hyphen_values = true)]
    pub fstab_options: Option<String>,
}

/// Everything the daemon needs, validated.
#[derive(Debug, Clone)]
pub struct MountConfig {
    pub source: Source,
    /// SOURCE as written: the mount's source in /proc/mounts, as fstab has it.
    pub source_text: String,
    pub mountpoint: PathBuf,
    pub foreground: bool,
    pub read_only: bool,
    pub view: ViewKind,
    /// `--v2-ome`.
    pub v2_ome: crate::views::OmeInV2,
    pub allow_other: bool,
    /// `--uid`, `--gid`, `--file-mode`, `--dir-mode` over the mounting user's defaults.
    pub perms: crate::perms::ShownPerms,
    pub metadata_ttl: Duration,
    pub fuse_threads: usize,
    /// `--read-ahead` in bytes: None for the default (applied where allowed, quietly), Some(0)
    /// to leave the kernel's.
    pub read_ahead: Option<u64>,
    pub verbose: u8,
    pub log_file: Option<PathBuf>,
    /// How to reach an object store (unused for local sources).
    pub remote: RemoteOptions,
    /// Bytes of the object cache in front of an object store (0 = none).
    pub cache_size: u64,
    /// `--array-prefetch` in bytes, already bounded by the cache (0 = none).
    pub array_prefetch: u64,
    /// Seconds between stats log lines (0 = none).
    pub stats_interval: u64,
    /// Where to serve /metrics (already defaulted to loopback), if anywhere.
    pub metrics_addr: Option<String>,
    /// `--cache-dir`: the persistent disk cache (locked for this mount), if any.
    pub disk_cache: Option<crate::store::layers::disk_cache::DiskCacheOptions>,
    /// `--spill-dir`, `--write-buffer-budget`, `--spill-threshold`.
    pub spill: crate::fs::write::spill::SpillConfig,
    /// `--metadata-cache-entries` (None: the default).
    pub metadata_cache_entries: Option<usize>,
    /// `--ref` (Icechunk sources).
    pub icechunk_ref: crate::store::backends::icechunk::RefSpec,
    /// `--authorize-virtual` (Icechunk and reference sources).
    pub authorize_virtual: Vec<String>,
}

/// `--array-prefetch` unless given: arrays up to 32 MiB, such as a 2048 x 2048 float32
/// image, or the coordinate variables and masks that readers load whole.
const DEFAULT_ARRAY_PREFETCH: u64 = 32 << 20;

/// `--endpoint-url`: an http(s) URL with a host (the S3 client panics on one without a scheme).
fn check_endpoint_url(e: &str) -> Result<(), UsageError> {
    let bad = |why: &str| usage(format!("--endpoint-url {e:?}: {why}"));
    let url = url::Url::parse(e).map_err(|err| match err {
        url::ParseError::RelativeUrlWithoutBase => {
            bad("not a URL: give its scheme, e.g. http://127.0.0.1:9000")
        }
        err => bad(&format!("not a URL: {err}")),
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("the scheme must be http or https"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    Ok(())
}

/// A problem with the arguments: printed as one line, exit code 2.
/// `--profile` and `--no-sign-request`: for S3 sources (or references that may point into
/// S3), not both, and a profile name that can be one.
fn check_s3_credential_flags(
    source: &Source,
    profile: Option<&str>,
    no_sign_request: bool,
) -> Result<(), UsageError> {
    use crate::store::location::Cloud;
    if profile.is_none() && !no_sign_request {
        return Ok(());
    }
    let s3 = matches!(source.location(), Location::Remote { cloud: Cloud::S3, .. })
        || matches!(source, Source::Reference(_));
    if !s3 {
        return Err(usage("--profile and --no-sign-request apply only to s3:// sources"));
    }
    if profile.is_some() && matches!(source, Source::Icechunk(_)) {
        // icechunk's own S3 client takes AWS_* variables only.
        return Err(usage("--profile does not apply to Icechunk sources (their S3 client reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from the environment)"));
    }
    if profile.is_some() && no_sign_request {
        return Err(usage("--profile and --no-sign-request exclude each other"));
    }
    if let Some(p) = profile {
        if p.is_empty() || p.chars().any(|c| c.is_whitespace() || c.is_control() || c == ']') {
            return Err(usage(format!("--profile {p:?}: not a profile name")));
        }
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

fn usage(msg: impl Into<String>) -> UsageError {
    UsageError(msg.into())
}

impl Args {
    pub fn validate(self) -> Result<MountConfig, UsageError> {
        self.validate_with(check_mountpoint)
    }

    /// `validate`, with MOUNTPOINT checked by `mountpoint` (`serve` has none).
    pub(crate) fn validate_with(
        self,
        mountpoint: impl FnOnce(&Path) -> Result<PathBuf, UsageError>,
    ) -> Result<MountConfig, UsageError> {
        let options = parse_options(&self.options)?;
        let spill = spill_config(
            self.spill_dir.as_deref(),
            self.write_buffer_budget.as_deref(),
            self.spill_threshold.as_deref(),
        )?;
        let cache_size = match &self.cache_size {
            Some(s) => crate::store::layers::cache::parse_size(s)
                .map_err(|e| usage(format!("--cache-size {e}")))?,
            None => crate::store::layers::cache::default_cache_bytes(),
        };
        let array_prefetch = match &self.array_prefetch {
            Some(s) => crate::store::layers::cache::parse_size(s)
                .map_err(|e| usage(format!("--array-prefetch {e}")))?,
            None => DEFAULT_ARRAY_PREFETCH,
        }
        .min(cache_size / 4);
        let read_ahead = match &self.read_ahead {
            Some(s) => Some(
                crate::store::layers::cache::parse_size(s)
                    .map_err(|e| usage(format!("--read-ahead {e}")))?,
            ),
            None => None,
        };
        let metrics_addr = match &self.metrics_addr {
            Some(a) => Some(
                crate::metrics::server::parse_addr(a)
                    .map_err(|e| usage(format!("--metrics-addr {e}")))?,
            ),
            None => None,
        };
        let mut source = Source::parse(&self.source)
            .map_err(|e| usage(format!("bad SOURCE {:?}: {e}", self.source)))?;
        if let Source::Directory(Location::Local(p)) = &source {
            if crate::store::backends::icechunk::looks_like_repository(p) {
                source = Source::Icechunk(Location::Local(p.clone()));
            }
        }
        let is_icechunk = matches!(source, Source::Icechunk(_));
        if !is_icechunk && self.icechunk_ref.is_some() {
            return Err(usage("--ref applies only to Icechunk sources"));
        }
        if !is_icechunk
            && !matches!(source, Source::Reference(_))
            && !self.authorize_virtual.is_empty()
        {
            return Err(usage(
                "--authorize-virtual applies only to Icechunk and reference (kerchunk) sources",
            ));
        }
        let icechunk_ref =
            crate::store::backends::icechunk::RefSpec::parse(self.icechunk_ref.as_deref())
                .map_err(usage)?;
        match &source {
            Source::Icechunk(Location::Local(p)) => {
                check_local_dir(p, true)?;
                let abs = std::fs::canonicalize(p)
                    .map_err(|e| usage(format!("SOURCE {}: {}", p.display(), io_reason(&e))))?;
                source = Source::Icechunk(Location::Local(abs));
            }
            Source::Icechunk(Location::Remote { cloud, .. }) => {
                crate::store::backends::object::check_options(*cloud, &options).map_err(usage)?;
            }
            Source::Directory(Location::Local(p)) => {
                check_local_dir(p, self.read_only)?;
                let abs = std::fs::canonicalize(p)
                    .map_err(|e| usage(format!("SOURCE {}: {}", p.display(), io_reason(&e))))?;
                source = Source::Directory(Location::Local(abs));
            }
            Source::Directory(Location::Remote { cloud, .. }) => {
                crate::store::backends::object::check_options(*cloud, &options).map_err(usage)?;
            }
            Source::Zip(Location::Local(p)) => {
                check_local_zip(p)?;
                let abs = std::fs::canonicalize(p)
                    .map_err(|e| usage(format!("SOURCE {}: {}", p.display(), io_reason(&e))))?;
                source = Source::Zip(Location::Local(abs));
            }
            Source::Zip(Location::Remote { cloud, .. }) => {
                crate::store::backends::object::check_options(*cloud, &options).map_err(usage)?;
            }
            Source::Reference(Location::Local(p)) => {
                let abs = std::fs::canonicalize(p)
                    .map_err(|e| usage(format!("SOURCE {}: {}", p.display(), io_reason(&e))))?;
                crate::store::backends::reference::check_local(&abs)
                    .map_err(|e| usage(format!("SOURCE {}: {e}", p.display())))?;
                source = Source::Reference(Location::Local(abs));
            }
            Source::Reference(Location::Remote { cloud, .. }) => {
                crate::store::backends::object::check_options(*cloud, &options).map_err(usage)?;
            }
        }
        // A local reference set may point into object stores: the options are for those.
        if matches!(source.location(), Location::Local(_))
            && !matches!(source, Source::Reference(_))
            && (self.endpoint_url.is_some() || self.region.is_some() || !options.is_empty())
        {
            return Err(usage("--endpoint-url, --region and -o apply only to object-store sources (s3://, gs://, az://, http(s)://)"));
        }
        if let Some(e) = &self.endpoint_url {
            check_endpoint_url(e)?;
        }
        check_s3_credential_flags(&source, self.profile.as_deref(), self.no_sign_request)?;
        let mountpoint = mountpoint(&self.mountpoint)?;
        let disk_cache = disk_cache_options(
            self.cache_dir.as_deref(),
            self.cache_max_size.as_deref(),
            self.immutable,
            &source,
        )?;
        let default_ttl = match source.location() {
            Location::Local(_) if matches!(source, Source::Directory(_)) => 1.0,
            _ => 60.0,
        };
        let ttl = self.metadata_ttl.unwrap_or(default_ttl);
        if !(0.0..=1e9).contains(&ttl) {
            return Err(usage("--metadata-ttl must be a number of seconds >= 0"));
        }
        if self.metadata_cache_entries == Some(0) {
            return Err(usage("--metadata-cache-entries must be at least 1"));
        }
        // Zip archives and the decoded and v2 views are served read-only (the kernel mount flag
        // too): there is no exact way back from what they show to stored bytes.
        let read_only = self.read_only
            || matches!(source, Source::Zip(_) | Source::Reference(_) | Source::Icechunk(_))
            || self.view.is_read_only();
        Ok(MountConfig {
            source,
            source_text: self.source,
            mountpoint,
            foreground: self.foreground,
            read_only,
            view: self.view,
            v2_ome: self.v2_ome,
            allow_other: self.allow_other,
            perms: crate::perms::ShownPerms {
                uid: self.uid,
                gid: self.gid,
                file_mode: self.file_mode,
                dir_mode: self.dir_mode,
                ..crate::perms::ShownPerms::of_this_process()
            },
            metadata_ttl: Duration::from_secs_f64(ttl),
            fuse_threads: self.fuse_threads.clamp(1, 64),
            read_ahead,
            verbose: self.verbose,
            log_file: self.log_file,
            remote: RemoteOptions {
                endpoint_url: self.endpoint_url,
                region: self.region,
                options,
                profile: self.profile,
                no_sign_request: self.no_sign_request,
                egress: None,
            },
            cache_size,
            array_prefetch,
            stats_interval: self.stats_interval,
            metrics_addr,
            disk_cache,
            spill,
            metadata_cache_entries: self.metadata_cache_entries,
            icechunk_ref,
            authorize_virtual: self.authorize_virtual,
        })
    }
}

/// `--spill-dir`, `--write-buffer-budget`, `--spill-threshold` (sizes as for --cache-size).
fn spill_config(
    dir: Option<&Path>,
    budget: Option<&str>,
    threshold: Option<&str>,
) -> Result<crate::fs::write::spill::SpillConfig, UsageError> {
    let mut cfg = crate::fs::write::spill::SpillConfig::default();
    if let Some(dir) = dir {
        cfg.dir = dir.to_path_buf();
    }
    if let Some(s) = budget {
        cfg.budget = crate::store::layers::cache::parse_size(s)
            .map_err(|e| usage(format!("--write-buffer-budget {e}")))?;
    }
    if let Some(s) = threshold {
        cfg.threshold = crate::store::layers::cache::parse_size(s)
            .map_err(|e| usage(format!("--spill-threshold {e}")))?;
    }
    Ok(cfg)
}

/// `--cache-dir` / `--cache-max-size`: only for remote sources; the directory is locked here,
/// so a second mount on it fails with a usage error (exit 2) before anything is mounted.
fn disk_cache_options(
    dir: Option<&Path>,
    max: Option<&str>,
    immutable: bool,
    source: &Source,
) -> Result<Option<crate::store::layers::disk_cache::DiskCacheOptions>, UsageError> {
    use crate::store::layers::disk_cache::{DirLock, DiskCacheOptions, DEFAULT_MAX_BYTES};
    let Some(dir) = dir else {
        return match (max, immutable) {
            (Some(_), _) => Err(usage("--cache-max-size needs --cache-dir")),
            (_, true) => Err(usage("--immutable needs --cache-dir")),
            (None, false) => Ok(None),
        };
    };
    if matches!(source, Source::Icechunk(_)) {
        return Err(usage("--cache-dir does not apply to Icechunk sources yet"));
    }
    if matches!(source.location(), Location::Local(_)) {
        return Err(usage(
            "--cache-dir applies only to object-store sources (s3://, gs://, az://, http(s)://)",
        ));
    }
    let max_bytes = match max {
        Some(s) => crate::store::layers::cache::parse_size(s)
            .map_err(|e| usage(format!("--cache-max-size {e}")))?,
        None => DEFAULT_MAX_BYTES,
    };
    if max_bytes < crate::store::layers::disk_cache::BLOCK_SIZE * 2 {
        return Err(usage("--cache-max-size must be at least 2M"));
    }
    let lock = DirLock::acquire(dir).map_err(usage)?;
    Ok(Some(DiskCacheOptions { lock: std::sync::Arc::new(lock), max_bytes, immutable }))
}

/// `-o key=value` pairs.
fn parse_options(raw: &[String]) -> Result<Vec<(String, String)>, UsageError> {
    raw.iter()
        .map(|o| match o.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => {
                Ok((k.trim().to_ascii_lowercase(), v.to_string()))
            }
            // The value is not echoed: it may be a secret.
            _ => Err(usage(
                "-o expects KEY=VALUE (an argument without '=' or without a key was given)",
            )),
        })
        .collect()
}

fn access_ok(path: &Path, mode: i32) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else { return false };
    // SAFETY: access(2) with a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), mode) == 0 }
}

fn check_local_zip(p: &Path) -> Result<(), UsageError> {
    let md = std::fs::metadata(p)
        .map_err(|e| usage(format!("SOURCE {}: {}", p.display(), io_reason(&e))))?;
    if !md.is_file() {
        return Err(usage(format!("SOURCE {}: not a zip file", p.display())));
    }
    if !access_ok(p, libc::R_OK) {
        return Err(usage(format!("SOURCE {}: permission denied", p.display())));
    }
    Ok(())
}

fn check_local_dir(p: &Path, read_only: bool) -> Result<(), UsageError> {
    let md = std::fs::metadata(p)
        .map_err(|e| usage(format!("SOURCE {}: {}", p.display(), io_reason(&e))))?;
    if !md.is_dir() {
        return Err(usage(format!("SOURCE {}: not a directory", p.display())));
    }
    if !access_ok(p, libc::R_OK | libc::X_OK) {
        return Err(usage(format!("SOURCE {}: permission denied", p.display())));
    }
    if !read_only && !access_ok(p, libc::W_OK) {
        tracing::warn!(source = %p.display(), "SOURCE is not writable; writes will fail (use --read-only)");
    }
    Ok(())
}

fn check_mountpoint(p: &Path) -> Result<PathBuf, UsageError> {
    // A /dev/fuse connection handed in already mounted: nothing to check on disk.
    if let Some(fd) = crate::fuse::passed_fd::descriptor(p) {
        crate::fuse::passed_fd::check(fd)
            .map_err(|e| usage(format!("MOUNTPOINT {}: {e}", p.display())))?;
        return Ok(p.to_path_buf());
    }
    let md = std::fs::metadata(p).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENOTCONN) {
            usage(format!(
                "MOUNTPOINT {}: a dead FUSE mount is still there; run `fusermount3 -u {}`",
                p.display(),
                p.display()
            ))
        } else {
            usage(format!("MOUNTPOINT {}: {}", p.display(), io_reason(&e)))
        }
    })?;
    if !md.is_dir() {
        return Err(usage(format!("MOUNTPOINT {}: not a directory", p.display())));
    }
    let abs = std::fs::canonicalize(p)
        .map_err(|e| usage(format!("MOUNTPOINT {}: {}", p.display(), io_reason(&e))))?;
    if is_mount_point(&abs, &md) {
        return Err(usage(format!("MOUNTPOINT {}: already a mount point", p.display())));
    }
    let mut entries = std::fs::read_dir(&abs)
        .map_err(|e| usage(format!("MOUNTPOINT {}: {}", p.display(), io_reason(&e))))?;
    if entries.next().is_some() {
        return Err(usage(format!("MOUNTPOINT {}: not empty", p.display())));
    }
    Ok(abs)
}

fn is_mount_point(abs: &Path, md: &std::fs::Metadata) -> bool {
    if abs == Path::new("/") {
        return true;
    }
    let parent_dev = abs.parent().and_then(|pp| std::fs::metadata(pp).ok()).map(|m| m.dev());
    if parent_dev.is_some_and(|d| d != md.dev()) {
        return true;
    }
    // Bind mounts of the same device: ask the mount table.
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let want = abs.to_string_lossy();
    table.lines().any(|l| l.split(' ').nth(4).is_some_and(|mp| unescape_mountinfo(mp) == want))
}

fn unescape_mountinfo(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}
