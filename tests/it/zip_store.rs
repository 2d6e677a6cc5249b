//! The zip backend against the `Store` trait directly (no FUSE): fixtures written by
//! zarr-python's ZipStore and Python's zipfile (tests/fixtures/zip/make_zips.py), compared with
//! what Python reads (manifest.json), plus corrupt archives and request counts.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use zarr_mount::store::backends::local::LocalStore;
use zarr_mount::store::backends::memory::MemoryStore;
use zarr_mount::store::backends::zip::{ZipError, ZipStore};
use zarr_mount::store::layers::recording::RecordingStore;
use zarr_mount::store::prelude::*;
use zarr_mount::store::read_only::ReadOnly;
use zarr_mount::store::StoreHints;
use zarr_mount::store::{ByteRange, StoreError};

const ZIPS: [&str; 5] = ["v2.zip", "v3.zip", "deflated.zip", "zip64.zip", "hostile.zip"];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/zip")
}

fn manifest() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join("manifest.json")).unwrap())
        .unwrap()
}

fn sha256(b: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, b)
        .as_ref()
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

fn recording(inner: Arc<dyn Store>) -> Arc<RecordingStore> {
    Arc::new(RecordingStore::new(inner))
}

async fn open_fixture(name: &str) -> ReadOnly<ZipStore> {
    let backing: Arc<dyn Store> = Arc::new(LocalStore::open(&fixtures()).unwrap());
    ZipStore::open(backing, name).await.unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Open `bytes` written as `name` in a fresh directory.
async fn open_bytes(bytes: &[u8]) -> Result<ReadOnly<ZipStore>, ZipError> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("x.zip"), bytes).unwrap();
    let backing: Arc<dyn Store> = Arc::new(LocalStore::open(dir.path()).unwrap());
    ZipStore::open(backing, "x.zip").await
}

/// Expected one-level listings (dir -> (files, subdirs)) from entry names and explicit dirs.
fn expected_tree(
    entries: &[String],
    explicit_dirs: &[String],
) -> BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> {
    let mut tree: BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
    tree.entry(String::new()).or_default();
    let add_dir = |tree: &mut BTreeMap<_, (BTreeSet<String>, BTreeSet<String>)>, d: &str| {
        let mut d = d.to_string();
        while !d.is_empty() {
            tree.entry(d.clone()).or_default();
            let (parent, leaf) = match d.rfind('/') {
                Some(i) => (d[..i].to_string(), d[i + 1..].to_string()),
                None => (String::new(), d.clone()),
            };
            tree.entry(parent.clone()).or_default().1.insert(leaf);
            d = parent;
        }
    };
    for d in explicit_dirs {
        add_dir(&mut tree, d);
    }
    for e in entries {
        let (parent, leaf) = match e.rfind('/') {
            Some(i) => (&e[..i], &e[i + 1..]),
            None => ("", e.as_str()),
        };
        add_dir(&mut tree, parent);
        tree.get_mut(parent).unwrap().0.insert(leaf.to_string());
    }
    tree
}

