//! Local S3-compatible servers for tests (scripts/s3-server.sh), one per test, on 127.0.0.1
//! and a free port, stopped on drop (also when the test panics).
//!
//! ```ignore
//! s3_tests!(my_test);            // #[test] my_test::moto and my_test::s3s_fs
//! fn my_test(kind: S3Server) {
//!     let Some(s3) = S3::start(kind) else { return };   // None: could not be installed
//!     let m = Mount::start_with(&format!("s3://{BUCKET}/pre"), &mnt,
//!                               &["--endpoint-url", &s3.endpoint()], ENV);
//!     s3.client().put(...);      // object_store client on the same bucket
//! }
//! ```
//!
//! The servers differ where the tests must not care: moto keeps objects in memory (a restart
//! starts empty) and accepts any credentials; s3s-fs keeps them as files under a directory (a
//! restart keeps them), checks signatures, and answers 500 to HEAD/GET of directory-like keys
//! and to suffix ranges longer than the object.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::ObjectStore;

pub const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/s3-server.sh");
pub const BUCKET: &str = "bkt";
pub const ACCESS_KEY: &str = "test";
/// Also the secret s3s-fs checks signatures against; tests assert it never reaches a log.
pub const SECRET: &str = "test-secret-do-not-log";
/// The daemon's environment for any of these servers.
pub const ENV: &[(&str, &str)] = &[
    ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
    ("AWS_SECRET_ACCESS_KEY", SECRET),
    ("AWS_REGION", "us-east-1"),
];

/// One request moto recorded.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path and query, e.g. `/bkt/pre/a` or `/`.
    pub path: String,
    /// The access key that signed it (None: unsigned).
    pub key: Option<String>,
    /// The service of the signature's scope (`s3`, `sts`).
    pub service: Option<String>,
    /// The body as moto recorded it (form bodies of STS calls are plain text).
    pub body: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum S3Server {
    /// moto (Python), in memory.
    Moto,
    /// s3s-fs (Rust), objects as files.
    S3sFs,
}

impl S3Server {
    /// The KIND argument of scripts/s3-server.sh.
    pub fn name(self) -> &'static str {
        match self {
            S3Server::Moto => "moto",
            S3Server::S3sFs => "s3s-fs",
        }
    }
}

/// One test per server for a function `fn NAME(kind: S3Server)`: `NAME::moto`, `NAME::s3s_fs`.
#[macro_export]
macro_rules! s3_tests {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn moto() {
                super::$name($crate::common::s3::S3Server::Moto)
            }
            #[test]
            fn s3s_fs() {
                super::$name($crate::common::s3::S3Server::S3sFs)
            }
        }
    )*};
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running (or stopped, between `down` and `up`) server with the bucket `BUCKET`.
pub struct S3 {
    pub kind: S3Server,
    dir: tempfile::TempDir,
    pub port: u16,
    running: bool,
    /// moto records every request it answers, headers included (`recorded`).
    recording: bool,
}

impl S3 {
    /// Install (once) and start a server of `kind` with an empty bucket `BUCKET`. None when the
    /// server cannot be installed, e.g. without network, and servers are not required
    /// (`super::server_unavailable`).
    pub fn start(kind: S3Server) -> Option<S3> {
        Self::start_as(kind, false)
    }

    /// A moto that records every request it answers with its headers (`recorded`): which
    /// access key signed which request.
    pub fn start_recording() -> Option<S3> {
        Self::start_as(S3Server::Moto, true)
    }

    fn start_as(kind: S3Server, recording: bool) -> Option<S3> {
        let status = Command::new(SCRIPT)
            .arg("install")
            .arg(kind.name())
            .status()
            .expect("run scripts/s3-server.sh");
        if status.code() == Some(3) {
            super::server_unavailable(kind.name(), "could not be installed (no network?)");
            return None;
        }
        assert!(status.success(), "scripts/s3-server.sh install {} failed: {status}", kind.name());
        let dir = tempfile::tempdir().unwrap();
        let mut s = S3 { kind, dir, port: free_port(), running: false, recording };
        s.up();
        Some(s)
    }

