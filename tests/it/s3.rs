//! Mounts of `s3://bucket/prefix` against local S3-compatible servers (scripts/s3-server.sh):
//! every test that talks to a server runs twice, against moto and against s3s-fs
//! (`s3_tests!`, tests/it/common/s3.rs), as `NAME::moto` and `NAME::s3s_fs`.
//!
//! Each test starts its own server on a free port and its own mount; guards stop both, also
//! when a test panics. The tests skip (with a message) only when a server cannot be installed.

use crate::common;
use crate::s3_tests;
use common::python::{files_under, run_python, venv_python, write_zip_sample};

use std::io::{Read, Seek, SeekFrom, Write};
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::s3::{S3Server, BUCKET, ENV, S3, SECRET};
use common::{sorted_names, Mount};
use object_store::path::Path as OPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

s3_tests!(
    reads_writes_renames_and_directories,
    a_directory_of_2000_keys_lists_fully,
    server_outage_gives_eio_then_recovers_without_remount,
    chunk_writes_through_the_unsharded_view_update_shards_in_s3,
    a_zip_in_s3_is_read_by_ranges_not_downloaded,
    zarr_python_v2_and_v3_round_trip_through_an_s3_mount,
    decoded_and_v2_views_over_s3,
    a_wrong_endpoint_bucket_or_secret_fails_at_mount_time,
    conditional_puts_are_refused_by_the_server,
    a_listing_starts_after_a_name_with_the_versions_reads_give,
);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn put_all(store: &Arc<dyn ObjectStore>, objects: &[(String, Vec<u8>)]) {
    rt().block_on(async {
        for (k, v) in objects {
            store
                .put(&OPath::from(k.as_str()), PutPayload::from(Bytes::from(v.clone())))
                .await
                .unwrap();
        }
    });
}

fn get(store: &Arc<dyn ObjectStore>, key: &str) -> Option<Vec<u8>> {
    rt().block_on(async {
        match store.get(&OPath::from(key)).await {
            Ok(r) => Some(r.bytes().await.unwrap().to_vec()),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => panic!("get {key}: {e}"),
        }
    })
}

fn keys(store: &Arc<dyn ObjectStore>, prefix: &str) -> Vec<String> {
    use futures::TryStreamExt;
    rt().block_on(async {
        let mut v: Vec<String> = store
            .list(Some(&OPath::from(prefix)))
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .unwrap();
        v.sort();
        v
    })
}

