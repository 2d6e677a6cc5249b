//! The command line and fstab options: `fstab::to_args` (the option string mount(8) hands the
//! helper), clap's parsing of any argument list (the typed values of `cli/values.rs`: sizes,
//! seconds, endpoint URLs, metrics addresses, object-store options, refs, numbers), and
//! `Args::validate` of what parses, plus `Source::parse`.
//!
//! Input: the bytes as text; lines are arguments, and the whole text is also tried as one fstab
//! option string (then parsed as `--fstab-options` would append it).
//!
//! Invariants: no panic; every refusal is one line (the message the user sees). Validation runs
//! with SOURCE an s3:// URL, MOUNTPOINT a fixed empty directory and no --cache-dir/--env-file/
//! --log-file, so it touches nothing else on disk and nothing on the network.
#![no_main]

use clap::Parser;
use libfuzzer_sys::fuzz_target;
use zarr_mount::cli::Args;
use zarr_mount::fstab;
use zarr_mount::source::Source;

fn mountpoint() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temp dir")).path()
}

fn one_line(msg: &str) {
    assert!(!msg.contains('\n'), "a message of more than one line: {msg:?}");
}

/// Parse and, if clap accepts the list, validate it against the fixed SOURCE and MOUNTPOINT.
fn parse_and_validate(args: Vec<String>) {
    let argv = std::iter::once("zarr-mount".to_string()).chain(args);
    let Ok(mut parsed) = Args::try_parse_from(argv) else { return };
    parsed.source = "s3://bucket/prefix".into();
    parsed.mountpoint = mountpoint().to_path_buf();
    parsed.cache.cache_dir = None;
    parsed.service.env_file = None;
    parsed.service.log_file = None;
    if let Err(e) = parsed.validate() {
        one_line(&e.to_string());
    }
}

fuzz_target!(init: zarr_mount_fuzz::init(), |data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = Source::parse(text);
    match fstab::to_args(text) {
        Ok(mut mapped) => {
            mapped.extend(["s".to_string(), "m".to_string()]);
            parse_and_validate(mapped);
        }
        Err(e) => one_line(&e),
    }
    let mut args: Vec<String> = text.lines().map(str::to_string).collect();
    args.extend(["s".to_string(), "m".to_string()]);
    parse_and_validate(args);
});
