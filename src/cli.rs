//! Command line: SOURCE, MOUNTPOINT and one section of flags per concern (`--help` shows
//! each under its heading), each a file of `cli/` that turns its flags into its part of the
//! plain `MountConfig`. Values are typed by clap (`cli/values.rs`); what needs the disk (is
//! SOURCE there, and what is it; is MOUNTPOINT empty) is checked before anything is mounted,
//! so a bad argument costs one line and exit code 2.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;

use crate::source::Source;
use crate::store::backends::object::RemoteOptions;
use crate::views::ViewKind;

mod cache;
mod mountpoint;
mod performance;
mod security;
pub mod serve;
mod service;
mod source;
pub mod values;
mod view;

pub use cache::CacheFlags;
pub use performance::PerformanceFlags;
pub use security::SecurityFlags;
pub use service::ServiceFlags;
pub use source::SourceFlags;
pub use view::ViewFlags;

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
    #[command(flatten)]
    pub store: SourceFlags,
    #[command(flatten)]
    pub view: ViewFlags,
    #[command(flatten)]
    pub security: SecurityFlags,
    #[command(flatten)]
    pub cache: CacheFlags,
    #[command(flatten)]
    pub performance: PerformanceFlags,
    #[command(flatten)]
    pub service: ServiceFlags,
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

/// A problem with the arguments: printed as one line, exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

fn usage(msg: impl Into<String>) -> UsageError {
    UsageError(msg.into())
}

impl Args {
    pub fn validate(self) -> Result<MountConfig, UsageError> {
        self.validate_with(mountpoint::check)
    }

    /// `validate`, with MOUNTPOINT checked by `mountpoint` (`serve` has none). Each section
    /// turns into its part of the configuration; SOURCE is located on disk first, so the
    /// sections see what it really is (a local directory may be an Icechunk repository).
    pub(crate) fn validate_with(
        self,
        mountpoint: impl FnOnce(&Path) -> Result<PathBuf, UsageError>,
    ) -> Result<MountConfig, UsageError> {
        let parsed = Source::parse(&self.source)
            .map_err(|e| usage(format!("bad SOURCE {:?}: {e}", self.source)))?;
        let writable = !self.security.read_only(&parsed, self.view.view);
        let source = parsed.locate(writable).map_err(usage)?;
        let icechunk_ref = self.store.icechunk_ref();
        let remote = self.store.remote(&source)?;
        let read_only = self.security.read_only(&source, self.view.view);
        let perms = self.security.perms();
        let allow_other = self.security.allow_other;
        let authorize_virtual = self.security.authorize_virtual(&source)?;
        let mountpoint = mountpoint(&self.mountpoint)?;
        let caches = self.cache.caches(&source)?;
        let spill = self.performance.spill();
        let service = self.service;
        Ok(MountConfig {
            source,
            source_text: self.source,
            mountpoint,
            foreground: service.foreground,
            read_only,
            view: self.view.view,
            v2_ome: self.view.v2_ome,
            allow_other,
            perms,
            metadata_ttl: caches.metadata_ttl,
            fuse_threads: self.performance.fuse_threads.min(64),
            read_ahead: self.performance.read_ahead,
            verbose: service.verbose,
            log_file: service.log_file,
            remote,
            cache_size: caches.cache_size,
            array_prefetch: caches.array_prefetch,
            stats_interval: service.stats_interval,
            metrics_addr: service.metrics_addr,
            disk_cache: caches.disk_cache,
            spill,
            metadata_cache_entries: self.cache.metadata_cache_entries,
            icechunk_ref,
            authorize_virtual,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The headings of `--help`, in their order.
    const HEADINGS: [&str; 6] = ["Source", "View", "Security", "Cache", "Performance", "Service"];

    fn parse(args: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("zarr-mount").chain(args.iter().copied()))
    }

    #[test]
    fn help_shows_each_section_under_its_heading() {
        let help = Args::command().render_help().to_string();
        let at = |h: &str| help.find(&format!("\n{h}:\n")).unwrap_or_else(|| panic!("{h}: {help}"));
        let starts = HEADINGS.map(at);
        assert!(starts.windows(2).all(|w| w[0] < w[1]), "{help}");
        let cache = &help[at("Cache")..at("Performance")];
        assert!(cache.contains("--cache-size <SIZE>") && !cache.contains("--view"), "{cache}");
        let source = &help[at("Source")..at("View")];
        assert!(source.contains("--endpoint-url <URL>") && source.contains("--ref <REF>"));
    }

    #[test]
    fn values_are_typed_by_clap() {
        let a = parse(&["s", "m", "--cache-size", "12G", "--file-mode", "0640"]).unwrap();
        let a2 = parse(&["s", "m", "--metadata-ttl", "0.5", "--read-ahead", "4M"]).unwrap();
        assert_eq!(a.cache.cache_size, Some(12 << 30));
        assert_eq!(a.security.file_mode, Some(0o640));
        assert_eq!(a2.cache.metadata_ttl, Some(Duration::from_millis(500)));
        assert_eq!(a2.performance.read_ahead, Some(4 << 20));
        for (flag, bad) in [
            ("--cache-size", "12Q"),
            ("--cache-max-size", "lots"),
            ("--spill-threshold", "1.5X"),
            ("--file-mode", "0999"),
            ("--metadata-ttl", "1e10"),
            ("--metadata-cache-entries", "0"),
            ("--fuse-threads", "0"),
            ("--endpoint-url", "127.0.0.1:9000"),
            ("--metrics-addr", "nowhere:x"),
            ("--profile", "a b"),
            ("--ref", "branch:"),
        ] {
            let e = parse(&["s", "m", flag, bad]).expect_err(flag);
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{flag}: {e}");
            assert!(e.to_string().contains(flag), "{flag}: {e}");
        }
    }

    #[test]
    fn sections_make_the_config() {
        let tmp = tempfile::tempdir().unwrap();
        let (src, mnt) = (tmp.path().join("src"), tmp.path().join("mnt"));
        std::fs::create_dir(&src).unwrap();
        std::fs::create_dir(&mnt).unwrap();
        let (src, mnt) = (src.to_str().unwrap(), mnt.to_str().unwrap());
        let cfg = |args: &[&str]| parse(&[&[src, mnt], args].concat()).unwrap().validate();
        let plain = cfg(&[]).unwrap();
        assert_eq!(plain.metadata_ttl, Duration::from_secs(1));
        assert!(!plain.read_only && plain.disk_cache.is_none());
        let v2 = cfg(&["--view", "v2", "--write-buffer-budget", "1M", "--fuse-threads", "99"]);
        let v2 = v2.unwrap();
        assert!(v2.read_only);
        assert_eq!((v2.spill.budget, v2.fuse_threads), (1 << 20, 64));
        let refused = |args: &[&str], want: &str| {
            let e = cfg(args).expect_err(want).0;
            assert!(e.contains(want) && !e.contains('\n'), "{args:?}: {e}");
        };
        refused(&["--ref", "main"], "--ref applies only to Icechunk sources");
        refused(&["--authorize-virtual", "all"], "--authorize-virtual applies only");
        refused(&["--region", "x"], "apply only to object-store sources");
        refused(&["--cache-dir", src], "--cache-dir applies only to object-store sources");
        refused(&["--immutable"], "--immutable needs --cache-dir");
        let missing = parse(&[&format!("{src}/missing"), mnt]).unwrap().validate();
        assert!(missing.unwrap_err().0.contains("no such file or directory"));
    }
}
