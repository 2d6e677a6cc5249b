use clap::Parser;
use tracing_subscriber::EnvFilter;

use zarr_mount::cli::Args;
use zarr_mount::daemon::{daemonize, Readiness};

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "zarr_mount=info,fuser=error,warn",
        1 => "zarr_mount=debug,fuser=warn,info",
        _ => "zarr_mount=trace,fuser=debug,debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).init();
}

fn main() {
    let args = Args::parse();
    init_logging(args.verbose);
    let cfg = match args.validate() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("zarr-mount: {e}");
            std::process::exit(2);
        }
    };
    let readiness = if cfg.foreground { Readiness::none() } else { daemonize() };
    let foreground = cfg.foreground;
    if let Err(e) = zarr_mount::mount::run(cfg, readiness) {
        // A daemon's parent prints the reason it got through the readiness pipe.
        if foreground {
            eprintln!("zarr-mount: {e}");
        }
        std::process::exit(1);
    }
}