    /// Start the server (again, on the same port) and make sure the bucket exists. moto
    /// starts empty; s3s-fs still has every object it had.
    pub fn up(&mut self) {
        let mut start = Command::new(SCRIPT);
        if self.recording {
            start
                .env("MOTO_ENABLE_RECORDING", "True")
                .env("MOTO_RECORDER_FILEPATH", self.dir.path().join("recording.jsonl"));
        }
        let status = start
            .env("S3S_ACCESS_KEY", ACCESS_KEY)
            .env("S3S_SECRET_KEY", SECRET)
            .arg("start")
            .arg(self.dir.path())
            .arg(self.port.to_string())
            .arg(self.kind.name())
            .status()
            .unwrap();
        assert!(status.success(), "{} did not start:\n{}", self.kind.name(), self.log());
        self.running = true;
        self.create_bucket(BUCKET);
    }

    /// Stop the server; the port stops answering.
    pub fn down(&mut self) {
        let status = Command::new(SCRIPT).arg("stop").arg(self.dir.path()).status().unwrap();
        assert!(status.success());
        self.running = false;
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Create bucket `name` (no error when it exists).
    pub fn create_bucket(&self, name: &str) {
        match self.kind {
            // A bucket is a directory of the data root.
            S3Server::S3sFs => std::fs::create_dir_all(self.data_dir().join(name)).unwrap(),
            // moto accepts unsigned requests: one plain HTTP PUT.
            S3Server::Moto => {
                let port = self.port;
                let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
                write!(s, "PUT /{name} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let mut resp = String::new();
                s.read_to_string(&mut resp).unwrap();
                assert!(
                    resp.starts_with("HTTP/1.1 200") || resp.starts_with("HTTP/1.0 200"),
                    "create bucket: {resp}"
                );
            }
        }
    }

    /// The requests moto recorded (`start_recording`), in order: (method, path and query,
    /// the access key of the Authorization header if signed, the service it was signed for).
    pub fn recorded(&self) -> Vec<Recorded> {
        assert!(self.recording, "start_recording");
        let text =
            std::fs::read_to_string(self.dir.path().join("recording.jsonl")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .map(|v| {
                let header = |name: &str| {
                    v["headers"].as_object().and_then(|h| {
                        h.iter()
                            .find(|(k, _)| k.eq_ignore_ascii_case(name))
                            .and_then(|(_, v)| v.as_str().map(str::to_string))
                    })
                };
                // `AWS4-HMAC-SHA256 Credential=KEY/DATE/REGION/SERVICE/aws4_request, ...`
                let scope = header("authorization").and_then(|a| {
                    let c = a.split("Credential=").nth(1)?.split([',', ' ']).next()?.to_string();
                    let parts: Vec<&str> = c.split('/').collect();
                    Some((parts.first()?.to_string(), parts.get(3)?.to_string()))
                });
                let url = v["url"].as_str().unwrap_or("");
                let path = url
                    .split_once("://")
                    .map_or(url, |(_, r)| &r[r.find('/').unwrap_or(r.len())..]);
                Recorded {
                    method: v["method"].as_str().unwrap_or("").to_string(),
                    path: path.to_string(),
                    key: scope.as_ref().map(|s| s.0.clone()),
                    service: scope.map(|s| s.1),
                    body: {
                        use base64::Engine;
                        let body = v["body"].as_str().unwrap_or("");
                        match v["body_encoded"].as_bool() {
                            Some(true) => base64::engine::general_purpose::STANDARD
                                .decode(body)
                                .map(|b| String::from_utf8_lossy(&b).into_owned())
                                .unwrap_or_default(),
                            _ => body.to_string(),
                        }
                    },
                }
            })
            .collect()
    }

    /// Where s3s-fs keeps its buckets (one directory each).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{}.log", self.kind.name())))
            .unwrap_or_default()
    }

    /// The requests the server answered after `from` bytes of its log (`log().len()`), as
    /// request lines: `"GET /bkt/pre/a?list-type=2&... HTTP/1.1"`, `"PUT /bkt/pre/x HTTP/1.1"`.
    pub fn requests_since(&self, from: usize) -> Vec<String> {
        let log = self.log();
        let lines = log.get(from..).unwrap_or("").lines();
        match self.kind {
            // werkzeug: `127.0.0.1 - - [date] "GET /bkt/x HTTP/1.1" 200 -`, partly coloured
            S3Server::Moto => lines
                .filter_map(|l| l.split('"').nth(1).map(strip_ansi))
                .filter(|r| !r.starts_with("GET / "))
                .collect(),
            // s3s at debug: `... s3s::service: req: Request { method: GET, uri: /bkt/x?..., ...`
            S3Server::S3sFs => lines
                .map(strip_ansi)
                .filter_map(|l| {
                    let rest = &l[l.find("req: Request { method: ")? + 23..];
                    let (method, rest) = rest.split_once(", uri: ")?;
                    let uri = rest.split([',', ' ']).next()?;
                    Some(format!("{method} {uri} HTTP/1.1"))
                })
                .filter(|r| !r.starts_with("GET / "))
                .collect(),
        }
    }

    /// The requests since `from`, once a GET of each Zarr metadata name in `dir` is among them
    /// (they are fetched in the background: at mount start, beside a `*.zarr` lookup), and
    /// checked to be one GET each.
    pub fn document_gets_since(&self, from: usize, dir: &str) -> Vec<String> {
        use std::time::{Duration, Instant};
        let names = ["zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"];
        let gets_of = |reqs: &[String], name: &str| {
            let path = format!("/{dir}/{name} ");
            reqs.iter().filter(|r| r.starts_with("GET ") && r.contains(&path)).count()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut reqs = self.requests_since(from);
        while names.iter().any(|n| gets_of(&reqs, n) == 0) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            reqs = self.requests_since(from);
        }
        for name in names {
            assert_eq!(gets_of(&reqs, name), 1, "{dir}/{name}: {reqs:#?}");
        }
        reqs
    }

    /// An object_store client on `BUCKET`, for putting test data in and checking what the
    /// mount wrote.
    pub fn client(&self) -> Arc<dyn ObjectStore> {
        Arc::new(
            AmazonS3Builder::new()
                .with_endpoint(self.endpoint())
                .with_allow_http(true)
                .with_bucket_name(BUCKET)
                .with_region("us-east-1")
                .with_access_key_id(ACCESS_KEY)
                .with_secret_access_key(SECRET)
                .build()
                .unwrap(),
        )
    }

    /// The daemon's own backend on `BUCKET/prefix`, for tests of what it asks the server.
    pub fn backend(&self, prefix: &str) -> zarr_mount::store::backends::object::ObjectStoreBackend {
        use zarr_mount::store::backends::object::{ObjectStoreBackend, RemoteOptions};
        let opts = RemoteOptions {
            endpoint_url: Some(self.endpoint()),
            region: Some("us-east-1".into()),
            options: vec![
                ("aws_access_key_id".into(), ACCESS_KEY.into()),
                ("aws_secret_access_key".into(), SECRET.into()),
            ],
            ..Default::default()
        };
        let url = format!("s3://{BUCKET}/{prefix}");
        ObjectStoreBackend::open(zarr_mount::source::Cloud::S3, &url, &opts).unwrap()
    }
}

impl S3 {
    /// Put objects through the object_store client (blocking; for test data).
    pub fn put_all<K: AsRef<str>, V: AsRef<[u8]>>(&self, objects: &[(K, V)]) {
        use object_store::{ObjectStoreExt, PutPayload};
        let client = self.client();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            for (k, v) in objects {
                let payload = PutPayload::from(bytes::Bytes::copy_from_slice(v.as_ref()));
                let key = object_store::path::Path::from(k.as_ref());
                client.put(&key, payload).await.unwrap();
            }
        });
    }