#[tokio::test]
async fn every_fixture_matches_what_python_reads() {
    let manifest = manifest();
    for name in ZIPS {
        let m = &manifest[name];
        let z = open_fixture(name).await;
        let entries: BTreeMap<String, (String, u64)> = m["entries"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    (v["sha256"].as_str().unwrap().to_string(), v["size"].as_u64().unwrap()),
                )
            })
            .collect();
        assert_eq!(z.len(), entries.len(), "{name}: entry count");
        for (key, (sha, size)) in &entries {
            let meta =
                z.head(key).await.unwrap().unwrap_or_else(|| panic!("{name}: {key} missing"));
            assert_eq!(meta.size, *size, "{name}:{key} size");
            let all = z.get(key).await.unwrap();
            assert_eq!(&sha256(&all), sha, "{name}:{key} content");
            // Ranges, including ones clipped at the end and empty ones.
            let n = *size;
            let cuts = [0, n / 3, n / 2, 2 * n / 3, n.saturating_sub(1), n];
            let mut joined = Vec::new();
            for w in [0, n / 3, 2 * n / 3].windows(2) {
                joined.extend_from_slice(&z.get_range(key, w[0]..w[1]).await.unwrap());
            }
            joined.extend_from_slice(&z.get_range(key, 2 * n / 3..n + 100).await.unwrap());
            assert_eq!(&sha256(&joined), sha, "{name}:{key} ranges");
            for &a in &cuts {
                for &b in &cuts {
                    if a <= b {
                        let got = z.get_range(key, a..b).await.unwrap();
                        assert_eq!(got, all.slice(a as usize..b as usize), "{name}:{key} {a}..{b}");
                    }
                }
            }
            assert!(z.get_range(key, n + 5..n + 10).await.unwrap().is_empty());
            let (suffix, meta2) = z.get_ranged(key, ByteRange::Suffix(7)).await.unwrap().unwrap();
            assert_eq!(suffix, all.slice(n.saturating_sub(7) as usize..));
            assert_eq!(meta2, meta);
        }
        // Listings of every directory.
        let names: Vec<String> = entries.keys().cloned().collect();
        let dirs: Vec<String> =
            m["dirs"].as_array().unwrap().iter().map(|d| d.as_str().unwrap().to_string()).collect();
        for (dir, (files, subdirs)) in expected_tree(&names, &dirs) {
            let l = z.list(&dir).await.unwrap();
            let got_files: BTreeSet<String> = l.files.iter().map(|f| f.0.clone()).collect();
            let got_dirs: BTreeSet<String> = l.dirs.iter().cloned().collect();
            assert_eq!(got_files, files, "{name}: files in {dir:?}");
            assert_eq!(got_dirs, subdirs, "{name}: dirs in {dir:?}");
            assert!(z.lookup(&dir).await.unwrap().dir, "{name}: {dir:?} is a dir");
            for (f, meta) in &l.files {
                assert_eq!(meta.size, entries[&zarr_mount::store::join_key(&dir, f)].1);
            }
        }
        assert!(z.list("no/such/dir").await.unwrap().files.is_empty());
        assert!(z.head("no/such/key").await.unwrap().is_none());
        assert!(matches!(z.get("no/such/key").await, Err(StoreError::NotFound(_))));
        assert!(!z.has_real_dirs());
        assert!(
            z.describe().starts_with("zip:local:") && z.describe().ends_with(&format!("/{name}")),
            "{}",
            z.describe()
        );
    }
}

#[tokio::test]
async fn zarr_python_fixtures_have_the_expected_layout() {
    let v3 = open_fixture("v3.zip").await;
    let root = v3.list("").await.unwrap();
    assert_eq!(root.dirs, vec!["plain", "sharded"]);
    assert_eq!(root.files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), vec!["zarr.json"]);
    // zarr.json was written three times; the last one (with the attributes) wins.
    let group: serde_json::Value =
        serde_json::from_slice(&v3.get("zarr.json").await.unwrap()).unwrap();
    assert_eq!(group["attributes"]["title"], "v3 fixture");
    assert_eq!(group["attributes"]["nested"]["a"][2], 3);
    let sharded: serde_json::Value =
        serde_json::from_slice(&v3.get("sharded/zarr.json").await.unwrap()).unwrap();
    assert_eq!(sharded["codecs"][0]["name"], "sharding_indexed");
    assert_eq!(sharded["attributes"]["units"], "m");
    assert_eq!(v3.list("sharded/c").await.unwrap().dirs, vec!["0", "1"]);

    let v2 = open_fixture("v2.zip").await;
    let attrs: serde_json::Value =
        serde_json::from_slice(&v2.get(".zattrs").await.unwrap()).unwrap();
    assert_eq!(attrs["answer"], 42);
    assert!(v2.lookup("nested/counts").await.unwrap().dir);
    assert_eq!(v2.list("nested/counts").await.unwrap().files.len(), 7); // .zarray .zattrs 0..4
}

#[tokio::test]
async fn deflated_entries_inflate_and_explicit_dirs_exist() {
    let z = open_fixture("deflated.zip").await;
    let big = z.get("explicit/big.bin").await.unwrap();
    let want: Vec<u8> = (0..=255u8).cycle().take(256 * 1024).collect();
    assert_eq!(big, Bytes::from(want.clone()));
    assert_eq!(
        z.get_range("explicit/big.bin", 1000..1010).await.unwrap(),
        Bytes::from(want[1000..1010].to_vec())
    );
    assert_eq!(z.head("explicit/big.bin").await.unwrap().unwrap().size, 256 * 1024);
    let empty = z.lookup("explicit/empty_dir").await.unwrap();
    assert!(empty.dir && empty.file.is_none());
    let l = z.list("explicit/empty_dir").await.unwrap();
    assert!(l.files.is_empty() && l.dirs.is_empty());
    assert_eq!(z.list("explicit").await.unwrap().dirs, vec!["empty_dir"]);
}

#[tokio::test]
async fn zip64_fixture_really_is_zip64() {
    let raw = std::fs::read(fixtures().join("zip64.zip")).unwrap();
    let eocd = raw.len() - 22;
    assert_eq!(&raw[eocd..eocd + 4], b"PK\x05\x06");
    assert_eq!(
        &raw[eocd + 10..eocd + 12],
        &[0xff, 0xff],
        "entry count deferred to the ZIP64 record"
    );
    assert_eq!(&raw[eocd - 20..eocd - 16], b"PK\x06\x07");
    let z = open_fixture("zip64.zip").await;
    assert_eq!(z.len(), 5);
    assert!(z.get("z/y/x").await.unwrap().starts_with(b"entry 4 z/y/x\n"));
}

