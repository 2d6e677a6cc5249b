//! The typed values of the flags, as clap value parsers: a bad one is clap's one-line error
//! (`invalid value '12Q' for '--cache-size <SIZE>': ...`) and exit code 2, before anything
//! else runs.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// A size such as `512M`, `2G`, `1.5GiB`, `65536` or `0` (bytes; K/M/G/T are powers of 1024).
pub fn size(s: &str) -> Result<u64, String> {
    crate::store::layers::cache::parse_size(s)
}

/// A number of seconds, fractions allowed, from 0 to 10^9.
pub fn seconds(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(n) if (0.0..=1e9).contains(&n) => Ok(Duration::from_secs_f64(n)),
        _ => Err("expected a number of seconds >= 0, e.g. 60 or 0.5".into()),
    }
}

/// A count that must be at least 1.
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("must be a whole number, at least 1".into()),
    }
}

/// `--endpoint-url`: an http(s) URL with a host (the S3 client panics on one without a scheme).
pub fn endpoint_url(e: &str) -> Result<String, String> {
    let url = url::Url::parse(e).map_err(|err| match err {
        url::ParseError::RelativeUrlWithoutBase => {
            "not a URL: give its scheme, e.g. http://127.0.0.1:9000".to_string()
        }
        err => format!("not a URL: {err}"),
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("the scheme must be http or https".into());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("no host".into());
    }
    Ok(e.to_string())
}

/// `--metrics-addr`: HOST:PORT, or a bare PORT for the loopback interface.
pub fn metrics_addr(s: &str) -> Result<String, String> {
    crate::metrics::server::parse_addr(s)
}

/// `--profile`: a name that can be an AWS profile (the `[profile NAME]` of ~/.aws/config).
pub fn profile(p: &str) -> Result<String, String> {
    if p.is_empty() || p.chars().any(|c| c.is_whitespace() || c.is_control() || c == ']') {
        return Err("not a profile name".into());
    }
    Ok(p.to_string())
}

/// `-o KEY=VALUE`: the key lowercased. Not a plain value parser: clap's error would echo the
/// value, which may be a secret.
#[derive(Clone, Copy)]
pub struct KeyValue;

impl clap::builder::TypedValueParser for KeyValue {
    type Value = (String, String);

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        match value.to_str().and_then(|o| o.split_once('=')) {
            Some((k, v)) if !k.trim().is_empty() => {
                Ok((k.trim().to_ascii_lowercase(), v.to_string()))
            }
            _ => Err(clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                "-o expects KEY=VALUE (an argument without '=' or without a key was given)\n",
            )),
        }
    }
}

/// `--listen`: `ADDR:PORT` with an IP address (`127.0.0.1:8080`, `[::1]:8080`, `0.0.0.0:80`),
/// or `localhost:PORT`.
pub fn listen(s: &str) -> Result<SocketAddr, String> {
    let bad = || "expected ADDR:PORT, e.g. 127.0.0.1:8080".to_string();
    if let Ok(addr) = s.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    match host {
        "localhost" => Ok(SocketAddr::new(IpAddr::from([127, 0, 0, 1]), port)),
        _ => Err(bad()),
    }
}

/// `--cors-origin`: `*`, or an origin as browsers send it (`scheme://host[:port]`).
pub fn origin(o: &str) -> Result<String, String> {
    let ok = o == "*"
        || url::Url::parse(o).is_ok_and(|u| {
            matches!(u.scheme(), "http" | "https")
                && u.host_str().is_some()
                && u.path() == "/"
                && !o.ends_with('/')
        });
    if !ok {
        return Err("expected * or an origin such as https://viewer.example.org".into());
    }
    Ok(o.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_and_its_refusal() {
        assert_eq!(size("12G"), Ok(12 << 30));
        assert!(size("12Q").is_err());
        assert_eq!(seconds("0.5"), Ok(Duration::from_millis(500)));
        assert!(seconds("-1").is_err() && seconds("1e10").is_err() && seconds("x").is_err());
        assert_eq!(at_least_one("3"), Ok(3));
        assert!(at_least_one("0").is_err());
        assert!(endpoint_url("http://127.0.0.1:9000").is_ok());
        assert!(endpoint_url("127.0.0.1:9000").unwrap_err().contains("give its scheme"));
        assert!(endpoint_url("ftp://h").unwrap_err().contains("scheme"));
        assert!(profile("analytics").is_ok() && profile("a b").is_err() && profile("").is_err());
        assert_eq!(listen("localhost:0").unwrap().port(), 0);
        assert!(listen("[::1]:80").is_ok() && listen("nowhere").is_err());
        assert!(origin("*").is_ok() && origin("https://a.example").is_ok());
        assert!(origin("https://a.example/path").is_err());
    }

    #[test]
    fn a_bad_option_is_refused_without_its_value() {
        use clap::builder::TypedValueParser;
        let cmd = clap::Command::new("t");
        let parse = |s: &str| KeyValue.parse_ref(&cmd, None, std::ffi::OsStr::new(s));
        assert_eq!(parse(" Region =x=y").unwrap(), ("region".into(), "x=y".into()));
        let e = parse("secret-without-a-key").unwrap_err().to_string();
        assert!(!e.contains("secret") && e.contains("KEY=VALUE"), "{e}");
        assert!(parse("=v").is_err());
    }
}
