use clap::Parser;
use tracing_subscriber::EnvFilter;

use zarr_mount::cli::Args;
use zarr_mount::daemon::{daemonize, Readiness};

fn init_logging(verbose: u8) {
    // icechunk's local storage warns, on every open, that it is unsafe for concurrent commits:
    // nothing to a reader.
    let default = match verbose {
        // aws_config warns of each credential source that failed: the mount's own error
        // names them all, on one line.
        0 => "zarr_mount=info,fuser=error,icechunk_arrow_object_store=error,aws_config=error,warn",
        1 => "zarr_mount=debug,fuser=warn,info",
        _ => "zarr_mount=trace,fuser=debug,debug",
    };
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // The AWS SDK's client logs whole requests and answers at trace level (STS answers hold
    // credentials) and its signer the canonical request (a session token): never below info,
    // whatever RUST_LOG asks.
    for quiet in
        ["aws_smithy_runtime", "aws_smithy_http_client", "aws_sigv4", "aws_smithy_runtime_api"]
    {
        filter = filter.add_directive(format!("{quiet}=info").parse().expect("a valid directive"));
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

fn usage_exit(msg: &str) -> ! {
    eprintln!("zarr-mount: {msg}");
    std::process::exit(2);
}

/// A command-line error as one line (clap's own spans several: the error, a tip or the
/// possible values, the usage); help and version print as clap prints them.
fn clap_exit(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let text = e.render().to_string();
    let parts: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
        })
        .collect();
    let line = parts.join("; ");
    usage_exit(line.strip_prefix("error: ").unwrap_or(&line));
}

/// `--fstab-options "ro,view=raw,..."`: parse again with the mapped flags appended.
fn expand_fstab_options(args: Args) -> Args {
    let Some(opts) = &args.service.fstab_options else { return args };
    let extra = zarr_mount::fstab::to_args(opts).unwrap_or_else(|e| usage_exit(&e));
    let argv: Vec<std::ffi::OsString> =
        std::env::args_os().chain(extra.into_iter().map(Into::into)).collect();
    match Args::try_parse_from(argv) {
        Ok(mut a) => {
            a.service.fstab_options = None;
            a
        }
        Err(e) => clap_exit(e),
    }
}

/// `--env-file PATH`: KEY=VALUE lines (blank lines, `#` comments and `export ` allowed; values
/// may be quoted) into the environment. Runs before any thread exists.
fn load_env_file(path: &std::path::Path) -> Result<(), String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("--env-file {}: {e}", path.display()))?;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((k, v)) = line.split_once('=') else {
            return Err(format!("--env-file {}: line {} is not KEY=VALUE", path.display(), n + 1));
        };
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(v);
        std::env::set_var(k.trim(), v);
    }
    Ok(())
}

/// glibc's malloc gives threads arenas of their own (up to 8 per core) and keeps what is freed
/// in each; the read buffers of a mount (parts of up to 8 MiB, allocated on one thread, freed on
/// another) then pile up in several arenas, and the peak RSS depends on which threads happened
/// to run what (measured, `git show 6624a29:BENCHMARKS.md` 10d: +10 to +30 MiB with the disk cache's extra threads).
/// One arena, and buffers of 1 MiB or more mapped on their own (given back to the system as soon
/// as freed), keep the RSS at what is live. `serve` instead gives each HTTP thread (one per
/// CPU by default) an arena: with one, the threads' small allocations of every request queue
/// on its lock (measured: about a tenth of the throughput, `scripts/bench_serve.py`). A
/// `MALLOC_ARENA_MAX` or `MALLOC_MMAP_THRESHOLD_` set in the environment is left to rule. Runs
/// before any thread exists.
fn tune_malloc(serving: bool) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            let arenas = if serving { zarr_mount::serve::fronts::default_threads() + 1 } else { 1 };
            // SAFETY: mallopt before any other thread exists.
            unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas as libc::c_int) };
        }
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
            // SAFETY: as above.
            unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20) };
        }
    }
}

/// `zarr-mount --generate-docs DIR`: write the man page and completions, then exit.
fn generate_docs() {
    let mut argv = std::env::args_os().skip(1);
    if argv.next().as_deref() != Some(zarr_mount::generated_docs::FLAG.as_ref()) {
        return;
    }
    let (Some(dir), None) = (argv.next(), argv.next()) else {
        usage_exit(&format!("usage: zarr-mount {} DIR", zarr_mount::generated_docs::FLAG));
    };
    match zarr_mount::generated_docs::write_all(std::path::Path::new(&dir)) {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            std::process::exit(0);
        }
        Err(e) => {
            eprintln!("zarr-mount: {}: {e}", std::path::Path::new(&dir).display());
            std::process::exit(1);
        }
    }
}

/// `zarr-mount serve SOURCE ...`: every view over HTTP, in the foreground, until a signal.
fn serve_main() -> ! {
    let argv = std::iter::once("zarr-mount serve".into()).chain(std::env::args_os().skip(2));
    let parsed = zarr_mount::cli::serve::parse_from(argv).unwrap_or_else(|e| clap_exit(e));
    if let Some(p) = &parsed.args.service.env_file {
        if let Err(e) = load_env_file(p) {
            usage_exit(&e);
        }
    }
    init_logging(parsed.args.service.verbose);
    let (cfg, serve) = parsed.validate().unwrap_or_else(|e| usage_exit(&e.to_string()));
    if let Err(e) = zarr_mount::serving::run(cfg, serve) {
        eprintln!("zarr-mount: {e}");
        std::process::exit(if zarr_mount::mount::source_refused() { 2 } else { 1 });
    }
    std::process::exit(0);
}

fn main() {
    generate_docs();
    // `serve` as the first argument is the subcommand (a SOURCE directory named so is
    // spelled ./serve).
    let serving = std::env::args_os().nth(1).is_some_and(|a| a == "serve");
    tune_malloc(serving);
    if serving {
        // A terminal hangup must not stop the server either.
        // SAFETY: setting a signal disposition before any thread exists.
        unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
        serve_main();
    }
    // A terminal hangup or `systemctl reload` must not kill a mount; the session logs it.
    // SAFETY: setting a signal disposition before any thread exists.
    unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
    let args = expand_fstab_options(Args::try_parse().unwrap_or_else(|e| clap_exit(e)));
    if let Some(p) = &args.service.env_file {
        if let Err(e) = load_env_file(p) {
            usage_exit(&e);
        }
    }
    init_logging(args.service.verbose);
    let cfg = match args.validate() {
        Ok(cfg) => cfg,
        Err(e) => usage_exit(&e.to_string()),
    };
    let readiness = if cfg.foreground { Readiness::none() } else { daemonize() };
    let foreground = cfg.foreground;
    if let Err(e) = zarr_mount::mount::run(cfg, readiness) {
        // A daemon's failure that reached its parent is printed there: one line, not two.
        if foreground || !zarr_mount::daemon::failure_reported() {
            eprintln!("zarr-mount: {e}");
        }
        // A wrong endpoint, credentials or bucket: a usage error (2), as a bad argument.
        std::process::exit(if zarr_mount::mount::source_refused() { 2 } else { 1 });
    }
}