    pub fn put(&self, key: &str, data: &[u8]) {
        self.put_all(&[(key, data)]);
    }

    /// PUT an object under exactly `key`, around object_store (which refuses to write some
    /// keys): one unsigned request with every byte but letters, digits and '/'
    /// percent-encoded, so no '.' segment is normalized away. moto only (it accepts
    /// unsigned requests; s3s-fs checks signatures).
    pub fn put_raw(&self, key: &str, body: &[u8]) {
        assert_eq!(self.kind, S3Server::Moto, "unsigned requests: moto only");
        let mut path = format!("/{BUCKET}/");
        for b in key.bytes() {
            if b.is_ascii_alphanumeric() || b == b'/' {
                path.push(b as char);
            } else {
                path.push_str(&format!("%{b:02X}"));
            }
        }
        let port = self.port;
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            s,
            "PUT {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .unwrap();
        s.write_all(body).unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        assert!(
            resp.starts_with("HTTP/1.1 200") || resp.starts_with("HTTP/1.0 200"),
            "PUT {path}: {resp}"
        );
    }

    /// (request line, status) of the requests moto logged after `from` bytes of its log
    /// (s3s-fs does not log statuses on the request line).
    pub fn responses_since(&self, from: usize) -> Vec<(String, String)> {
        assert_eq!(self.kind, S3Server::Moto, "statuses are read from moto's log");
        self.log()
            .get(from..)
            .unwrap_or("")
            .lines()
            .filter_map(|l| {
                let mut parts = l.split('"');
                let request = strip_ansi(parts.nth(1)?);
                let status = parts.next()?.split_whitespace().next()?.to_string();
                Some((request, status))
            })
            .filter(|(r, _)| !r.starts_with("GET / "))
            .collect()
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        if self.running {
            let _ = Command::new(SCRIPT).arg("stop").arg(self.dir.path()).status();
        }
    }
}

