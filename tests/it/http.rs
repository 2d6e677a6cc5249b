//! `http://` against nginx on 127.0.0.1 (scripts/s3-server.sh, KIND nginx): a Zarr zip served
//! as a static file is mounted, read exactly by zarr-python and tensorstore, and fetched by
//! range requests only (counted from nginx's access log). A wrong URL fails at mount time.
//!
//! A plain Zarr tree on nginx, with and without autoindex (src/store/backends/http.rs): directories
//! are told from files by their redirect, listings come from consolidated metadata (v3 inline
//! and v2 `.zmetadata`), sharded arrays are unpacked by range requests, a missing name is
//! ENOENT, a stopped server EIO; without consolidated metadata names open by path, and
//! directories are listed from the autoindex page where nginx serves one.

use crate::common;
use common::python::{run_python, venv_python, write_zip_sample};

use std::path::Path;
use std::process::Command;

use common::s3::{assert_refused, free_port, mount_refused, SCRIPT};
use common::Mount;

struct Nginx {
    dir: tempfile::TempDir,
    port: u16,
}

impl Nginx {
    fn start() -> Option<Nginx> {
        Self::start_autoindex(false)
    }

    fn start_autoindex(autoindex: bool) -> Option<Nginx> {
        let status = Command::new(SCRIPT).args(["install", "nginx"]).status().unwrap();
        if status.code() == Some(3) {
            common::server_unavailable("nginx", "could not be installed");
            return None;
        }
        assert!(status.success());
        let n = Nginx { dir: tempfile::tempdir().unwrap(), port: free_port() };
        let status = Command::new(SCRIPT)
            .arg("start")
            .arg(n.dir.path())
            .arg(n.port.to_string())
            .arg("nginx")
            .env("NGINX_AUTOINDEX", if autoindex { "on" } else { "off" })
            .status()
            .unwrap();
        assert!(status.success(), "nginx did not start");
        Some(n)
    }

