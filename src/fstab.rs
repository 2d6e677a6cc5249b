//! fstab / mount(8) options (`-o ro,view=raw,_netdev,...`) turned into zarr-mount flags. Used by
//! `--fstab-options`, which the helper `mount.fuse.zarr-mount` passes on; a pure function so
//! the whole mapping is unit tested.
//!
//! - `ro` -> `--read-only`; `rw` -> nothing; `allow_other` -> `--allow-other`;
//!   `immutable` -> `--immutable`; `no_sign_request` -> `--no-sign-request`;
//! - `view=`, `v2_ome=`, `uid=`, `gid=`, `file_mode=`, `dir_mode=`, `metadata_ttl=`, `cache_size=`, `array_prefetch=`,
//!   `endpoint_url=`, `region=`,
//!   `log_file=`, `fuse_threads=`, `read_ahead=`, `stats_interval=`, `env_file=`,
//!   `metrics_addr=`, `cache_dir=`, `cache_max_size=`, `spill_dir=`, `write_buffer_budget=`,
//!   `spill_threshold=`, `ref=`, `metadata_cache_entries=`, `authorize_virtual=`, `profile=` -> the flag of
//!   the same name;
//! - `verbose`/`debug` -> `-v`;
//! - mount(8)'s generic options (`_netdev`, `noauto`, `nofail`, `user`, `defaults`,
//!   `x-systemd.*`, `x-*`, `comment=`, `exec`, `nosuid`, `noatime`, ...) are dropped;
//! - any other `key=value` -> `-o key=value` (an object_store option); any other bare word is
//!   refused, so a typo does not silently mount something else.
//!
//! Commas separate options; `\,` is a literal comma inside a value.

/// Bare options that become flags (or nothing): `(option, flags)`.
pub const SWITCHES: &[(&str, &[&str])] = &[
    ("ro", &["--read-only"]),
    ("rw", &[]),
    ("allow_other", &["--allow-other"]),
    ("immutable", &["--immutable"]),
    ("no_sign_request", &["--no-sign-request"]),
    ("verbose", &["-v"]),
    ("debug", &["-v"]),
];

/// Options that mount(8), systemd or FUSE's own helpers understand and that mean nothing (or
/// are already implied) for zarr-mount.
pub const DROPPED: &[&str] = &[
    "_netdev",
    "noauto",
    "auto",
    "nofail",
    "user",
    "users",
    "nouser",
    "owner",
    "group",
    "defaults",
    "exec",
    "noexec",
    "suid",
    "nosuid",
    "dev",
    "nodev",
    "atime",
    "noatime",
    "relatime",
    "norelatime",
    "strictatime",
    "nostrictatime",
    "diratime",
    "nodiratime",
    "lazytime",
    "nolazytime",
    "sync",
    "async",
    "dirsync",
    "silent",
    "loud",
    "default_permissions",
];

/// Keys (of `key=value`) dropped the same way.
pub const DROPPED_KEYS: &[&str] =
    &["comment", "fsname", "subtype", "context", "fscontext", "defcontext", "rootcontext"];

/// Keys starting with this (`x-systemd.automount`, `x-gvfs-show`) are dropped too.
pub const DROPPED_PREFIX: &str = "x-";

/// `key=value` options that become `--key-with-dashes value`.
pub const VALUE_FLAGS: &[&str] = &[
    "view",
    "v2_ome",
    "uid",
    "gid",
    "file_mode",
    "dir_mode",
    "metadata_ttl",
    "cache_size",
    "array_prefetch",
    "endpoint_url",
    "region",
    "log_file",
    "fuse_threads",
    "read_ahead",
    "stats_interval",
    "env_file",
    "metrics_addr",
    "cache_dir",
    "cache_max_size",
    "spill_dir",
    "write_buffer_budget",
    "spill_threshold",
    "metadata_cache_entries",
    "ref",
    "authorize_virtual",
    "profile",
];