/// Drop terminal colour codes (moto colours some log lines).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Run the daemon in the foreground for a mount that must be refused at mount time: its exit
/// code, its stderr and how long it took. A daemon that mounts instead is stopped (and the
/// mount undone) after 60 s, and the code is then `None`.
pub fn mount_refused(
    source: &str,
    mnt: &std::path::Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> (Option<i32>, String, std::time::Duration) {
    refused(source, mnt, args, envs, false)
}

/// `mount_refused` with a daemon that inherits no environment but PATH (see
/// `Mount::start_clean`).
pub fn mount_refused_clean(
    source: &str,
    mnt: &std::path::Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> (Option<i32>, String, std::time::Duration) {
    refused(source, mnt, args, envs, true)
}

fn refused(
    source: &str,
    mnt: &std::path::Path,
    args: &[&str],
    envs: &[(&str, &str)],
    clean: bool,
) -> (Option<i32>, String, std::time::Duration) {
    use std::time::{Duration, Instant};
    std::fs::create_dir_all(mnt).unwrap();
    let err = tempfile::NamedTempFile::new().unwrap();
    let started = Instant::now();
    let mut command = Command::new(super::BIN);
    if clean {
        command.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default());
    }
    let mut child = command
        .arg(source)
        .arg(mnt)
        .arg("--foreground")
        .args(args)
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(err.reopen().unwrap())
        .spawn()
        .unwrap();
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            super::force_unmount(mnt);
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    super::force_unmount(mnt);
    (code, std::fs::read_to_string(err.path()).unwrap(), took)
}

/// Assert that a refused mount said so in one line naming `what`, exited 2 within 30 s and
/// left nothing mounted.
pub fn assert_refused(result: (Option<i32>, String, std::time::Duration), what: &str) {
    let (code, stderr, took) = result;
    assert_eq!(code, Some(2), "{what}: exit code {code:?}, stderr:\n{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{what}: not one line:\n{stderr}");
    assert!(stderr.contains(what), "{what}: {stderr}");
    assert!(!stderr.contains(SECRET), "the secret in the message: {stderr}");
    assert!(took < std::time::Duration::from_secs(30), "{what}: took {took:?}");
}