    fn root(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    /// Access-log lines: `GET /x HTTP/1.1 206 "bytes=-100" 3`.
    fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("nginx.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Nginx {
    fn stop(&self) {
        let _ = Command::new(SCRIPT).arg("stop").arg(self.dir.path()).status();
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}

#[test]
fn a_zip_on_a_static_http_server_is_read_by_ranges() {
    let Some(nginx) = Nginx::start() else { return };
    let archive = nginx.root().join("data.zarr.zip");
    write_zip_sample(&archive);
    let size = std::fs::metadata(&archive).unwrap().len();
    let tmp = tempfile::tempdir().unwrap();

    // A wrong host: refused at mount time, one line, exit 2.
    let nobody = format!("http://127.0.0.1:{}/data.zarr.zip", free_port());
    assert_refused(mount_refused(&nobody, &tmp.path().join("refused"), &[], &[]), "cannot reach");

    let before = nginx.requests().len();
    let url = format!("http://127.0.0.1:{}/data.zarr.zip", nginx.port);
    let m = Mount::start_with(&url, &tmp.path().join("mnt"), &[], &[]);
    run_python(
        "import sys, zarr, numpy as np, tensorstore as ts\n\
         exp = np.arange(1200, dtype='int32').reshape(40, 30)\n\
         a = zarr.open_array(sys.argv[1] + '/small', mode='r')\n\
         assert a.chunks == (5, 6) and a.shards is None\n\
         np.testing.assert_array_equal(a[:], exp)\n\
         t = ts.open({'driver': 'zarr3', 'kvstore': {'driver': 'file', 'path': sys.argv[1] + '/small'}}).result()\n\
         np.testing.assert_array_equal(t.read().result(), exp)\n\
         b = zarr.open_array(sys.argv[1] + '/big', mode='r')\n\
         ref = np.random.default_rng(0).standard_normal((2048, 2048), dtype='float32')\n\
         np.testing.assert_array_equal(b[300:310, 5:9], ref[300:310, 5:9])\n",
        &[&m.mnt],
    );
    let requests: Vec<String> = nginx.requests()[before..].to_vec();
    let gets: Vec<&String> = requests.iter().filter(|r| r.starts_with("GET ")).collect();
    let sent: u64 = requests
        .iter()
        .filter_map(|r| r.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()))
        .sum();
    eprintln!(
        "archive {size} bytes; {} requests ({} GET), {sent} bytes sent: {requests:?}",
        requests.len(),
        gets.len()
    );
    assert!(!gets.is_empty());
    assert!(
        gets.iter().all(|r| r.contains(" 206 \"bytes=")),
        "every GET is a range request answered 206: {gets:?}"
    );
    assert!(size > 8 << 20 && sent < size / 10, "sent {sent} of {size} bytes");
    drop(m);
}

fn tree_script(args: &[&str]) {
    let python = venv_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/http_tree.py");
    let out = Command::new(python).arg(script).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "http_tree.py {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One nginx (autoindex on or off) serving v3.zarr (sharded, consolidated), v2.zarr
/// (consolidated) and plain.zarr (no consolidated metadata), each mounted by URL.
fn plain_tree(autoindex: bool) {
    let Some(nginx) = Nginx::start_autoindex(autoindex) else { return };
    let root = nginx.root();
    tree_script(&["write", root.to_str().unwrap()]);
    let tmp = tempfile::tempdir().unwrap();
    let url = |name: &str| format!("http://127.0.0.1:{}/{name}", nginx.port);
    let s = |p: &Path| p.to_str().unwrap().to_string();

    // The store as stored: every name listed (from the inline consolidated metadata) with its
    // size, every array read exactly, missing names ENOENT.
    let raw = Mount::start_with(&url("v3.zarr"), &tmp.path().join("raw"), &["--view", "raw"], &[]);
    tree_script(&["raw", &s(&raw.mnt), &s(&root.join("v3.zarr"))]);

    // The unsharded view: inner chunks unpacked from the shards by range requests.
    let before = nginx.requests().len();
    let view = Mount::start_with(&url("v3.zarr"), &tmp.path().join("view"), &[], &[]);
    tree_script(&["unsharded", &s(&view.mnt)]);
    let requests: Vec<String> = nginx.requests()[before..].to_vec();
    let shard_gets: Vec<&String> =
        requests.iter().filter(|r| r.starts_with("GET /v3.zarr/big/c/")).collect();
    let shard_bytes: u64 = shard_gets
        .iter()
        .filter_map(|r| r.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()))
        .sum();
    eprintln!(
        "unsharded view (autoindex {autoindex}): {} requests, {} GETs of big's shards ({shard_bytes} bytes): {requests:?}",
        requests.len(),
        shard_gets.len()
    );
    assert!(!shard_gets.is_empty());
    assert!(
        shard_gets.iter().all(|r| r.contains(" 206 \"bytes=")),
        "shards are read by ranges only: {shard_gets:?}"
    );
    // The 16 MiB shard holds the 10x4 cells read: its index and one 256 KiB inner chunk.
    assert!(shard_bytes < 1 << 20, "{shard_bytes} bytes of the shard for one inner chunk");
    drop(view);

    let v2 = Mount::start_with(&url("v2.zarr"), &tmp.path().join("v2"), &["--view", "raw"], &[]);
    tree_script(&["v2", &s(&v2.mnt), &s(&root.join("v2.zarr"))]);
    drop(v2);

    let plain = Mount::start_with(&url("plain.zarr"), &tmp.path().join("plain"), &[], &[]);
    let on = if autoindex { "on" } else { "off" };
    tree_script(&["plain", &s(&plain.mnt), &s(&root.join("plain.zarr")), on]);
    drop(plain);

    // The server goes away: names not looked up before are EIO, not ENOENT.
    nginx.stop();
    tree_script(&["outage", &s(&raw.mnt)]);
    drop(raw);
}

#[test]
fn a_plain_zarr_tree_on_static_http_without_autoindex() {
    plain_tree(false);
}

#[test]
fn a_plain_zarr_tree_on_static_http_with_autoindex() {
    plain_tree(true);
}

/// A kerchunk reference file may not point the mount at an internal host (loopback here; the
/// instance metadata address in the wild): such a target is EIO with a log line that says how
/// to allow it, until `--authorize-virtual` names its prefix; a reference file served from the
/// same origin as its targets needs nothing (store/egress.rs).
#[test]
fn reference_targets_on_internal_hosts_need_authorizing() {
    let Some(nginx) = Nginx::start() else { return };
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(nginx.root().join("data.bin"), &data).unwrap();
    let origin = format!("http://127.0.0.1:{}", nginx.port);
    let refs = serde_json::json!({
        "version": 1,
        "refs": {
            ".zgroup": "{\"zarr_format\":2}",
            "a/.zarray": "{\"zarr_format\":2,\"shape\":[1000],\"chunks\":[1000],\"dtype\":\"|u1\",\
                          \"compressor\":null,\"filters\":null,\"fill_value\":0,\"order\":\"C\"}",
            "a/0": [format!("{origin}/data.bin"), 1234, 1000],
        }
    });
    let text = serde_json::to_vec(&refs).unwrap();
    std::fs::write(nginx.root().join("refs.json"), &text).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let local_refs = tmp.path().join("refs.json");
    std::fs::write(&local_refs, &text).unwrap();
    let want = &data[1234..2234];

    // A local reference file: the loopback target is refused, the mount stays up.
    let mut m = Mount::start(&local_refs, &tmp.path().join("m1"), &["--view", "raw"]);
    let err = std::fs::read(m.path("a/0")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(std::fs::read(m.path("a/.zarray")).is_ok(), "inline keys still read");
    m.stop();
    let log = m.log_text();
    assert!(
        log.contains("loopback") && log.contains(&format!("--authorize-virtual {origin}/")),
        "{log}"
    );
    drop(m);

    // Authorized: exact bytes.
    let allow = format!("{origin}/");
    let m = Mount::start(
        &local_refs,
        &tmp.path().join("m2"),
        &["--view", "raw", "--authorize-virtual", allow.as_str()],
    );
    assert!(std::fs::read(m.path("a/0")).unwrap() == want, "wrong bytes");
    drop(m);

    // The same reference file served from the targets' own origin: allowed as it is.
    let m = Mount::start_with(
        &format!("{origin}/refs.json"),
        &tmp.path().join("m3"),
        &["--view", "raw"],
        &[],
    );
    assert!(std::fs::read(m.path("a/0")).unwrap() == want, "wrong bytes");
}