/// Split on commas not preceded by a backslash; `\,` becomes `,`.
fn split_options(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&',') => {
                cur.push(',');
                chars.next();
            }
            ',' => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter().map(|o| o.trim().to_string()).filter(|o| !o.is_empty()).collect()
}

/// The zarr-mount arguments for an fstab option string. Errors name the option (never its
/// value, which may be a secret).
pub fn to_args(options: &str) -> Result<Vec<String>, String> {
    let mut args = Vec::new();
    for opt in split_options(options) {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v)),
            None => (opt.as_str(), None),
        };
        if key.starts_with(DROPPED_PREFIX) || DROPPED_KEYS.contains(&key) {
            continue;
        }
        if value.is_none() {
            if let Some((_, flags)) = SWITCHES.iter().find(|(name, _)| *name == key) {
                args.extend(flags.iter().map(|f| f.to_string()));
                continue;
            }
        }
        match (key, value) {
            (k, None) if DROPPED.contains(&k) => {}
            (k, Some(v)) if VALUE_FLAGS.contains(&k) => {
                if v.is_empty() {
                    return Err(format!("mount option {k}= needs a value"));
                }
                let flag = format!("--{}", k.replace('_', "-"));
                if v.starts_with('-') {
                    // One argument, or the parser takes `-3` for a flag of its own.
                    args.push(format!("{flag}={v}"));
                } else {
                    args.push(flag);
                    args.push(v.to_string());
                }
            }
            ("", _) => return Err("mount option without a name".to_string()),
            (k, Some(v)) if crate::store::backends::object::is_option_key(k) => {
                args.push("-o".to_string());
                args.push(format!("{k}={v}"));
            }
            (k, _) => return Err(unknown(k)),
        }
    }
    Ok(args)
}

/// The error for an option that is neither ours, mount(8)'s nor an object store's, naming the
/// nearest one of ours when the name looks like a typo of it.
fn unknown(key: &str) -> String {
    let ours = VALUE_FLAGS.iter().chain(SWITCHES.iter().map(|(name, _)| name));
    let nearest = ours.map(|k| (edit_distance(key, k), *k)).min();
    match nearest {
        Some((d, k)) if d <= 2 && d < key.len() => {
            format!("unknown mount option {key:?} (did you mean {k:?}?)")
        }
        _ => format!("unknown mount option {key:?}"),
    }
}

