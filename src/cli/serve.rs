//! `zarr-mount serve SOURCE [--listen ADDR:PORT] ...`: the mount's own flags (source, store,
//! cache and view options: one definition, `Args`), less those only a kernel mount has, plus
//! the server's own, validated into a `MountConfig` and a `ServeConfig`.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{Args as _, CommandFactory, FromArgMatches};

use super::{usage, values, Args, MountConfig, UsageError};
use crate::serve::access::{Access, Cors};
use crate::serve::{Limits, ServeConfig};
use crate::views::ViewKind;

/// The flags `serve` adds.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Server")]
pub struct ServeFlags {
    /// Address and port to listen on. Anything but a loopback address needs --token-file
    /// (or --allow-anonymous to serve anyone who can reach it).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8080", value_parser = values::listen)]
    pub listen: SocketAddr,
    /// Serve this view under /VIEW/ (repeatable). Default: every view.
    #[arg(long = "view", id = "serve_view", value_enum, value_name = "VIEW")]
    pub views: Vec<ViewKind>,
    /// Connections served at once; more wait to be accepted.
    #[arg(long, value_name = "N", default_value = "256", value_parser = values::at_least_one)]
    pub max_connections: usize,
    /// Close a connection that moved no byte either way for this long (idle keep-alive
    /// connections, clients too slow to take their response).
    #[arg(long, value_name = "SECONDS", default_value = "60", value_parser = values::at_least_one)]
    pub idle_timeout: usize,
    /// Lookups, listings and reads in flight at once over all connections.
    #[arg(long, value_name = "N", default_value = "64", value_parser = values::at_least_one)]
    pub backend_requests: usize,
    /// Threads answering requests; a new connection goes to the one with the fewest open
    /// [default: the number of CPUs this process may use].
    #[arg(long, value_name = "N", value_parser = values::at_least_one)]
    pub http_threads: Option<usize>,
    #[command(flatten)]
    pub security: ServeSecurityFlags,
}

