//! The "Performance" section: the kernel's read-ahead, FUSE threads, and where write buffers go.

use std::path::PathBuf;

use crate::fs::write::spill::SpillConfig;

use super::values;

#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Performance")]
pub struct PerformanceFlags {
    /// The kernel's read-ahead window for this mount, e.g. 4M; 0 leaves the kernel's default
    /// (128K). Setting it needs root (it is the mount's /sys/class/bdi/*/read_ahead_kb).
    /// Default: 1M, the largest READ the mount negotiates.
    #[arg(long, value_name = "SIZE", value_parser = values::size)]
    pub read_ahead: Option<u64>,
    /// Threads reading FUSE requests (the work itself runs on a tokio pool; at most 64).
    #[arg(long, value_name = "N", default_value = "2", value_parser = values::at_least_one)]
    pub fuse_threads: usize,
    /// Where files open for writing go once too large for memory (anonymous files: nothing is
    /// left there after a crash). Default: the system temp directory.
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Memory for the write buffers of all open files together, e.g. 256M (the default);
    /// beyond it, and for any file past --spill-threshold, buffers go to --spill-dir.
    #[arg(long, value_name = "SIZE", value_parser = values::size)]
    pub write_buffer_budget: Option<u64>,
    /// Size above which one file open for writing goes to --spill-dir (default 8M).
    #[arg(long, value_name = "SIZE", value_parser = values::size)]
    pub spill_threshold: Option<u64>,
}

impl PerformanceFlags {
    /// `--spill-dir`, `--write-buffer-budget`, `--spill-threshold` over the defaults.
    pub(super) fn spill(&self) -> SpillConfig {
        let mut cfg = SpillConfig::default();
        if let Some(dir) = &self.spill_dir {
            cfg.dir = dir.clone();
        }
        cfg.budget = self.write_buffer_budget.unwrap_or(cfg.budget);
        cfg.threshold = self.spill_threshold.unwrap_or(cfg.threshold);
        cfg
    }
}