/// Levenshtein distance, with a swap of two neighbours counting as one edit (`veiw`/`view`).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            d[i][j] = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d[i][j] = d[i][j].min(d[i - 2][j - 2] + 1);
            }
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::to_args;

    fn args(s: &str) -> Vec<String> {
        to_args(s).unwrap()
    }

    #[test]
    fn flags_map_onto_cli_flags() {
        assert_eq!(args("ro"), ["--read-only"]);
        assert!(args("rw").is_empty());
        assert_eq!(args("allow_other"), ["--allow-other"]);
        assert_eq!(args("verbose"), ["-v"]);
        assert_eq!(args("debug"), ["-v"]);
    }

    #[test]
    fn values_map_onto_cli_flags() {
        assert_eq!(args("view=raw"), ["--view", "raw"]);
        assert_eq!(args("view=v2-decoded"), ["--view", "v2-decoded"]);
        assert_eq!(args("view=flat"), ["--view", "flat"]);
        assert_eq!(
            args("ref=tag:v1,authorize_virtual=file:///d/"),
            ["--ref", "tag:v1", "--authorize-virtual", "file:///d/"]
        );
        assert_eq!(args("uid=1000,gid=100"), ["--uid", "1000", "--gid", "100"]);
        assert_eq!(args("metadata_ttl=0.5"), ["--metadata-ttl", "0.5"]);
        assert_eq!(args("cache_size=512M"), ["--cache-size", "512M"]);
        assert_eq!(args("spill_dir=/var/tmp/zm"), ["--spill-dir", "/var/tmp/zm"]);
        assert_eq!(args("write_buffer_budget=1G"), ["--write-buffer-budget", "1G"]);
        assert_eq!(args("metadata_cache_entries=1000"), ["--metadata-cache-entries", "1000"]);
        assert_eq!(
            args("cache_dir=/var/cache/z,cache_max_size=20G"),
            ["--cache-dir", "/var/cache/z", "--cache-max-size", "20G"]
        );
        assert_eq!(
            args("endpoint_url=http://127.0.0.1:9000"),
            ["--endpoint-url", "http://127.0.0.1:9000"]
        );
        assert_eq!(args("region=eu-west-1"), ["--region", "eu-west-1"]);
        assert_eq!(args("log_file=/var/log/zm.log"), ["--log-file", "/var/log/zm.log"]);
        assert_eq!(args("fuse_threads=4"), ["--fuse-threads", "4"]);
        assert_eq!(args("read_ahead=4M"), ["--read-ahead", "4M"]);
        assert_eq!(args("array_prefetch=0"), ["--array-prefetch", "0"]);
        assert_eq!(args("stats_interval=60"), ["--stats-interval", "60"]);
        assert_eq!(args("metrics_addr=127.0.0.1:9464"), ["--metrics-addr", "127.0.0.1:9464"]);
        assert_eq!(
            args("env_file=/etc/zarr-mount/data.env"),
            ["--env-file", "/etc/zarr-mount/data.env"]
        );
        // A value that looks like a flag stays the flag's value.
        assert_eq!(args("metadata_ttl=-3"), ["--metadata-ttl=-3"]);
        // Only the first '=' splits.
        assert_eq!(args("endpoint_url=http://h/?a=b"), ["--endpoint-url", "http://h/?a=b"]);
    }

    #[test]
    fn credential_options_map_onto_cli_flags() {
        assert_eq!(args("profile=analytics"), ["--profile", "analytics"]);
        assert_eq!(args("no_sign_request,ro"), ["--no-sign-request", "--read-only"]);
    }

    #[test]
    fn generic_mount_options_are_dropped() {
        let all = "_netdev,noauto,auto,nofail,user,users,defaults,x-systemd.automount,\
                   x-systemd.idle-timeout=60,x-systemd.requires=network-online.target,x-gvfs-show,\
                   comment=systemd.automount,exec,noexec,suid,nosuid,dev,nodev,atime,noatime,relatime";
        assert!(args(all).is_empty(), "{:?}", args(all));
        assert!(args("").is_empty());
        assert!(args(",,").is_empty());
    }

    #[test]
    fn unknown_key_values_pass_through_as_object_store_options() {
        assert_eq!(args("aws_skip_signature=true"), ["-o", "aws_skip_signature=true"]);
        assert_eq!(
            args("ro,view=raw,_netdev,aws_virtual_hosted_style_request=false"),
            ["--read-only", "--view", "raw", "-o", "aws_virtual_hosted_style_request=false"]
        );
        // An escaped comma stays inside the value.
        assert_eq!(
            args(r"aws_session_token=a\,b,ro"),
            ["-o", "aws_session_token=a,b", "--read-only"]
        );
    }

    #[test]
    fn unknown_options_are_named_with_the_nearest_valid_one() {
        let err = |s: &str| to_args(s).unwrap_err();
        assert_eq!(err("ro,veiw=raw"), r#"unknown mount option "veiw" (did you mean "view"?)"#);
        assert_eq!(
            err("cache_szie=1G"),
            r#"unknown mount option "cache_szie" (did you mean "cache_size"?)"#
        );
        assert_eq!(
            err("allow_othr"),
            r#"unknown mount option "allow_othr" (did you mean "allow_other"?)"#
        );
        assert_eq!(err("colour=blue"), r#"unknown mount option "colour""#);
        assert_eq!(err("zz"), r#"unknown mount option "zz""#);
    }

    #[test]
    fn bad_options_are_refused_without_echoing_values() {
        assert!(to_args("bogus").unwrap_err().contains("bogus"));
        assert!(to_args("view=").is_err());
        assert!(to_args("=x").is_err());
    }
}
