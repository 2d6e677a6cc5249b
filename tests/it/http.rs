//! `http://` against nginx on 127.0.0.1 (scripts/s3-server.sh, KIND nginx): a Zarr zip served
//! as a static file is mounted, read exactly by zarr-python and tensorstore, and fetched by
//! range requests only (counted from nginx's access log). A wrong URL fails at mount time.
//!
//! A plain directory tree over static HTTP does not mount usefully yet (README, "Backends"):
//! object_store lists with WebDAV PROPFIND, which static servers refuse, and a directory's
//! URL answers with a redirect to its index page, which looks like a file.

use crate::common;

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
        let status = Command::new(SCRIPT).args(["install", "nginx"]).status().unwrap();
        if status.code() == Some(3) {
            eprintln!("SKIPPED: nginx could not be installed");
            return None;
        }
        assert!(status.success());
        let n = Nginx { dir: tempfile::tempdir().unwrap(), port: free_port() };
        let status = Command::new(SCRIPT)
            .arg("start")
            .arg(n.dir.path())
            .arg(n.port.to_string())
            .arg("nginx")
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

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = Command::new(SCRIPT).arg("stop").arg(self.dir.path()).status();
    }
}

fn run_python(script: &str, args: &[&Path]) {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let out = Command::new(python).arg("-c").arg(script).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_zip_on_a_static_http_server_is_read_by_ranges() {
    let Some(nginx) = Nginx::start() else { return };
    let archive = nginx.root().join("data.zarr.zip");
    run_python(
        "import sys, zarr, numpy as np\n\
         s = zarr.storage.ZipStore(sys.argv[1], mode='w')\n\
         g = zarr.open_group(s, mode='w')\n\
         big = g.create_array('big', shape=(2048, 2048), chunks=(256, 256), shards=(1024, 1024), dtype='float32', compressors=None)\n\
         big[:] = np.random.default_rng(0).standard_normal((2048, 2048), dtype='float32')\n\
         small = g.create_array('small', shape=(40, 30), chunks=(5, 6), shards=(20, 12), dtype='int32')\n\
         small[:] = np.arange(1200, dtype='int32').reshape(40, 30)\n\
         s.close()\n",
        &[&archive],
    );
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