/// Who may read from the server, and over what.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Security")]
pub struct ServeSecurityFlags {
    /// A file holding the bearer token every request must carry
    /// (`Authorization: Bearer TOKEN`).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// Serve a non-loopback --listen address without a token.
    #[arg(long)]
    pub allow_anonymous: bool,
    /// Let browser scripts from this origin read (e.g. https://viewer.example.org; `*` for
    /// any; repeatable). Off by default.
    #[arg(long, value_name = "ORIGIN", value_parser = values::origin)]
    pub cors_origin: Vec<String>,
    /// Serve HTTPS with this PEM certificate chain (needs --tls-key).
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

/// The mount's flags that mean nothing over HTTP: hidden from `serve --help`, refused if given.
const MOUNT_ONLY: &[&str] = &[
    "foreground",
    "allow_other",
    "uid",
    "gid",
    "file_mode",
    "dir_mode",
    "read_ahead",
    "fuse_threads",
    "spill_dir",
    "write_buffer_budget",
    "spill_threshold",
    "log_file",
    "fstab_options",
];

/// More threads than any machine's cores would only cost memory and wake-ups.
const MAX_HTTP_THREADS: usize = 1024;

/// Stands for the MOUNTPOINT `serve` does not take (never checked or used).
const NO_MOUNTPOINT: &str = "-";

/// The `serve` command: `Args` with MOUNTPOINT gone, `--view` repeatable, the mount-only
/// flags hidden, and `ServeFlags`.
pub fn command() -> clap::Command {
    let mut cmd = Args::command()
        .name("zarr-mount serve")
        .bin_name("zarr-mount serve")
        .after_help("URLs: /raw/, /unsharded/, /decoded/, /v2/, /v2-decoded/, /flat/; / lists them. See docs/SERVING.md.")
        .mut_arg("mountpoint", |a| a.required(false).hide(true).default_value(NO_MOUNTPOINT))
        .mut_arg("view", |a| a.long("mount-view").hide(true))
        .mut_arg("read_only", |a| a.hide(true));
    for id in MOUNT_ONLY {
        cmd = cmd.mut_arg(*id, |a| a.hide(true));
    }
    // After augment_args: ServeFlags' doc comment would be the about otherwise.
    ServeFlags::augment_args(cmd).about(ABOUT)
}

/// What `zarr-mount serve` does, in one line (its --help, the man page, the completions).
pub const ABOUT: &str =
    "Serve every view of a Zarr store over HTTP (read-only), each under /VIEW/.";

/// `zarr-mount serve ...` as parsed, before validation.
#[derive(Debug)]
pub struct ServeArgs {
    pub args: Args,
    pub flags: ServeFlags,
    /// Mount-only flags given on the command line (refused by `validate`).
    refused: Vec<String>,
}

/// Parse `argv` (its first item is the program, as `zarr-mount serve`).
pub fn parse_from(argv: impl IntoIterator<Item = OsString>) -> Result<ServeArgs, clap::Error> {
    let cmd = command();
    let mut matches = cmd.clone().try_get_matches_from(argv)?;
    let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    let mut refused = Vec::new();
    for id in MOUNT_ONLY.iter().copied().chain(["view"]) {
        if given(id) {
            let arg = cmd.get_arguments().find(|a| a.get_id() == id);
            let long = arg.and_then(|a| a.get_long()).unwrap_or(id);
            refused.push(format!("--{long} does not apply to serve"));
        }
    }
    if given("mountpoint") {
        refused.push("serve takes one SOURCE and no MOUNTPOINT".into());
    }
    let flags = ServeFlags::from_arg_matches_mut(&mut matches)?;
    let args = Args::from_arg_matches_mut(&mut matches)?;
    Ok(ServeArgs { args, flags, refused })
}

impl ServeArgs {
    pub fn validate(mut self) -> Result<(MountConfig, ServeConfig), UsageError> {
        if let Some(first) = self.refused.first() {
            return Err(usage(first.clone()));
        }
        let f = self.flags;
        let sec = f.security;
        let listen = f.listen;
        let token = match &sec.token_file {
            Some(p) => Some(read_token(p)?),
            None => None,
        };
        if token.is_none() && !sec.allow_anonymous && !listen.ip().is_loopback() {
            return Err(usage(format!(
                "--listen {listen} is not a loopback address: give --token-file, or --allow-anonymous to serve anyone who can reach it"
            )));
        }
        let cors = cors(sec.cors_origin);
        let tls = match (&sec.tls_cert, &sec.tls_key) {
            (Some(cert), Some(key)) => Some(crate::serve::tls::load(cert, key).map_err(usage)?),
            _ => None,
        };
        let mut views: Vec<ViewKind> = Vec::new();
        for v in if f.views.is_empty() { crate::serve::paths::ALL_VIEWS.to_vec() } else { f.views }
        {
            if !views.contains(&v) {
                views.push(v);
            }
        }
        // Every view is read-only over HTTP; the mount's view stays its default and each
        // served view is built from this configuration with its own.
        self.args.security.read_only = true;
        let cfg = self.args.validate_with(|_| Ok(PathBuf::from(NO_MOUNTPOINT)))?;
        let limits = Limits {
            max_connections: f.max_connections,
            idle_timeout: Duration::from_secs(f.idle_timeout as u64),
            backend_requests: f.backend_requests,
            ..Limits::default()
        };
        let http_threads = match f.http_threads {
            Some(n) if n > MAX_HTTP_THREADS => {
                return Err(usage(format!("--http-threads {n}: at most {MAX_HTTP_THREADS}")))
            }
            Some(n) => n,
            None => crate::serve::fronts::default_threads(),
        };
        let access = Access { token, cors };
        let serve = ServeConfig { listen, views, access, tls, limits, http_threads };
        Ok((cfg, serve))
    }
}

/// The token of `--token-file`: its content without surrounding whitespace.
fn read_token(p: &std::path::Path) -> Result<String, UsageError> {
    let text = std::fs::read_to_string(p).map_err(|e| {
        usage(format!("--token-file {}: {}", p.display(), crate::source::io_reason(&e)))
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(usage(format!("--token-file {}: the file is empty", p.display())));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(usage(format!("--token-file {}: the token has whitespace in it", p.display())));
    }
    Ok(token.to_string())
}

/// `--cors-origin` (each one already an origin or `*`).
fn cors(origins: Vec<String>) -> Cors {
    if origins.is_empty() {
        Cors::Off
    } else if origins.iter().any(|o| o == "*") {
        Cors::Any
    } else {
        Cors::Origins(origins)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<(MountConfig, ServeConfig), String> {
        let argv = ["zarr-mount serve"].iter().chain(args).map(OsString::from);
        let parsed = parse_from(argv).map_err(|e| e.to_string())?;
        parsed.validate().map_err(|e| e.0)
    }

    #[test]
    fn help_says_what_serve_does() {
        let help = command().render_help().to_string();
        assert!(help.starts_with(ABOUT), "{help}");
    }

    #[test]
    fn defaults_serve_every_view_on_loopback() {
        let dir = tempfile::tempdir().unwrap();
        let (cfg, serve) = parse(&[dir.path().to_str().unwrap()]).unwrap();
        assert!(cfg.read_only);
        assert_eq!(serve.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(serve.views, crate::serve::paths::ALL_VIEWS.to_vec());
        assert_eq!(serve.access.cors, Cors::Off);
        assert!(serve.access.token.is_none());
    }

    #[test]
    fn views_and_store_options() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let (cfg, serve) = parse(&[
            d,
            "--view",
            "v2",
            "--view",
            "raw",
            "--view",
            "v2",
            "--metadata-ttl",
            "5",
            "--listen",
            "localhost:0",
        ])
        .unwrap();
        assert_eq!(serve.views, [ViewKind::V2, ViewKind::Raw]);
        assert_eq!(cfg.metadata_ttl, Duration::from_secs(5));
        assert_eq!(serve.listen.port(), 0);
    }

    #[test]
    fn bad_arguments_are_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "abc\n").unwrap();
        let t = token.to_str().unwrap();
        let err = |args: &[&str]| parse(args).expect_err(&format!("{args:?} accepted"));
        assert!(err(&[d, "--listen", "0.0.0.0:8080"]).contains("not a loopback address"));
        assert!(parse(&[d, "--listen", "0.0.0.0:8080", "--token-file", t]).is_ok());
        assert!(parse(&[d, "--listen", "0.0.0.0:8080", "--allow-anonymous"]).is_ok());
        assert!(err(&[d, "--listen", "nowhere"]).contains("--listen"));
        assert!(err(&[d, "--uid", "0"]).contains("--uid does not apply to serve"));
        assert!(err(&[d, "/mnt"]).contains("no MOUNTPOINT"));
        assert!(err(&[d, "--cors-origin", "https://a.example/path"]).contains("--cors-origin"));
        assert!(err(&[d, "--token-file", "/nonexistent/token"]).contains("--token-file"));
        assert!(err(&[d, "--max-connections", "0"]).contains("at least 1"));
        assert!(err(&[d, "--idle-timeout", "0"]).contains("--idle-timeout"));
        for e in [err(&[d, "--listen", "0.0.0.0:1"]), err(&[d, "--uid", "0"])] {
            assert!(!e.contains('\n'), "{e}");
        }
        let (_, s) =
            parse(&[d, "--cors-origin", "https://a.example", "--cors-origin", "*"]).unwrap();
        assert_eq!(s.access.cors, Cors::Any);
        let (_, s) = parse(&[d, "--token-file", t]).unwrap();
        assert_eq!(s.access.token.as_deref(), Some("abc"));
    }
}