#[tokio::test]
async fn hostile_names_are_not_served_and_the_last_duplicate_wins() {
    let z = open_fixture("hostile.zip").await;
    let root = z.list("").await.unwrap();
    assert_eq!(root.dirs, vec!["ok"]);
    assert_eq!(root.files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), vec!["dup"]);
    for bad in ["../evil", "/abs", "a//b", "./x", "evil", "abs", "x", "a", "a/b"] {
        assert!(z.head(bad).await.unwrap().is_none(), "{bad} served");
        assert!(!z.lookup(bad).await.unwrap().dir, "{bad} is a dir");
    }
    assert_eq!(z.get("dup").await.unwrap(), Bytes::from_static(b"second copy wins"));
    assert_eq!(manifest()["hostile.zip"]["hostile"].as_array().unwrap().len(), 4);
}

#[tokio::test]
async fn read_only() {
    let z = open_fixture("v3.zip").await;
    assert!(matches!(z.put("new", Bytes::from_static(b"x")).await, Err(StoreError::ReadOnly)));
    assert!(matches!(z.delete("zarr.json").await, Err(StoreError::ReadOnly)));
    assert!(matches!(z.rename("zarr.json", "y").await, Err(StoreError::ReadOnly)));
    assert!(matches!(z.create_dir("d").await, Err(StoreError::ReadOnly)));
    assert!(matches!(z.remove_dir("plain").await, Err(StoreError::ReadOnly)));
    // Nothing changed.
    assert!(z.head("zarr.json").await.unwrap().is_some());
}

fn expect_invalid(r: Result<ReadOnly<ZipStore>, ZipError>, what: &str) -> String {
    match r {
        Err(e @ ZipError::Invalid { .. }) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "{what}: multi-line message {msg:?}");
            msg
        }
        Err(e) => panic!("{what}: wrong error {e}"),
        Ok(_) => panic!("{what}: opened"),
    }
}

#[tokio::test]
async fn corrupt_archives_fail_at_open() {
    let good = std::fs::read(fixtures().join("v3.zip")).unwrap();
    // Truncated: the end records are gone.
    let msg = expect_invalid(open_bytes(&good[..good.len() / 2]).await, "truncated");
    assert!(msg.contains("no end of central directory"), "{msg}");
    let msg = expect_invalid(open_bytes(&good[..good.len() - 10]).await, "truncated EOCD");
    assert!(msg.contains("end of central directory"), "{msg}");
    // Corrupted EOCD signature.
    let eocd = good.len() - 22;
    let mut bad = good.clone();
    bad[eocd + 1] = b'X';
    expect_invalid(open_bytes(&bad).await, "EOCD signature");
    // Corrupted central directory offset / size.
    let mut bad = good.clone();
    bad[eocd + 16..eocd + 20].copy_from_slice(&0x0fff_ffffu32.to_le_bytes());
    let msg = expect_invalid(open_bytes(&bad).await, "EOCD offset");
    assert!(msg.contains("central directory"), "{msg}");
    let mut bad = good.clone();
    bad[eocd + 12..eocd + 16].copy_from_slice(&0x0fff_ffffu32.to_le_bytes());
    expect_invalid(open_bytes(&bad).await, "EOCD size");
    // Corrupted central directory contents.
    let mut bad = good.clone();
    let cd = u32::from_le_bytes(good[eocd + 16..eocd + 20].try_into().unwrap()) as usize;
    bad[cd..cd + 4].copy_from_slice(b"JUNK");
    expect_invalid(open_bytes(&bad).await, "central header signature");
    // Not a zip at all; empty file; missing file.
    expect_invalid(open_bytes(b"PK but not really a zip archive").await, "garbage");
    expect_invalid(open_bytes(b"").await, "empty");
    let backing: Arc<dyn Store> = Arc::new(LocalStore::open(&fixtures()).unwrap());
    assert!(matches!(ZipStore::open(backing, "missing.zip").await, Err(ZipError::NotFound(_))));
}