fn mount(s3: &S3, tmp: &Path, extra: &[&str]) -> Mount {
    let endpoint = s3.endpoint();
    let mut args = vec!["--endpoint-url", endpoint.as_str()];
    args.extend_from_slice(extra);
    Mount::start_with(&format!("s3://{BUCKET}/pre"), &tmp.join("mnt"), &args, ENV)
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

fn reads_writes_renames_and_directories(kind: S3Server) {
    let Some(s3) = S3::start(kind) else { return };
    let client = s3.client();
    let big = pattern(9 << 20); // above the whole-object cache limit: ranged reads
    put_all(
        &client,
        &[
            ("pre/zarr.json".into(), br#"{"zarr_format":3,"node_type":"group"}"#.to_vec()),
            ("pre/a/zarr.json".into(), b"{}".to_vec()),
            ("pre/a/c/0/0".into(), pattern(1000)),
            ("pre/a/c/0/1".into(), pattern(10)),
            ("pre/big".into(), big.clone()),
            ("outside".into(), b"not under the prefix".to_vec()),
        ],
    );
    let tmp = tempfile::tempdir().unwrap();
    let m = mount(&s3, tmp.path(), &[]);

    // Listing and metadata.
    assert_eq!(sorted_names(&m.mnt), vec!["a", "big", "zarr.json"]);
    assert_eq!(sorted_names(&m.path("a")), vec!["c", "zarr.json"]);
    assert_eq!(sorted_names(&m.path("a/c/0")), vec!["0", "1"]);
    assert!(std::fs::metadata(m.path("a/c")).unwrap().is_dir());
    assert_eq!(std::fs::metadata(m.path("a/c/0/0")).unwrap().len(), 1000);
    assert_eq!(std::fs::metadata(m.path("big")).unwrap().len(), big.len() as u64);
    assert!(!m.path("outside").exists());
    assert_eq!(
        std::fs::read(m.path("zarr.json")).unwrap(),
        br#"{"zarr_format":3,"node_type":"group"}"#
    );

    // Reads at offsets, of a small (cached whole) and a large (ranged) object.
    let mut f = std::fs::File::open(m.path("a/c/0/0")).unwrap();
    f.seek(SeekFrom::Start(500)).unwrap();
    let mut buf = vec![0u8; 100];
    f.read_exact(&mut buf).unwrap();
    assert_eq!(buf, pattern(1000)[500..600]);
    let mut f = std::fs::File::open(m.path("big")).unwrap();
    f.seek(SeekFrom::Start(8_000_000)).unwrap();
    let mut buf = vec![0u8; 200_000];
    f.read_exact(&mut buf).unwrap();
    assert_eq!(buf, big[8_000_000..8_200_000]);
    let mut tail = Vec::new();
    f.seek(SeekFrom::End(-10)).unwrap();
    f.read_to_end(&mut tail).unwrap();
    assert_eq!(tail, big[big.len() - 10..]);
    assert_eq!(std::fs::read(m.path("big")).unwrap(), big);

    // create + several writes + close: one object, one PUT.
    let mark = s3.log().len();
    {
        let mut f = std::fs::File::create(m.path("a/new.bin")).unwrap();
        for i in 0..10u8 {
            f.write_all(&[i; 1000]).unwrap();
        }
    }
    let want: Vec<u8> = (0..10u8).flat_map(|i| [i; 1000]).collect();
    assert_eq!(get(&client, "pre/a/new.bin").unwrap(), want);
    let puts: Vec<String> =
        s3.requests_since(mark).into_iter().filter(|r| r.starts_with("PUT ")).collect();
    assert_eq!(puts.len(), 1, "{puts:?}");
    assert_eq!(std::fs::read(m.path("a/new.bin")).unwrap(), want);

    // Overwrite an object that was read (and cached) before: the new content shows.
    std::fs::write(m.path("a/c/0/1"), b"rewritten").unwrap();
    assert_eq!(std::fs::read(m.path("a/c/0/1")).unwrap(), b"rewritten");
    assert_eq!(get(&client, "pre/a/c/0/1").unwrap(), b"rewritten");

    // Write-to-temp-then-rename (zarr-python's pattern): only the final key is uploaded.
    let mark = s3.log().len();
    std::fs::write(m.path("a/zarr.json.partial"), b"{\"v\":2}").unwrap();
    std::fs::rename(m.path("a/zarr.json.partial"), m.path("a/zarr.json")).unwrap();
    assert_eq!(std::fs::read(m.path("a/zarr.json")).unwrap(), b"{\"v\":2}");
    assert_eq!(get(&client, "pre/a/zarr.json").unwrap(), b"{\"v\":2}");
    let reqs = s3.requests_since(mark);
    assert!(
        !reqs
            .iter()
            .any(|r| r.contains(".partial") && !r.starts_with("HEAD") && !r.starts_with("GET")),
        "{reqs:?}"
    );
    assert!(!keys(&client, "pre").iter().any(|k| k.contains(".partial")));

    // Rename of a stored object: copy + delete.
    std::fs::rename(m.path("a/new.bin"), m.path("moved.bin")).unwrap();
    assert!(get(&client, "pre/a/new.bin").is_none());
    assert_eq!(get(&client, "pre/moved.bin").unwrap(), want);
    assert!(!m.path("a/new.bin").exists());

    // Unlink.
    std::fs::remove_file(m.path("moved.bin")).unwrap();
    assert!(get(&client, "pre/moved.bin").is_none());
    assert!(!m.path("moved.bin").exists());
    assert_eq!(
        std::fs::remove_file(m.path("moved.bin")).unwrap_err().raw_os_error(),
        Some(libc::ENOENT)
    );

    // mkdir of an empty directory: visible, no object written, removable; a file inside
    // makes it a real prefix.
    let mark = s3.log().len();
    std::fs::create_dir(m.path("empty")).unwrap();
    assert!(std::fs::metadata(m.path("empty")).unwrap().is_dir());
    assert!(sorted_names(&m.mnt).contains(&"empty".to_string()));
    assert!(sorted_names(&m.path("empty")).is_empty());
    assert!(!s3.requests_since(mark).iter().any(|r| r.starts_with("PUT ")));
    std::fs::remove_dir(m.path("empty")).unwrap();
    assert!(!m.path("empty").exists());
    std::fs::create_dir(m.path("d2")).unwrap();
    std::fs::write(m.path("d2/x"), b"x").unwrap();
    assert_eq!(get(&client, "pre/d2/x").unwrap(), b"x");
    assert_eq!(sorted_names(&m.path("d2")), vec!["x"]);

    // Nothing in the log gives the secret away.
    assert!(!m.log_text().contains(SECRET), "secret in the daemon log");
    let st = std::fs::metadata(&m.mnt).unwrap();
    assert!(st.is_dir() && st.ino() != 0);
}

fn a_directory_of_2000_keys_lists_fully(kind: S3Server) {
    let Some(s3) = S3::start(kind) else { return };
    let client = s3.client();
    let objects: Vec<(String, Vec<u8>)> = (0..2000)
        .map(|i| (format!("pre/many/k{i:05}"), format!("value {i}").into_bytes()))
        .collect();
    rt().block_on(async {
        use futures::StreamExt;
        futures::stream::iter(objects.iter())
            .for_each_concurrent(16, |(k, v)| {
                let client = client.clone();
                async move {
                    client
                        .put(&OPath::from(k.as_str()), PutPayload::from(Bytes::from(v.clone())))
                        .await
                        .unwrap();
                }
            })
            .await;
    });
    let tmp = tempfile::tempdir().unwrap();
    let from = s3.log().len();
    let m = mount(&s3, tmp.path(), &[]);
    // The mount fetches the root's metadata documents in the background: on a loaded machine
    // they can come after `mount` returns, so wait for them before counting.
    s3.document_gets_since(from, "pre");
    let mark = s3.log().len();
    let started = Instant::now();
    let out = Command::new("ls").arg("-l").arg(m.path("many")).output().unwrap();
    let took = started.elapsed();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let listed: Vec<&str> = text.lines().filter(|l| l.starts_with('-')).collect();
    assert_eq!(listed.len(), 2000);
    assert!(listed[1234].ends_with(" k01234"), "{}", listed[1234]);
    assert!(listed[1234].contains(&format!(" {} ", "value 1234".len())), "{}", listed[1234]);
    let reqs = s3.requests_since(mark);
    let (lists, heads, gets) = (
        reqs.iter().filter(|r| r.starts_with("GET ") && r.contains("list-type=2")).count(),
        reqs.iter().filter(|r| r.starts_with("HEAD ")).count(),
        reqs.iter().filter(|r| r.starts_with("GET ") && !r.contains("list-type=2")).count(),
    );
    eprintln!(
        "ls -l of 2000 keys: {took:?}, {} requests: {lists} LIST, {heads} HEAD, {gets} GET: {reqs:?}",
        reqs.len()
    );
    assert!(
        reqs.len() <= 10,
        "ls -l should cost a few LIST pages, not a request per key: {reqs:?}"
    );
    assert_eq!(std::fs::read(m.path("many/k01999")).unwrap(), b"value 1999");
}

fn server_outage_gives_eio_then_recovers_without_remount(kind: S3Server) {
    let Some(mut s3) = S3::start(kind) else { return };
    let client = s3.client();
    let objects: Vec<(String, Vec<u8>)> = vec![
        ("pre/one".into(), b"first object".to_vec()),
        ("pre/two".into(), b"second object".to_vec()),
    ];
    put_all(&client, &objects);
    let tmp = tempfile::tempdir().unwrap();
    let m = mount(&s3, tmp.path(), &["--metadata-ttl", "1"]);
    assert_eq!(sorted_names(&m.mnt), vec!["one", "two"]);
    // Opened (looked up) while the server is up, not read yet: nothing cached.
    let mut opened = std::fs::File::open(m.path("one")).unwrap();

    s3.down();
    let started = Instant::now();
    let mut buf = Vec::new();
    let err = opened.read_to_end(&mut buf).unwrap_err();
    let took = started.elapsed();
    eprintln!("read during the outage failed after {took:?}: {err}");
    assert!(matches!(err.raw_os_error(), Some(libc::EIO) | Some(libc::ETIMEDOUT)), "{err:?}");
    assert!(took < Duration::from_secs(60), "took {took:?}");
    m.advance_clock(); // past the metadata TTL
    let started = Instant::now();
    let err = std::fs::read(m.path("two")).unwrap_err();
    eprintln!("lookup+read during the outage failed after {:?}: {err}", started.elapsed());
    assert!(matches!(err.raw_os_error(), Some(libc::EIO) | Some(libc::ETIMEDOUT)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(common::is_mounted(&m.mnt), "the mount must survive an outage");

    // Same port again; moto starts empty, so the objects are put back (s3s-fs kept them).
    s3.up();
    put_all(&s3.client(), &objects);
    let mut buf = Vec::new();
    opened.seek(SeekFrom::Start(0)).unwrap();
    opened.read_to_end(&mut buf).unwrap();
    assert_eq!(buf, b"first object");
    assert_eq!(std::fs::read(m.path("two")).unwrap(), b"second object");
    assert!(!m.log_text().contains(SECRET));
}

/// A wrong endpoint, a missing bucket or (where the server checks signatures: s3s-fs, not
/// moto) a wrong secret: one line and exit 2 at mount time, never a mount that fails later.
fn a_wrong_endpoint_bucket_or_secret_fails_at_mount_time(kind: S3Server) {
    use common::s3::{assert_refused, free_port, mount_refused};
    let Some(s3) = S3::start(kind) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    let endpoint = s3.endpoint();
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let source = format!("s3://{BUCKET}/pre");
    assert_refused(
        mount_refused(&source, &mnt, &["--endpoint-url", &nobody], ENV),
        "cannot reach the store",
    );
    assert_refused(
        mount_refused("s3://no-such-bucket/pre", &mnt, &["--endpoint-url", &endpoint], ENV),
        "does not exist",
    );
    if kind == S3Server::S3sFs {
        let wrong: Vec<(&str, &str)> = ENV
            .iter()
            .map(|&(k, v)| if k == "AWS_SECRET_ACCESS_KEY" { (k, "wrong-secret") } else { (k, v) })
            .collect();
        assert_refused(
            mount_refused(&source, &mnt, &["--endpoint-url", &endpoint], &wrong),
            "access denied",
        );
    }
    // And the right ones mount; a prefix with no key below it with a warning that says so.
    const EMPTY: &str = "has no key below it";
    let mut m = mount(&s3, tmp.path(), &[]);
    assert!(common::is_mounted(&m.mnt));
    let log = m.log_text();
    assert_eq!(log.matches(EMPTY).count(), 1, "{log}");
    assert!(log.contains(&format!("s3://{BUCKET}/pre {EMPTY}")), "{log}");
    assert!(m.stop().success());
    s3.put("pre/a", b"x");
    let m = mount(&s3, tmp.path(), &[]);
    assert!(!m.log_text().contains(EMPTY), "{}", m.log_text());
}

#[test]
fn bad_object_store_options_are_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt: PathBuf = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(common::BIN).args(args).envs(ENV.iter().copied()).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let mnt_s = mnt.to_str().unwrap();
    let (code, err) = run(&["s3://b/p", mnt_s, "-o", "no_such_option=1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no_such_option") && err.lines().count() == 1, "{err}");
    let (code, err) = run(&["s3://b/p", mnt_s, "-o", SECRET]);
    assert_eq!(code, Some(2), "{err}");
    assert!(!err.contains(SECRET), "{err}");
    let (code, err) = run(&["s3://b/p", mnt_s, "--cache-size", "lots"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, err) = run(&[tmp.path().to_str().unwrap(), mnt_s, "--endpoint-url", "http://x"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(!common::is_mounted(&mnt));
}

/// Issue 6 on S3: zarr-python writes an unsharded array through the mount; the bucket,
/// downloaded and read natively by zarr-python and tensorstore, is the expected sharded array.
fn chunk_writes_through_the_unsharded_view_update_shards_in_s3(kind: S3Server) {
    let Some(s3) = S3::start(kind) else { return };
    if !venv_python().exists() {
        panic!("the project venv is missing: run scripts/setup.sh");
    }
    let client = s3.client();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("local");
    run_python(
        "import sys, zarr, numpy as np\n\
         a = zarr.create_array(sys.argv[1] + '/a', shape=(40, 30), shards=(20, 16), chunks=(5, 4), dtype='int32', fill_value=0)\n\
         a[:] = np.arange(1200, dtype='int32').reshape(40, 30)\n",
        &[&local],
    );
    let objects: Vec<(String, Vec<u8>)> =
        files_under(&local).into_iter().map(|(k, v)| (format!("pre/{k}"), v)).collect();
    put_all(&client, &objects);
    assert!(get(&client, "pre/a/c/1/0").is_some());

    let m = mount(&s3, tmp.path(), &[]);
    run_python(
        "import sys, zarr\n\
         a = zarr.open_array(sys.argv[1] + '/a', mode='r+')\n\
         assert a.shards is None and a.chunks == (5, 4), (a.shards, a.chunks)\n\
         a[3:17, 5:13] = -5\n\
         a[20:40, 0:16] = 0\n",
        &[&m.mnt],
    );
    assert!(
        get(&client, "pre/a/c/1/0").is_none(),
        "the all-fill shard must be deleted from the bucket"
    );

    let back = tmp.path().join("back");
    for key in keys(&client, "pre/a") {
        let rel = key.strip_prefix("pre/").unwrap();
        let path = back.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, get(&client, &key).unwrap()).unwrap();
    }
    run_python(
        "import sys, zarr, numpy as np, tensorstore as ts\n\
         exp = np.arange(1200, dtype='int32').reshape(40, 30)\n\
         exp[3:17, 5:13] = -5\n\
         exp[20:40, 0:16] = 0\n\
         z = zarr.open_array(sys.argv[1] + '/a', mode='r')\n\
         assert z.shards == (20, 16)\n\
         np.testing.assert_array_equal(z[:], exp)\n\
         t = ts.open({'driver': 'zarr3', 'kvstore': {'driver': 'file', 'path': sys.argv[1] + '/a'}}).result()\n\
         np.testing.assert_array_equal(t.read().result(), exp)\n",
        &[&back],
    );
    drop(m);
}

/// A byte-counting TCP relay in front of the server: counts what the server sends back, so a test
/// can show how much of an object the mount really fetched. Threads end with their sockets.
struct CountingRelay {
    port: u16,
    bytes_down: Arc<std::sync::atomic::AtomicU64>,
}

impl CountingRelay {
    fn start(upstream_port: u16) -> CountingRelay {
        use std::sync::atomic::{AtomicU64, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let bytes_down = Arc::new(AtomicU64::new(0));
        let counter = bytes_down.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)) else { continue };
                let (mut c_read, mut s_write) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c_read, &mut s_write);
                    let _ = s_write.shutdown(std::net::Shutdown::Write);
                });
                let (mut s_read, mut c_write) = (server, client);
                let counter = counter.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    loop {
                        match s_read.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                counter.fetch_add(n as u64, Ordering::Relaxed);
                                if c_write.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = c_write.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        CountingRelay { port, bytes_down }
    }

    fn bytes(&self) -> u64 {
        self.bytes_down.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Issue 4: a zip written by zarr-python's ZipStore, stored in S3, mounted without being
/// downloaded whole: reading one small array fetches a small fraction of the archive.
fn a_zip_in_s3_is_read_by_ranges_not_downloaded(kind: S3Server) {
    let Some(s3) = S3::start(kind) else { return };
    let client = s3.client();
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("data.zarr.zip");
    write_zip_sample(&archive);
    let size = std::fs::metadata(&archive).unwrap().len();
    put_all(&client, &[("zips/data.zarr.zip".to_string(), std::fs::read(&archive).unwrap())]);

    let relay = CountingRelay::start(s3.port);
    let endpoint = format!("http://127.0.0.1:{}", relay.port);
    let m = Mount::start_with(
        &format!("s3://{BUCKET}/zips/data.zarr.zip"),
        &tmp.path().join("mnt"),
        &["--endpoint-url", endpoint.as_str()],
        ENV,
    );
    run_python(
        "import sys, zarr, numpy as np\n\
         a = zarr.open_array(sys.argv[1] + '/small', mode='r')\n\
         assert a.chunks == (5, 6) and a.shards is None\n\
         np.testing.assert_array_equal(a[:], np.arange(1200, dtype='int32').reshape(40, 30))\n\
         b = zarr.open_array(sys.argv[1] + '/big', mode='r')\n\
         assert b[300:310, 5:9].shape == (10, 4)\n",
        &[&m.mnt],
    );
    let fetched = relay.bytes();
    eprintln!("archive {size} bytes, fetched {fetched} bytes through the mount");
    assert!(size > 8 << 20, "the archive must be big enough to tell ({size} bytes)");
    assert!(
        fetched < size / 10,
        "fetched {fetched} of {size} bytes: the zip was not read by ranges"
    );
    drop(m);
}

/// zarr-python writes v2 and v3 arrays and groups through the mount; the bucket, downloaded
/// and read natively, holds exactly that; and zarr-python reads it back through the mount.
fn zarr_python_v2_and_v3_round_trip_through_an_s3_mount(kind: S3Server) {
    let Some(s3) = S3::start(kind) else { return };
    let client = s3.client();
    let tmp = tempfile::tempdir().unwrap();
    let m = mount(&s3, tmp.path(), &["--view", "raw"]);
    let script = "import sys, zarr, numpy as np\n\
         root, mode = sys.argv[1], sys.argv[2]\n\
         for fmt in (2, 3):\n\
         \x20   exp = np.arange(37 * 23, dtype='float64').reshape(37, 23) * fmt\n\
         \x20   if mode == 'write':\n\
         \x20       g = zarr.open_group(f'{root}/v{fmt}', mode='w', zarr_format=fmt, attributes={'fmt': fmt})\n\
         \x20       a = g.create_array('a', shape=(37, 23), chunks=(10, 7), dtype='float64')\n\
         \x20       a[:] = exp\n\
         \x20   else:\n\
         \x20       g = zarr.open_group(f'{root}/v{fmt}', mode='r')\n\
         \x20       assert g.attrs['fmt'] == fmt and g.metadata.zarr_format == fmt\n\
         \x20       np.testing.assert_array_equal(g['a'][:], exp)\n";
    run_python(script, &[&m.mnt, Path::new("write")]);
    run_python(script, &[&m.mnt, Path::new("read")]);
    let keys = keys(&client, "pre");
    assert!(
        keys.iter().all(|k| !k.ends_with(".partial")),
        "temp files reached the bucket: {keys:?}"
    );
    let back = tmp.path().join("back");
    for key in &keys {
        let path = back.join(key.strip_prefix("pre/").unwrap());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, get(&client, key).unwrap()).unwrap();
    }
    run_python(script, &[&back, Path::new("read")]);
    drop(m);
}

/// Issue 7 on S3: the decoded view's chunk files are the raw elements (numpy.fromfile), and
/// zarr-python 2 reads the v2 view of a sharded v3 array exactly.
fn decoded_and_v2_views_over_s3(kind: S3Server) {
    let Some(s3) = S3::start(kind) else { return };
    let zarr2 = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-zarr2/bin/python");
    assert!(
        venv_python().exists() && zarr2.exists(),
        "the venvs are missing: run scripts/setup.sh"
    );
    let client = s3.client();
    let tmp = tempfile::tempdir().unwrap();
    let local = tmp.path().join("local");
    run_python(
        "import sys, zarr, numpy as np\n\
         from zarr.codecs import BloscCodec\n\
         a = zarr.create_array(sys.argv[1] + '/a', shape=(30, 20), shards=(10, 10), chunks=(5, 5), dtype='f8',\n\
                               compressors=[BloscCodec(cname='zstd', shuffle='bitshuffle')], fill_value=-1)\n\
         a[:] = np.arange(600).reshape(30, 20) / 4\n\
         a[20:30, 10:20] = -1\n",
        &[&local],
    );
    let objects: Vec<(String, Vec<u8>)> =
        files_under(&local).into_iter().map(|(k, v)| (format!("pre/{k}"), v)).collect();
    put_all(&client, &objects);
    let expected = "exp = np.arange(600).reshape(30, 20) / 4\nexp[20:30, 10:20] = -1\n";

    let decoded = mount(&s3, tmp.path(), &["--view", "decoded"]);
    run_python(
        &format!(
            "import sys, os, numpy as np\n{expected}\
             root = sys.argv[1] + '/a/c'\n\
             n = 0\n\
             for y in range(6):\n\
             \x20   for x in range(4):\n\
             \x20       p = f'{{root}}/{{y}}/{{x}}'\n\
             \x20       if not os.path.exists(p):\n\
             \x20           assert (exp[5*y:5*y+5, 5*x:5*x+5] == -1).all(), p\n\
             \x20           continue\n\
             \x20       assert os.stat(p).st_size == 25 * 8\n\
             \x20       np.testing.assert_array_equal(np.fromfile(p, dtype='<f8').reshape(5, 5), exp[5*y:5*y+5, 5*x:5*x+5])\n\
             \x20       n += 1\n\
             assert n == 20, n\n"
        ),
        &[&decoded.mnt],
    );
    drop(decoded);

    let v2 = mount(&s3, tmp.path(), &["--view", "v2"]);
    let out = std::process::Command::new(&zarr2)
        .arg("-c")
        .arg(format!(
            "import sys, zarr, numpy as np\n{expected}\
             a = zarr.open_array(sys.argv[1] + '/a', mode='r')\n\
             assert zarr.__version__.startswith('2.'), zarr.__version__\n\
             assert a.chunks == (5, 5) and a.dtype.kind == 'f', (a.chunks, a.dtype)\n\
             np.testing.assert_array_equal(a[:], exp)\n"
        ))
        .arg(&v2.mnt)
        .output()
        .unwrap();
    assert!(out.status.success(), "zarr 2 failed:\n{}", String::from_utf8_lossy(&out.stderr));
    drop(v2);
}

/// `list_pages_after` (how the disk cache confirms a directory's stale objects past the TTL)
/// starts after the name given, and on moto names each object with the version its read gives
/// (s3s-fs lists no ETags: `is_untagged`).
fn a_listing_starts_after_a_name_with_the_versions_reads_give(kind: S3Server) {
    use futures::StreamExt;
    use zarr_mount::store::backends::object::is_untagged;
    use zarr_mount::store::prelude::*;
    let Some(s3) = S3::start(kind) else { return };
    let keys = ["d/a1", "d/a2", "d/b", "d/b1", "d/b2", "d/c/x"];
    s3.put_all(&keys.iter().map(|k| (format!("lpa/{k}"), k.as_bytes())).collect::<Vec<_>>());
    let b = s3.backend("lpa");
    rt().block_on(async {
        let listed = |after: &'static str| {
            let b = &b;
            async move {
                let pages: Vec<_> = b.list_pages_after("d", after).collect().await;
                let (mut files, mut dirs) = (Vec::new(), Vec::new());
                for page in pages {
                    let page = page.unwrap();
                    files.extend(page.files);
                    dirs.extend(page.dirs);
                }
                (files, dirs)
            }
        };
        let (files, dirs) = listed("b").await;
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!((names, dirs), (vec!["b1", "b2"], vec!["c".to_string()]));
        let (all, _) = listed("").await;
        assert_eq!(all.len(), 5, "{all:?}");
        for (name, meta) in &all {
            let read = b.head(&format!("d/{name}")).await.unwrap().unwrap();
            match kind {
                S3Server::Moto => assert_eq!(meta.version, read.version, "{name}"),
                _ => assert!(is_untagged(meta), "{name}: {meta:?}"),
            }
        }
    });
}

/// The conditional writes the daemon relies on (issue #20), one at a time against the real
/// server: `If-None-Match: *` over an object and `If-Match` of an old or a missing version are
/// refused and write nothing; the backend reports each as the error the writers retry on.
/// (Whether racing conditional PUTs are atomic is the server's business: docs/SEMANTICS.md "What is not guaranteed".)
fn conditional_puts_are_refused_by_the_server(kind: S3Server) {
    use zarr_mount::store::prelude::*;
    use zarr_mount::store::{PutMode, StoreError};
    let Some(s3) = S3::start(kind) else { return };
    let b = s3.backend("cond");
    let client = s3.client();
    let b1 = |s: &'static str| Bytes::from_static(s.as_bytes());
    rt().block_on(async {
        b.put_opts("k", b1("one"), PutMode::Create).await.unwrap();
        let err = b.put_opts("k", b1("two"), PutMode::Create).await.unwrap_err();
        assert!(matches!(err, StoreError::AlreadyExists(_)), "create over an object: {err:?}");
        let (data, v1) = b.get_versioned("k").await.unwrap().unwrap();
        assert_eq!(data, b1("one"), "a refused create wrote");

        b.put_opts("k", b1("three"), PutMode::Update(v1.version.clone())).await.unwrap();
        let err =
            b.put_opts("k", b1("four"), PutMode::Update(v1.version.clone())).await.unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "update of an old version: {err:?}");
        let (data, v3) = b.get_versioned("k").await.unwrap().unwrap();
        assert_eq!(data, b1("three"), "a refused update wrote");
        assert_ne!(v1.version, v3.version);

        // Another writer (here a plain client) replaced it: the version read is stale.
        client.put(&OPath::from("cond/k"), PutPayload::from_static(b"other")).await.unwrap();
        let err =
            b.put_opts("k", b1("five"), PutMode::Update(v3.version.clone())).await.unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "update over another write: {err:?}");
        // Gone: an update of the version read is a conflict too (S3 and moto answer 404,
        // s3s-fs 412), and writes nothing.
        client.delete(&OPath::from("cond/k")).await.unwrap();
        let err = b.put_opts("k", b1("six"), PutMode::Update(v3.version)).await.unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "update of a deleted key: {err:?}");
        assert!(b.get_versioned("k").await.unwrap().is_none(), "a refused update created the key");
    });
}
