//! The "Service" section: running as a daemon or service (foreground, logs, stats, metrics,
//! an environment file, fstab options).

use std::path::PathBuf;

use super::values;

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Service")]
pub struct ServiceFlags {
    /// Stay in the foreground (default: daemonize once the mount is live).
    #[arg(short, long)]
    pub foreground: bool,
    /// More log output (-v: debug, -vv: trace). RUST_LOG overrides, e.g. RUST_LOG=zarr_mount=debug.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Append logs to this file (a daemon otherwise discards them once the mount is live).
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,
    /// Log one INFO line of counters (requests per operation, errors, bytes read/written) every
    /// SECS seconds; 0 = never.
    #[arg(long, value_name = "SECS", default_value_t = 0)]
    pub stats_interval: u64,
    /// Serve Prometheus metrics at http://ADDR/metrics: HOST:PORT, or a bare PORT for the
    /// loopback interface (e.g. 9464). Off by default; see docs/OPERATIONS.md "Metrics".
    #[arg(long, value_name = "HOST:PORT", value_parser = values::metrics_addr)]
    pub metrics_addr: Option<String>,
    /// Read KEY=VALUE lines (e.g. AWS_SECRET_ACCESS_KEY=...) into the environment before
    /// anything else, so credentials stay off the command line and out of fstab.
    #[arg(long, value_name = "PATH")]
    pub env_file: Option<PathBuf>,
    /// Mount options in fstab form (`ro,view=raw,_netdev,key=value`), as the mount(8) helper
    /// mount.fuse.zarr-mount passes them; see docs/CONFIGURATION.md "fstab options".
    #[arg(long, value_name = "OPTIONS", allow_hyphen_values = true)]
    pub fstab_options: Option<String>,
}