#[tokio::test]
async fn absurd_entry_counts_fail_at_open_without_reading_the_directory() {
    let good = std::fs::read(fixtures().join("zip64.zip")).unwrap();
    let eocd = good.len() - 22;
    let rec = eocd - 20 - 56;
    assert_eq!(&good[rec..rec + 4], b"PK\x06\x06");
    let mut bad = good.clone();
    bad[rec + 24..rec + 32].copy_from_slice(&(1u64 << 40).to_le_bytes());
    bad[rec + 32..rec + 40].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let counting = recording(Arc::new(MemoryStore::new()));
    counting.put("x.zip", Bytes::from(bad)).await.unwrap();
    counting.take(); // only what opening costs counts below
    let r = ZipStore::open(counting.clone(), "x.zip").await;
    let msg = expect_invalid(r, "2^40 entries");
    assert!(msg.contains("claims 1099511627776 entries"), "{msg}");
    assert_eq!(counting.take().len(), 1, "refused from the tail alone");
    // A ZIP64 central directory size beyond the archive.
    let mut bad = good.clone();
    bad[rec + 40..rec + 48].copy_from_slice(&(1u64 << 50).to_le_bytes());
    let msg = expect_invalid(open_bytes(&bad).await, "2^50 directory bytes");
    assert!(msg.contains("larger than"), "{msg}");
}

/// A zip (written with the zip crate) whose central directory is larger than the tail read at
/// open, with one big entry and many small ones.
fn big_zip() -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    w.start_file("big/chunk", opts).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    w.write_all(&big).unwrap();
    for i in 0..2000 {
        w.start_file(format!("many/with/a/fairly/long/prefix/c/{i}"), opts).unwrap();
        w.write_all(format!("chunk number {i}").as_bytes()).unwrap();
    }
    w.finish().unwrap().into_inner()
}

#[tokio::test]
async fn request_counts() {
    // Small fixture: the tail holds the whole archive, so every local header is resolved at
    // open and each read is exactly one ranged request.
    let counting = recording(Arc::new(LocalStore::open(&fixtures()).unwrap()));
    let z = ZipStore::open(counting.clone(), "v3.zip").await.unwrap();
    let open_calls = counting.take();
    assert_eq!(open_calls.len(), 1, "{open_calls:?}");
    assert!(open_calls[0].starts_with("get_ranged v3.zip Suffix("), "{open_calls:?}");
    z.list("").await.unwrap();
    z.list("sharded/c").await.unwrap();
    z.head("plain/zarr.json").await.unwrap();
    z.lookup("plain").await.unwrap();
    assert!(counting.take().is_empty(), "metadata answered from memory");
    z.get_range("sharded/c/0/0", 10..20).await.unwrap();
    assert_eq!(counting.take().len(), 1);
    z.get("plain/zarr.json").await.unwrap();
    assert_eq!(counting.take().len(), 1);

    // Deflated: one read for the whole entry, then served from the inflated cache.
    let counting = recording(Arc::new(LocalStore::open(&fixtures()).unwrap()));
    let z = ZipStore::open(counting.clone(), "deflated.zip").await.unwrap();
    counting.take();
    z.get_range("explicit/big.bin", 0..10).await.unwrap();
    z.get_range("explicit/big.bin", 5000..6000).await.unwrap();
    z.get("explicit/big.bin").await.unwrap();
    assert_eq!(counting.take().len(), 1);

    // Large archive: central directory beyond the tail -> exactly two requests at open.
    let bytes = big_zip();
    let mem = Arc::new(MemoryStore::new());
    mem.put("big.zip", Bytes::from(bytes)).await.unwrap();
    let counting = recording(mem);
    let z = ZipStore::open(counting.clone(), "big.zip").await.unwrap();
    let open_calls = counting.take();
    assert_eq!(open_calls.len(), 2, "{open_calls:?}");
    assert_eq!(z.len(), 2001);
    // First read of an entry whose local header was not in the fetched bytes: header and data
    // in one request when the range starts near the entry start...
    let got = z.get("many/with/a/fairly/long/prefix/c/7").await.unwrap();
    assert_eq!(got, Bytes::from("chunk number 7"));
    assert_eq!(counting.take().len(), 1);
    let got = z.get_range("many/with/a/fairly/long/prefix/c/7", 6..12).await.unwrap();
    assert_eq!(got, Bytes::from("number"));
    assert_eq!(counting.take().len(), 1);
    // ...and a 30-byte header read plus the data read when it starts far into the entry.
    let got = z.get_range("big/chunk", 200_000..200_010).await.unwrap();
    let want: Vec<u8> = (200_000..200_010u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(got, Bytes::from(want));
    assert_eq!(counting.take().len(), 2);
    z.get_range("big/chunk", 299_990..400_000).await.unwrap();
    assert_eq!(counting.take().len(), 1, "offset known from now on");
    // Listing a large directory needs no requests.
    assert_eq!(z.list("many/with/a/fairly/long/prefix/c").await.unwrap().files.len(), 2000);
    assert!(counting.take().is_empty());
}
