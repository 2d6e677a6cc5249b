//! `--cache-dir` over real mounts of a local moto S3 server: a warm cache serves reads with no
//! GET, the directory stays within its bound, a daemon killed with SIGKILL while filling the
//! cache leaves nothing that a restarted one serves wrong, and one directory serves one daemon.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::s3::{S3Server, BUCKET, ENV, S3};
use common::{metric, Mount};

crate::s3_tests!(past_the_ttl_a_remount_revalidates_and_downloads_nothing);

fn mount(moto: &S3, mnt: &Path, extra: &[&str]) -> Mount {
    let endpoint = moto.endpoint();
    let mut args = vec!["--endpoint-url", endpoint.as_str()];
    args.extend_from_slice(extra);
    Mount::start_with(&format!("s3://{BUCKET}/pre"), mnt, &args, ENV)
}

fn content(n: usize, seed: u64) -> Vec<u8> {
    // A cheap xorshift stream: every block differs, so a block served at the wrong place shows.
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sizes of every file of the cache directory but the lock file.
fn cache_bytes(dir: &Path) -> u64 {
    fn walk(p: &Path) -> u64 {
        std::fs::read_dir(p)
            .map(|rd| {
                rd.flatten()
                    .map(|e| match e.metadata() {
                        Ok(md) if md.is_dir() => walk(&e.path()),
                        Ok(md) => md.len(),
                        Err(_) => 0,
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    walk(&dir.join("blocks")) + walk(&dir.join("copies")) + walk(&dir.join("tmp"))
}

fn object_gets(requests: &[String]) -> Vec<&String> {
    requests.iter().filter(|r| r.starts_with("GET /bkt/pre/")).collect()
}

#[test]
fn a_warm_cache_serves_a_remount_without_gets_and_keeps_its_bound() {
    let Some(moto) = S3::start(S3Server::Moto) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let objects: Vec<(String, Vec<u8>)> = vec![
        ("pre/zarr.json".into(), br#"{"zarr_format":3,"node_type":"group"}"#.to_vec()),
        ("pre/big.bin".into(), content(5 << 20, 1)),
        ("pre/d/small".into(), content(3000, 2)),
        ("pre/d/mid".into(), content((1 << 20) + 17, 3)),
    ];
    moto.put_all(&objects);
    let cache_arg = cache.to_str().unwrap();
    let read_all = |m: &Mount| {
        for (k, v) in &objects {
            let got = std::fs::read(m.path(k.strip_prefix("pre/").unwrap())).unwrap();
            assert!(got == *v, "{k}: wrong bytes");
        }
    };
    let mut m = mount(&moto, &tmp.path().join("mnt"), &["--view", "raw", "--cache-dir", cache_arg]);
    read_all(&m);
    m.stop();
    drop(m);
    let total: usize = objects.iter().map(|(_, v)| v.len()).sum();
    assert!(cache_bytes(&cache) >= total as u64, "everything read was kept");

    // Second mount: lookups and listings only, no GET of any object.
    let from = moto.log().len();
    let mut m = mount(&moto, &tmp.path().join("mnt"), &["--view", "raw", "--cache-dir", cache_arg]);
    read_all(&m);
    let reqs = moto.requests_since(from);
    assert!(object_gets(&reqs).is_empty(), "GETs with a warm cache: {reqs:#?}");
    m.stop();
    drop(m);

    // A third mount with a bound of 3 MiB: shrunk at start, and kept within it while reading.
    let mut m = mount(
        &moto,
        &tmp.path().join("mnt"),
        &["--view", "raw", "--cache-dir", cache_arg, "--cache-max-size", "3M"],
    );
    assert!(cache_bytes(&cache) <= 3 << 20);
    // Several readers at once: the bound may be passed by at most one block per reader.
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| read_all(&m));
        }
        let stop = Instant::now() + Duration::from_secs(3);
        while Instant::now() < stop {
            let used = cache_bytes(&cache);
            assert!(used <= (3 << 20) + 3 * ((1 << 20) + 4096), "{used} bytes in the cache");
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    m.stop();
    assert!(cache_bytes(&cache) <= 3 << 20);
}

/// Every file below `dir`, sorted (below a mount, this sends its listings and lookups).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out.sort();
    out
}

#[test]
fn a_remount_within_the_ttl_lists_and_reads_without_any_request() {
    let Some(moto) = S3::start(S3Server::Moto) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let objects: Vec<(String, Vec<u8>)> = vec![
        ("pre/zarr.json".into(), br#"{"zarr_format":3,"node_type":"group"}"#.to_vec()),
        ("pre/a/zarr.json".into(), br#"{"zarr_format":3,"node_type":"group"}"#.to_vec()),
        ("pre/a/c/0/0".into(), content(70_000, 5)),
        ("pre/a/c/0/1".into(), content((1 << 20) + 5, 6)),
        ("pre/b".into(), content(4000, 7)),
    ];
    moto.put_all(&objects);
    let cache_arg = cache.to_str().unwrap();
    let mnt = tmp.path().join("mnt");
    let args =
        |ttl: &'static str| ["--view", "raw", "--cache-dir", cache_arg, "--metadata-ttl", ttl];
    let read_all = |m: &Mount| -> Vec<(PathBuf, Vec<u8>)> {
        let files = walk(&m.path(""));
        assert_eq!(files.len(), objects.len());
        files.into_iter().map(|f| (f.clone(), std::fs::read(&f).unwrap())).collect()
    };
    let expect = |got: &[(PathBuf, Vec<u8>)], objects: &[(String, Vec<u8>)], m: &Mount| {
        for (k, v) in objects {
            let p = m.path(k.strip_prefix("pre/").unwrap());
            let found =
                got.iter().find(|(f, _)| *f == p).unwrap_or_else(|| panic!("{k} not listed"));
            assert!(found.1 == *v, "{k}: wrong bytes");
        }
    };
    let mut m = mount(&moto, &mnt, &args("60"));
    expect(&read_all(&m), &objects, &m);
    m.stop();
    drop(m);

    // Changed behind the mount's back, same size: a new version (ETag) only.
    let changed = content(70_000, 8);
    moto.put("pre/a/c/0/0", &changed);

    // Within the TTL: a fresh daemon walks and reads everything without a single request,
    // and (by the documented rule) still shows what the store said less than a TTL ago.
    let from = moto.log().len();
    let mut m = mount(&moto, &mnt, &args("60"));
    expect(&read_all(&m), &objects, &m);
    let reqs = moto.requests_since(from);
    assert!(reqs.is_empty(), "requests with a warm cache within the TTL: {reqs:#?}");
    m.stop();
    drop(m);

    // Past the TTL (1 s here; the daemon's clock starts 2 s ahead of the journal's records):
    // the store is asked again and the new version is read.
    let from = moto.log().len();
    let endpoint = moto.endpoint();
    let later = [ENV, &[("ZM_TEST_CLOCK_OFFSET", "2")]].concat();
    let m_args = [&["--endpoint-url", endpoint.as_str()][..], &args("1")].concat();
    let mut m = Mount::start_with(&format!("s3://{BUCKET}/pre"), &mnt, &m_args, &later);
    let mut now = objects.clone();
    now[2].1 = changed;
    expect(&read_all(&m), &now, &m);
    let reqs = moto.requests_since(from);
    let gets = object_gets(&reqs);
    assert!(
        gets.iter().any(|r| r.starts_with("GET /bkt/pre/a/c/0/0 ")),
        "the changed object is fetched: {reqs:#?}"
    );
    assert!(
        !gets.iter().any(|r| r.starts_with("GET /bkt/pre/a/c/0/1 ")),
        "the unchanged one comes from the cache: {reqs:#?}"
    );
    m.stop();
}

#[test]
fn a_daemon_killed_while_filling_the_cache_leaves_nothing_served_wrong() {
    let Some(moto) = S3::start(S3Server::Moto) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let objects: Vec<(String, Vec<u8>)> =
        (0..4).map(|i| (format!("pre/f{i}"), content(6 << 20, 10 + i))).collect();
    moto.put_all(&objects);
    let cache_arg = cache.to_str().unwrap();
    let mnt = tmp.path().join("mnt");
    let mut m = mount(&moto, &mnt, &["--view", "raw", "--cache-dir", cache_arg]);
    // Readers in child processes (a reader of a killed FUSE mount gets an error, not a hang).
    let readers: Vec<_> = objects
        .iter()
        .map(|(k, _)| {
            Command::new("cat")
                .arg(m.path(k.strip_prefix("pre/").unwrap()))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while cache_bytes(&cache) < 4 << 20 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut child = m.child.take().unwrap();
    child.kill().unwrap(); // SIGKILL, in the middle of filling the cache
    child.wait().unwrap();
    common::force_unmount(&m.mnt);
    for mut r in readers {
        let _ = r.wait();
    }
    drop(m);
    let kept = cache_bytes(&cache);
    assert!(kept > 0, "the cache was being filled when the daemon died");

    // Damage one kept block as a power loss might (a torn tail): it must be refetched too.
    let mut blocks: Vec<PathBuf> = Vec::new();
    for sub in std::fs::read_dir(cache.join("blocks")).unwrap().flatten() {
        blocks.extend(std::fs::read_dir(sub.path()).unwrap().flatten().map(|e| e.path()));
    }
    if let Some(b) = blocks.first() {
        let raw = std::fs::read(b).unwrap();
        std::fs::write(b, &raw[..raw.len() - 1000]).unwrap();
    }

    // Restarted past the TTL (its clock ahead): what the killed daemon kept is revalidated
    // and served from disk, except what fails its check.
    let port = common::s3::free_port();
    let addr = format!("127.0.0.1:{port}");
    let endpoint = moto.endpoint();
    let args = ["--endpoint-url", endpoint.as_str(), "--view", "raw", "--cache-dir", cache_arg];
    let args = [&args[..], &["--metadata-ttl", "1", "--metrics-addr", &addr]].concat();
    let later = [ENV, &[("ZM_TEST_CLOCK_OFFSET", "10")]].concat();
    let m = Mount::start_with(&format!("s3://{BUCKET}/pre"), &mnt, &args, &later);
    for (k, v) in &objects {
        let got = std::fs::read(m.path(k.strip_prefix("pre/").unwrap())).unwrap();
        assert!(got == *v, "{k}: wrong bytes after the restart");
    }
    assert!(
        m.log_text().contains("failed its check") || blocks.is_empty(),
        "the torn block was detected:\n{}",
        m.log_text()
    );
    let corrupt = metric(port, "zarr_mount_disk_cache_corrupt_total").unwrap_or(0);
    assert!(corrupt >= 1 || blocks.is_empty(), "counted: {corrupt}");
    assert!(!cache.join("tmp").read_dir().unwrap().any(|e| {
        // Leftover temp files of the killed daemon were removed at start (new ones may exist).
        e.unwrap().file_name().to_string_lossy().starts_with(&format!("{}.", child.id()))
    }));
}

#[test]
fn a_second_daemon_on_the_same_cache_directory_is_refused() {
    let Some(moto) = S3::start(S3Server::Moto) else { return };
    moto.put("pre/x", b"x");
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let cache_arg = cache.to_str().unwrap();
    let _first = mount(&moto, &tmp.path().join("mnt1"), &["--cache-dir", cache_arg]);
    let mnt2 = tmp.path().join("mnt2");
    std::fs::create_dir_all(&mnt2).unwrap();
    // Not in the foreground: refused before it daemonizes, with exit code 2.
    let out = Command::new(common::BIN)
        .arg(format!("s3://{BUCKET}/pre"))
        .arg(&mnt2)
        .args(["--endpoint-url", &moto.endpoint(), "--cache-dir", cache_arg])
        .envs(ENV.iter().copied())
        .output()
        .unwrap();
    common::force_unmount(&mnt2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("in use by another zarr-mount"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(!common::is_mounted(&mnt2.canonicalize().unwrap()));
}

#[test]
fn cache_flags_are_checked_before_anything_is_mounted() {
    let (tmp, src, mnt) = common::dirs();
    let cache = tmp.path().join("cache");
    let run = |args: &[&str]| {
        let out = Command::new(common::BIN).arg(&src).arg(&mnt).args(args).output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).trim().to_string())
    };
    let (code, err) = run(&["--cache-dir", cache.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--cache-dir applies only to object-store sources"), "{err}");
    let (code, err) = run(&["--cache-max-size", "1G"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--cache-max-size needs --cache-dir"), "{err}");
    assert!(!common::is_mounted(&mnt.canonicalize().unwrap()));
}

/// Opening `data.zarr` in a mounted folder: its lookup brings its metadata documents, so
/// zarr-python's three reads of them send nothing more; another folder's lookup sends only
/// its own requests.
#[test]
fn a_zarr_directory_lookup_brings_its_metadata_documents() {
    let Some(moto) = S3::start(S3Server::Moto) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let meta = uint8_array_of_2x2_chunks(4);
    moto.put_all(&[
        ("pre/data.zarr/zarr.json".to_string(), meta.clone()),
        ("pre/plain/x".to_string(), b"x".to_vec()),
        ("pre/later.zarr/zarr.json".to_string(), meta.clone()),
    ]);
    let mnt = tmp.path().join("mnt");
    let from = moto.log().len();
    let m = mount(&moto, &mnt, &["--view", "raw"]);
    moto.document_gets_since(from, "pre");
    let from = moto.log().len();
    assert!(std::fs::metadata(m.path("data.zarr")).unwrap().is_dir());
    assert_eq!(std::fs::read(m.path("data.zarr/zarr.json")).unwrap(), meta);
    assert!(!m.path("data.zarr/.zarray").exists() && !m.path("data.zarr/.zattrs").exists());
    let reqs = moto.document_gets_since(from, "pre/data.zarr");
    let probes = reqs.iter().filter(|r| r.starts_with("HEAD /bkt/pre/data.zarr ")).count();
    let lists = reqs.iter().filter(|r| r.contains("prefix=pre/data.zarr/")).count();
    assert_eq!((probes, lists, reqs.len()), (1, 1, 7), "the lookup and five GETs: {reqs:#?}");
    let from = moto.log().len();
    assert!(std::fs::metadata(m.path("plain")).unwrap().is_dir());
    // Documents fetched for `plain` would be asked for before those of `later.zarr`, looked
    // up after it: once the latter are in, the former would be too.
    assert!(std::fs::metadata(m.path("later.zarr")).unwrap().is_dir());
    moto.document_gets_since(from, "pre/later.zarr");
    let reqs: Vec<String> =
        moto.requests_since(from).into_iter().filter(|r| r.contains("pre/plain")).collect();
    assert_eq!(reqs.len(), 2, "a HEAD and a LIST, no document fetched: {reqs:#?}");
}

/// The `zarr.json` of a `side` x `side` uint8 array in 2 x 2 chunks, stored raw (`c/Y/X`).
fn uint8_array_of_2x2_chunks(side: u64) -> Vec<u8> {
    format!(
        r#"{{"zarr_format":3,"node_type":"array","shape":[{side},{side}],"data_type":"uint8","chunk_grid":{{"name":"regular","configuration":{{"chunk_shape":[2,2]}}}},"chunk_key_encoding":{{"name":"default","configuration":{{"separator":"/"}}}},"fill_value":0,"codecs":[{{"name":"bytes"}}]}}"#
    )
    .into_bytes()
}

/// The raw view over an array on S3: once its `zarr.json` was read, the directories of its
/// chunk tree cost no request and a chunk file one HEAD (no LIST); names outside the grid are
/// still asked for. A remount on the warm cache directory then reads the array without a
/// single request, the start-up check included.
#[test]
fn lookups_inside_a_known_chunk_tree_and_a_warm_remount_of_an_array() {
    let Some(moto) = S3::start(S3Server::Moto) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let meta = &uint8_array_of_2x2_chunks(4)[..];
    let objects: Vec<(String, Vec<u8>)> = vec![
        ("pre/zarr.json".into(), meta.to_vec()),
        ("pre/c/0/0".into(), vec![1, 2, 3, 4]),
        ("pre/c/1/1".into(), vec![5, 6, 7, 8]),
    ];
    moto.put_all(&objects);
    let mnt = tmp.path().join("mnt");
    // Request by request: no prefetch of the array's other chunks (next test).
    let cache_dir = cache.to_str().unwrap();
    let args = [
        "--view",
        "raw",
        "--cache-dir",
        cache_dir,
        "--metadata-ttl",
        "60",
        "--array-prefetch",
        "0",
    ];
    let from = moto.log().len();
    let mut m = mount(&moto, &mnt, &args);
    assert_eq!(std::fs::read(m.path("zarr.json")).unwrap(), meta);
    // zarr-python's probes of the v2 documents.
    assert!(!m.path(".zarray").exists() && !m.path(".zattrs").exists());
    // The mount's start sends its check (one LIST) and a GET of each metadata name at the
    // root, present or not, which the lookups and the read above then use: no HEAD, no other
    // request. The GETs may still be on their way when the reads are done: wait for all.
    let reqs = moto.document_gets_since(from, "pre");
    let lists = reqs.iter().filter(|r| r.contains("list-type")).count();
    assert_eq!((lists, reqs.len()), (1, 6), "the check and a GET per metadata name: {reqs:#?}");
    let from = moto.log().len();
    for dir in ["c", "c/0", "c/1"] {
        assert!(std::fs::metadata(m.path(dir)).unwrap().is_dir(), "{dir}");
    }
    assert_eq!(std::fs::read(m.path("c/0/0")).unwrap(), [1, 2, 3, 4]);
    assert_eq!(std::fs::read(m.path("c/1/1")).unwrap(), [5, 6, 7, 8]);
    assert!(!m.path("c/0/1").exists(), "a missing chunk is absent");
    assert!(!m.path("c/5").exists(), "outside the grid");
    let reqs = moto.requests_since(from);
    let lists: Vec<&String> = reqs.iter().filter(|r| r.contains("list-type")).collect();
    assert!(
        lists.len() == 1 && lists[0].contains("prefix=pre/c/5/"),
        "only the name outside the grid is listed: {reqs:#?}"
    );
    // A chunk's lookup is one GET of the whole (small) chunk, which its read then uses: one
    // request per chunk, present or not. Only c/5 is HEADed (with its LIST).
    let heads: Vec<&String> = reqs.iter().filter(|r| r.starts_with("HEAD ")).collect();
    assert!(heads.len() == 1 && heads[0].contains("pre/c/5"), "only c/5 is HEADed: {reqs:#?}");
    for chunk in ["c/0/0", "c/1/1", "c/0/1"] {
        let gets = reqs
            .iter()
            .filter(|r| r.starts_with("GET ") && r.contains(&format!("pre/{chunk} ")))
            .count()
            + reqs
                .iter()
                .filter(|r| r.starts_with("GET ") && r.contains(&format!("pre/{chunk}?")))
                .count();
        assert_eq!(gets, 1, "one GET of {chunk}: {reqs:#?}");
    }
    assert_eq!(reqs.len(), 5, "one request per chunk name, two for c/5: {reqs:#?}");
    m.stop();
    drop(m);

    let from = moto.log().len();
    let mut m = mount(&moto, &mnt, &args);
    assert_eq!(std::fs::read(m.path("zarr.json")).unwrap(), meta);
    assert!(!m.path(".zarray").exists() && !m.path(".zattrs").exists());
    assert_eq!(std::fs::read(m.path("c/0/0")).unwrap(), [1, 2, 3, 4]);
    assert_eq!(std::fs::read(m.path("c/1/1")).unwrap(), [5, 6, 7, 8]);
    let reqs = moto.requests_since(from);
    assert!(reqs.is_empty(), "requests of a warm remount: {reqs:#?}");
    m.stop();
}

/// The first chunk read of a small array fetches all its chunks at once (`--array-prefetch`):
/// the other chunks are then read with no request, and they land in the disk cache too, so
/// a warm remount reads every chunk without a request. The v2 view does the same.
#[test]
fn a_small_array_is_fetched_whole_at_its_first_chunk_read() {
    let Some(moto) = S3::start(S3Server::Moto) else { return };
    let cache = tempfile::tempdir().unwrap();
    let meta = &uint8_array_of_2x2_chunks(6)[..];
    // Chunk (y, x) of the 3 x 3 grid holds 4 bytes of its number in C order.
    let chunks = || (0..3u8).flat_map(|y| (0..3u8).map(move |x| (y, x, vec![y * 3 + x; 4])));
    let mut objects: Vec<(String, Vec<u8>)> = vec![("pre/zarr.json".into(), meta.to_vec())];
    objects.extend(chunks().map(|(y, x, bytes)| (format!("pre/c/{y}/{x}"), bytes)));
    moto.put_all(&objects);
    let chunk_gets = || {
        let reqs = moto.requests_since(0);
        reqs.iter().filter(|r| r.starts_with("GET /bkt/pre/c/")).count()
    };
    let wait_for_chunk_gets = |n: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while chunk_gets() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "no prefetch: {:#?}",
                moto.requests_since(0)
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    // Every chunk read through `m` (at `prefix`y/x) with no request to the store.
    let read_all_from_memory = |m: &Mount, prefix: &str, what: &str| {
        let from = moto.log().len();
        for (y, x, bytes) in chunks() {
            assert_eq!(std::fs::read(m.path(&format!("{prefix}{y}/{x}"))).unwrap(), bytes);
        }
        let reqs = moto.requests_since(from);
        assert!(reqs.is_empty(), "{what}: {reqs:#?}");
    };
    let mnt = cache.path().join("mnt");
    let dir = cache.path().join("cache");
    let args = ["--cache-dir", dir.to_str().unwrap(), "--metadata-ttl", "60"];
    let mut m = mount(&moto, &mnt, &args);
    // The root's documents are fetched in the background at mount start: wait for them, so
    // that they are not taken for requests of the reads below.
    moto.document_gets_since(0, "pre");
    assert_eq!(std::fs::read(m.path("zarr.json")).unwrap(), meta);
    assert_eq!(std::fs::read(m.path("c/0/0")).unwrap(), [0; 4]);
    // The other 8 chunks were asked for together with the first.
    wait_for_chunk_gets(9);
    read_all_from_memory(&m, "c/", "chunks read after the prefetch");
    assert_eq!(chunk_gets(), 9, "one GET per chunk: {:#?}", moto.requests_since(0));
    m.stop();
    drop(m);

    let mut m = mount(&moto, &mnt, &args);
    assert_eq!(std::fs::read(m.path("zarr.json")).unwrap(), meta);
    read_all_from_memory(&m, "c/", "a warm remount");
    m.stop();
    drop(m);

    // The v2 view (zarr-python 2 reading a v3 array) prefetches the same way.
    let from = moto.log().len();
    let mut m = mount(&moto, &mnt, &["--view", "v2", "--metadata-ttl", "60"]);
    moto.document_gets_since(from, "pre");
    assert!(std::fs::read(m.path(".zarray")).is_ok());
    assert_eq!(std::fs::read(m.path("0/0")).unwrap(), [0; 4]);
    wait_for_chunk_gets(18);
    read_all_from_memory(&m, "", "v2 view: chunks read after the prefetch");
    m.stop();
}

/// A warm remount hands the kernel the disk cache's copy of each whole object at open (FUSE
/// passthrough; not metadata documents, nor files under 2 MiB): its reads never reach the
/// daemon, and the bytes are exact. A copy damaged
/// between mounts is refused, and that file is read through the daemon from the store.
#[test]
fn a_warm_remount_lets_the_kernel_read_whole_objects_from_their_copies() {
    let Some(moto) = S3::start(S3Server::Moto) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let objects: Vec<(String, Vec<u8>)> = vec![
        ("pre/zarr.json".into(), br#"{"zarr_format":3,"node_type":"group"}"#.to_vec()),
        ("pre/c/0".into(), content(3 << 20, 11)),
        ("pre/c/1".into(), content((2 << 20) + 100_000, 12)),
        ("pre/c/2".into(), content(4096, 13)),
    ];
    moto.put_all(&objects);
    let cache_arg = cache.to_str().unwrap();
    let mnt = tmp.path().join("mnt");
    let read_all = |m: &Mount| {
        for (k, v) in &objects {
            let got = std::fs::read(m.path(k.strip_prefix("pre/").unwrap())).unwrap();
            assert!(got == *v, "{k}: wrong bytes");
        }
    };
    let counts = |port: u16| {
        let reads = metric(port, r#"zarr_mount_fuse_requests_total{op="read"}"#).unwrap_or(0);
        (reads, metric(port, "zarr_mount_passthrough_opens_total").unwrap_or(0))
    };
    let mount_with_metrics = || {
        let port = common::s3::free_port();
        let addr = format!("127.0.0.1:{port}");
        let args =
            ["--view", "raw", "--read-only", "--cache-dir", cache_arg, "--metrics-addr", &addr];
        (mount(&moto, &mnt, &args), port)
    };

    // Cold: the reads go through the daemon, which keeps each object whole as a copy.
    let (mut m, port) = mount_with_metrics();
    read_all(&m);
    let (reads, _) = counts(port);
    assert!(reads >= 3, "cold reads reach the daemon: {reads}");
    m.stop();
    drop(m);
    let copies = walk(&cache.join("copies"));
    assert_eq!(copies.len(), 4, "{copies:?}");

    // Warm: every open is passthrough, no READ reaches the daemon, no GET reaches the store.
    let from = moto.log().len();
    let (mut m, port) = mount_with_metrics();
    read_all(&m);
    read_all(&m);
    let (reads, opens) = counts(port);
    if opens == 0 {
        // A kernel without FUSE passthrough (before 6.9, or built without it): the copies are
        // still read, through the daemon.
        eprintln!("this kernel did not take FUSE passthrough; reads went through the daemon");
    } else {
        // Metadata documents and files under 2 MiB are read through the daemon (which learns
        // chunk trees from the former and reads the latter ahead of a directory scan).
        assert!(reads <= 4, "only zarr.json's and c/2's reads reach the daemon: {reads}");
        assert_eq!(opens, 4, "every open of c/0 and c/1, in both passes");
    }
    let reqs = moto.requests_since(from);
    assert!(object_gets(&reqs).is_empty(), "GETs with a warm cache: {reqs:#?}");
    m.stop();
    drop(m);

    // A copy damaged between mounts: refused at open, read from the store instead.
    let damaged =
        copies.iter().find(|p| std::fs::metadata(p).unwrap().len() == (2 << 20) + 100_000).unwrap();
    let mut raw = std::fs::read(damaged).unwrap();
    raw[50_000] ^= 0x01;
    std::fs::write(damaged, raw).unwrap();
    let from = moto.log().len();
    let (mut m, port) = mount_with_metrics();
    read_all(&m);
    let reqs = moto.requests_since(from);
    assert_eq!(object_gets(&reqs).len(), 1, "only the damaged object is fetched: {reqs:#?}");
    let (_, opens) = counts(port);
    assert_eq!(opens, 1, "the damaged copy was not handed out");
    m.stop();
}

/// A file open through its copy keeps reading the version it opened; an open of the object's
/// new version meanwhile reads the new bytes (through the daemon: the kernel allows one backing
/// file per inode), and once all are closed the new version is passed through in turn.
#[test]
fn an_open_copy_does_not_hide_a_new_version_from_later_opens() {
    use std::io::Read;
    let Some(moto) = S3::start(S3Server::Moto) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let (old, new) = (content(3 << 20, 21), content(3 << 20, 22));
    moto.put("pre/big", &old);
    let args = ["--view", "raw", "--read-only", "--metadata-ttl", "1"];
    let cache_arg = cache.to_str().unwrap();
    let mut m =
        mount(&moto, &tmp.path().join("mnt"), &[&args[..], &["--cache-dir", cache_arg]].concat());
    let path = m.path("big");
    assert!(std::fs::read(&path).unwrap() == old);
    let mut held = std::fs::File::open(&path).unwrap();
    moto.put("pre/big", &new);
    m.advance_clock(); // past the metadata TTL
    assert!(std::fs::read(&path).unwrap() == new, "a new open reads the new version");
    let mut got = Vec::new();
    held.read_to_end(&mut got).unwrap();
    assert!(got == old, "the file opened before keeps its version");
    drop(held);
    assert!(std::fs::read(&path).unwrap() == new);
    m.stop();
}

/// Object bytes the daemon on `port` received from the store, over every kind of read.
fn object_bytes_received(port: u16) -> u64 {
    ["get", "range", "revalidate"]
        .iter()
        .map(|k| {
            metric(port, &format!("zarr_mount_backend_received_bytes_total{{kind=\"{k}\"}}"))
                .unwrap_or(0)
        })
        .sum()
}

fn revalidations(port: u16, result: &str) -> u64 {
    metric(port, &format!("zarr_mount_disk_cache_revalidations_total{{result=\"{result}\"}}"))
        .unwrap_or(0)
}

/// The disk cache across time (issue 40), on each S3 server: a remount past the metadata TTL
/// confirms what the cache holds (listings, HEADs, conditional GETs) and receives no object
/// byte; a changed object is fetched again (only it) and read new, a deleted one is gone;
/// with `--immutable` a remount sends no request at all.
fn past_the_ttl_a_remount_revalidates_and_downloads_nothing(kind: S3Server) {
    let Some(s3) = S3::start(kind) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let mut objects: Vec<(String, Vec<u8>)> = vec![
        ("pre/zarr.json".into(), br#"{"zarr_format":3,"node_type":"group"}"#.to_vec()),
        ("pre/arr/zarr.json".into(), uint8_array_of_2x2_chunks(4)),
        ("pre/arr/c/0/0".into(), vec![1, 2, 3, 4]),
        ("pre/arr/c/1/1".into(), vec![5, 6, 7, 8]),
        ("pre/big.bin".into(), content((3 << 20) + 5, 21)),
        ("pre/d/small".into(), content(3000, 22)),
        ("pre/d/mid".into(), content((1 << 20) + 17, 23)),
        ("pre/arr/c/0/1".into(), vec![9, 10, 11, 12]),
    ];
    s3.put_all(&objects);
    let cache_arg = cache.to_str().unwrap().to_string();
    let mnt = tmp.path().join("mnt");
    let endpoint = s3.endpoint();
    // Each mount's clock starts further ahead (ZM_TEST_CLOCK_OFFSET): past the 1 s TTL of
    // everything the mounts before it recorded.
    let mount_at = |offset: &str, extra: &[&str]| {
        let port = common::s3::free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut args = vec!["--endpoint-url", endpoint.as_str(), "--view", "raw"];
        args.extend(["--cache-dir", &cache_arg, "--metadata-ttl", "1", "--metrics-addr", &addr]);
        args.extend_from_slice(extra);
        let env = [ENV, &[("ZM_TEST_CLOCK_OFFSET", offset)]].concat();
        (Mount::start_with(&format!("s3://{BUCKET}/pre"), &mnt, &args, &env), port)
    };
    let read_all = |m: &Mount, objects: &[(String, Vec<u8>)]| {
        let files = walk(&m.path(""));
        assert_eq!(files.len(), objects.len(), "{files:#?}");
        for (k, v) in objects {
            let got = std::fs::read(m.path(k.strip_prefix("pre/").unwrap())).unwrap();
            assert!(got == *v, "{k}: wrong bytes");
        }
    };

    let (mut m, _) = mount_at("0", &[]);
    read_all(&m, &objects);
    m.stop();
    drop(m);

    // Past the TTL, a reader that opens the array's files by name, listing nothing itself (as
    // zarr-python does): the chunks of one directory are confirmed by one listing page, not a
    // request each. s3s-fs lists no ETags, so there each chunk has its own (a HEAD).
    let from = s3.log().len();
    let (mut m, port) = mount_at("5", &[]);
    for (k, v) in objects.iter().filter(|(k, _)| k.starts_with("pre/arr/")) {
        let got = std::fs::read(m.path(k.strip_prefix("pre/").unwrap())).unwrap();
        assert!(got == *v, "{k}: wrong bytes");
    }
    let reqs = s3.requests_since(from);
    let count =
        |pick: &dyn Fn(&str) -> bool| reqs.iter().filter(|r| pick(&r.replace("%2F", "/"))).count();
    let chunk_requests =
        count(&|r| r.split(' ').nth(1).is_some_and(|p| p.starts_with("/bkt/pre/arr/c/0/")));
    let listings = count(&|r| r.contains("list-type=2") && r.contains("prefix=pre/arr/c/0/&"));
    match kind {
        S3Server::Moto => assert_eq!((listings, chunk_requests), (1, 0), "{reqs:#?}"),
        _ => assert_eq!((listings, chunk_requests), (1, 2), "{reqs:#?}"),
    }
    assert_eq!(object_bytes_received(port), 0, "object bytes received past the TTL");
    m.stop();
    drop(m);

    // Past the TTL: every object confirmed, none received.
    let from = s3.log().len();
    let (mut m, port) = mount_at("10", &[]);
    read_all(&m, &objects);
    assert_eq!(object_bytes_received(port), 0, "object bytes received past the TTL");
    if kind == S3Server::Moto {
        // The metadata documents and chunks read by their lookups: conditional GETs, 304.
        let responses = s3.responses_since(from);
        let gets: Vec<_> =
            responses.iter().filter(|(r, _)| r.starts_with("GET /bkt/pre/")).collect();
        assert!(gets.iter().any(|(_, status)| status == "304"), "{responses:#?}");
        assert!(
            gets.iter().all(|(_, status)| status == "304" || status == "404"),
            "{responses:#?}"
        );
    }
    assert!(revalidations(port, "unchanged") >= 1, "{}", m.log_text());
    assert_eq!(revalidations(port, "changed") + revalidations(port, "deleted"), 0);
    m.stop();
    drop(m);

    // One object changed (same size), one deleted, behind the mount's back.
    let changed = content(3000, 24);
    s3.put("pre/d/small", &changed);
    rt_delete(&s3, "pre/d/mid");
    objects[5].1 = changed.clone();
    objects.remove(6);
    let (mut m, port) = mount_at("20", &[]);
    read_all(&m, &objects);
    let gone = std::fs::read(m.path("d/mid")).unwrap_err();
    assert_eq!(gone.kind(), std::io::ErrorKind::NotFound, "the deleted object");
    assert_eq!(object_bytes_received(port), changed.len() as u64, "only the changed object");
    assert_eq!(revalidations(port, "changed"), 1);
    let (_, _, scraped) = crate::metrics::scrape(port);
    crate::metrics::promtool_check(&scraped).expect("promtool accepts the disk cache's series");
    m.stop();
    drop(m);

    // --immutable: not a single request, however long after.
    let from = s3.log().len();
    let (mut m, port) = mount_at("1000", &["--immutable"]);
    read_all(&m, &objects);
    let reqs = s3.requests_since(from);
    assert!(reqs.is_empty(), "requests of an --immutable remount: {reqs:#?}");
    assert_eq!(object_bytes_received(port), 0);
    m.stop();
}

/// Delete `key` of `BUCKET` on `s3`.
fn rt_delete(s3: &S3, key: &str) {
    use object_store::ObjectStoreExt;
    let store = s3.client();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(store.delete(&object_store::path::Path::from(key))).unwrap();
}
