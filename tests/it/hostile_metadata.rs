//! Hostile metadata through real mounts (issue #51): small files that claim huge things. An
//! array of 2^62 elements in the flat view, a listing of 10^12 virtual chunk files, shard
//! indexes pointing past the end or overlapping, a zip entry that inflates beyond its declared
//! size, JSON nested 10^5 deep, an OME `multiscales` with 10^6 datasets.
//!
//! What must hold for each: an error (with a log line) or a bounded answer, a daemon that stays
//! up and exits cleanly, and a peak RSS (VmHWM) under [`BUDGET`].

use crate::common;

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{dirs, peak_rss, sorted_names, Mount};

/// The daemon's `--cache-size` in these tests.
const CACHE_SIZE: &str = "64M";

/// The memory budget of a daemon mounted with `--cache-size 64M` (docs/SECURITY.md): the object
/// cache (64 MiB), the decoded-chunk cache (at least 64 MiB, so 64 MiB here) and 128 MiB for the
/// daemon itself (code, runtime, threads, the metadata cache at these sizes).
const BUDGET: u64 = (64 + 64 + 128) << 20;

fn mount(src: &Path, mnt: &Path, view: &str) -> Mount {
    Mount::start(src, mnt, &["--view", view, "--cache-size", CACHE_SIZE])
}

/// The daemon is still running, its peak RSS is under [`BUDGET`], and it exits cleanly.
fn assert_bounded_and_alive(mut m: Mount, what: &str) {
    let child = m.child.as_mut().expect("running");
    let pid = child.id();
    assert!(child.try_wait().unwrap().is_none(), "{what}: the daemon died:\n{}", m.log_text());
    let peak = peak_rss(pid);
    eprintln!("{what}: daemon peak RSS {} MiB", peak >> 20);
    assert!(
        peak < BUDGET,
        "{what}: peak RSS {} MiB over the budget {} MiB",
        peak >> 20,
        BUDGET >> 20
    );
    let status = m.stop();
    assert!(status.success(), "{what}: the daemon exited {status}:\n{}", m.log_text());
}

fn write(path: &Path, data: impl AsRef<[u8]>) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, data).unwrap();
}

fn errno<T>(r: std::io::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

const GROUP: &str = r#"{"zarr_format":3,"node_type":"group","attributes":{}}"#;

/// A v3 array with the `bytes` codec (or `codecs` when given).
fn array_json(shape: &[u64], chunks: &[u64], dtype: &str, codecs: Option<&str>) -> String {
    let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let codecs = codecs.unwrap_or(r#"[{"name":"bytes","configuration":{"endian":"little"}}]"#);
    format!(
        r#"{{"zarr_format":3,"node_type":"array","shape":[{}],"data_type":"{dtype}",
        "chunk_grid":{{"name":"regular","configuration":{{"chunk_shape":[{}]}}}},
        "chunk_key_encoding":{{"name":"default","configuration":{{"separator":"/"}}}},
        "fill_value":0,"codecs":{codecs},"attributes":{{}}}}"#,
        list(shape),
        list(chunks)
    )
}

// ---- an array of 2^62 elements in the flat view ----

/// Arrays of 2^62 elements (one axis of 2^62, 2^54 planes of 16 x 16, a 2^31 x 2^31 image of
/// 2-byte pixels: 2^63 bytes) show files of their exact size, or are left out with a log line
/// when no file can hold them; reads at both ends of a huge file give the fill value, and
/// nothing is allocated for what the shape claims.
#[test]
fn flat_view_of_arrays_of_2_pow_62_elements() {
    let (_tmp, src, mnt) = dirs();
    write(&src.join("zarr.json"), GROUP);
    write(&src.join("line/zarr.json"), array_json(&[1 << 62], &[1 << 20], "int8", None));
    write(
        &src.join("planes/zarr.json"),
        array_json(&[1 << 54, 16, 16], &[1, 16, 16], "uint8", None),
    );
    write(
        &src.join("square/zarr.json"),
        array_json(&[1 << 31, 1 << 31], &[1024, 1024], "uint16", None),
    );
    write(&src.join("ok/zarr.json"), array_json(&[4], &[4], "int8", None));
    write(&src.join("ok/c/0"), [1u8, 2, 3, 4]);
    let m = mount(&src, &mnt, "flat");

    // The .npy files of 2^62 one-byte elements are there at their exact size; no TIFF can
    // hold 2^54 pages or 2^42 tiles, and no file 2^63 bytes (the square's .npy).
    assert_eq!(sorted_names(&mnt), ["line.npy", "ok.npy", "planes.npy"]);
    let ok = std::fs::read(m.path("ok.npy")).unwrap();
    assert_eq!(&ok[ok.len() - 4..], [1, 2, 3, 4]);
    for name in ["line.npy", "planes.npy"] {
        let f = std::fs::File::open(m.path(name)).unwrap();
        let size = f.metadata().unwrap().len();
        assert_eq!(size, (1 << 62) + 128, "{name}: a 128-byte header and 2^62 elements");
        let mut head = vec![0u8; 128];
        f.read_exact_at(&mut head, 0).unwrap();
        assert!(head.starts_with(b"\x93NUMPY"), "{name}");
        for at in [128, 1 << 61, size - 4096] {
            let mut data = vec![1u8; 4096];
            f.read_exact_at(&mut data, at).unwrap();
            assert!(data.iter().all(|&b| b == 0), "{name} at {at}: the fill value");
        }
    }
    for (array, why) in [
        ("planes", "tiles or strips"),
        ("square", "tiles or strips"),
        ("square", "more than the largest file"),
    ] {
        let logged = m.log_text().lines().any(|l| {
            l.contains("no flat file") && l.contains(&format!("array={array:?}")) && l.contains(why)
        });
        assert!(logged, "no log line for {array} ({why}):\n{}", m.log_text());
    }
    assert_bounded_and_alive(m, "flat view, 2^62 elements");
}

// ---- a listing of 10^12 virtual chunk files ----

/// A Parquet reference set (kerchunk's layout) whose `.zmetadata` claims an array of 10^12
/// one-element chunks, with `record_size` records.
fn parquet_refs(dir: &Path, record_size: u64) {
    let zarray = r#"{"shape":[1000000000000],"chunks":[1],"dtype":"<i1","fill_value":0,"order":"C","filters":null,"compressor":null,"zarr_format":2}"#;
    let doc = serde_json::json!({
        "record_size": record_size,
        "metadata": {".zgroup": {"zarr_format": 2}, "big/.zarray": serde_json::from_str::<serde_json::Value>(zarray).unwrap()},
    });
    write(&dir.join(".zmetadata"), serde_json::to_vec(&doc).unwrap());
}

/// Listing an array of 10^12 chunk references: with one chunk per record file (10^12 record
/// files) the listing is refused with a log line; with 10^8 chunks per record file the 10^4
/// record files are looked for (none exists) and the listing is its metadata. Either way a
/// chunk still opens by name (`ENOENT`: not stored) and nothing is allocated per claimed chunk.
#[test]
fn listing_a_trillion_virtual_chunk_files() {
    let tmp = tempfile::tempdir().unwrap();
    for (record_size, listed) in [(1u64, None), (100_000_000, Some(vec![".zarray"]))] {
        let refs = tmp.path().join(format!("refs-{record_size}.parq"));
        parquet_refs(&refs, record_size);
        let m = mount(&refs, &tmp.path().join(format!("mnt-{record_size}")), "raw");
        let big = m.path("big");
        match &listed {
            None => {
                let err = std::fs::read_dir(&big).and_then(|d| d.collect::<Result<Vec<_>, _>>());
                assert_eq!(errno(err), Some(libc::EIO), "record size {record_size}");
                assert!(
                    m.log_text().contains("record files are too many to list"),
                    "{}",
                    m.log_text()
                );
            }
            Some(want) => assert_eq!(&sorted_names(&big), want),
        }
        assert_eq!(errno(std::fs::metadata(big.join("999999999999"))), Some(libc::ENOENT));
        assert_eq!(errno(std::fs::metadata(big.join("1000000000000"))), Some(libc::ENOENT));
        assert!(std::fs::read(big.join(".zarray")).unwrap().starts_with(b"{"));
        assert_bounded_and_alive(m, &format!("10^12 chunk references, record size {record_size}"));
    }
}

// ---- shard indexes past the end or overlapping ----

/// A 1-d sharded int8 array: shards of `entries` inner chunks of `inner` elements, the index
/// at the end with crc32c.
fn sharded_json(entries: u64, inner: u64) -> String {
    let codecs = format!(
        r#"[{{"name":"sharding_indexed","configuration":{{"chunk_shape":[{inner}],
        "codecs":[{{"name":"bytes","configuration":{{}}}}],
        "index_codecs":[{{"name":"bytes","configuration":{{"endian":"little"}}}},{{"name":"crc32c"}}],
        "index_location":"end"}}}}]"#
    );
    array_json(&[entries * inner], &[entries * inner], "int8", Some(&codecs))
}

/// A shard: `data`, then an index of `(offset, nbytes)` entries and its crc32c.
fn shard(data: &[u8], index: &[(u64, u64)]) -> Vec<u8> {
    let mut idx = Vec::new();
    for (o, n) in index {
        idx.extend(o.to_le_bytes());
        idx.extend(n.to_le_bytes());
    }
    let crc = crc32c::crc32c(&idx);
    let mut out = data.to_vec();
    out.extend(idx);
    out.extend(crc.to_le_bytes());
    out
}

/// Shard indexes that point past the shard's end (a little, and by 2^63 bytes whose end
/// overflows) make their chunks `EIO` with a log line naming the shard; one whose 256 entries
/// all point at the same 64 KiB serves each chunk as those 64 KiB, decoded or not, each read
/// costing that chunk only. The unsharded view lists and reads, the decoded view decodes.
#[test]
fn shard_indexes_past_the_end_or_overlapping() {
    let (_tmp, src, mnt) = dirs();
    const INNER: u64 = 1 << 16;
    write(&src.join("zarr.json"), GROUP);
    let body: Vec<u8> = (0..INNER).map(|i| (i % 251) as u8).collect();
    for (name, index) in [
        ("past", vec![(0, INNER), (INNER, 10)]),
        ("overflow", vec![(0, INNER), (1 << 63, 1 << 63)]),
        ("overlap", vec![(0, INNER); 256]),
    ] {
        write(&src.join(name).join("zarr.json"), sharded_json(index.len() as u64, INNER));
        write(&src.join(name).join("c/0"), shard(&body, &index));
    }
    let m = mount(&src, &mnt.join("unsharded"), "unsharded");
    let d = mount(&src, &mnt.join("decoded"), "decoded");
    for name in ["past", "overflow"] {
        for view in [&m, &d] {
            assert_eq!(
                errno(std::fs::read(view.path(&format!("{name}/c/0")))),
                Some(libc::EIO),
                "{name}"
            );
        }
        let logged = m.log_text().lines().any(|l| l.contains(&format!("{name}/c/0")));
        assert!(logged, "no log line names the shard of {name}:\n{}", m.log_text());
    }
    // Both views show the inner chunks (the decoded view decoded: here the same bytes).
    for view in [&m, &d] {
        let listed = sorted_names(&view.path("overlap/c"));
        assert_eq!(listed.len(), 256, "{listed:?}");
        for i in 0..256 {
            let chunk = std::fs::read(view.path(&format!("overlap/c/{i}"))).unwrap();
            assert!(chunk == body, "chunk {i}");
        }
    }
    assert_bounded_and_alive(m, "shard indexes, unsharded view");
    assert_bounded_and_alive(d, "shard indexes, decoded view");
}

// ---- a zip entry that inflates beyond its declared size ----

/// A zip archive of `entries` (name, method 0 stored or 8 deflated, declared size, the bytes
/// stored, the CRC-32 declared), written by hand so the sizes can lie.
fn zip(entries: &[(&str, u16, u32, Vec<u8>, u32)]) -> Vec<u8> {
    let (mut out, mut central) = (Vec::new(), Vec::new());
    for (name, method, size, data, crc) in entries {
        let offset = out.len() as u32;
        let header = |sig: u32, central: bool| {
            let mut h = sig.to_le_bytes().to_vec();
            if central {
                h.extend(20u16.to_le_bytes()); // version made by
            }
            h.extend(20u16.to_le_bytes()); // version needed
            h.extend(0u16.to_le_bytes()); // flags
            h.extend(method.to_le_bytes());
            h.extend([0u8; 4]); // time, date
            h.extend(crc.to_le_bytes());
            h.extend((data.len() as u32).to_le_bytes());
            h.extend(size.to_le_bytes());
            h.extend((name.len() as u16).to_le_bytes());
            h.extend(0u16.to_le_bytes()); // extra
            if central {
                h.extend([0u8; 6]); // comment length, disk, internal attributes
                h.extend([0u8; 4]); // external attributes
                h.extend(offset.to_le_bytes());
            }
            h.extend(name.as_bytes());
            h
        };
        out.extend(header(0x0403_4b50, false));
        out.extend(data);
        central.extend(header(0x0201_4b50, true));
    }
    let cd_offset = out.len() as u32;
    out.extend(&central);
    out.extend(0x0605_4b50u32.to_le_bytes());
    out.extend([0u8; 4]);
    out.extend((entries.len() as u16).to_le_bytes());
    out.extend((entries.len() as u16).to_le_bytes());
    out.extend((central.len() as u32).to_le_bytes());
    out.extend(cd_offset.to_le_bytes());
    out.extend(0u16.to_le_bytes());
    out
}

/// `n` zero bytes deflated (about n / 1000 bytes), and the CRC-32 of the first `declared`.
fn deflated_zeros(n: usize, declared: usize) -> (Vec<u8>, u32) {
    let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
    let block = vec![0u8; 1 << 20];
    let mut left = n;
    while left > 0 {
        let k = left.min(block.len());
        enc.write_all(&block[..k]).unwrap();
        left -= k;
    }
    let mut crc = flate2::Crc::new();
    crc.update(&vec![0u8; declared]);
    (enc.finish().unwrap(), crc.sum())
}

/// Deflated entries whose stream inflates to 1 GiB while the central directory declares 16
/// bytes (with the CRC of 16 zeros: only the length gives it away), and one that declares its
/// 1 GiB honestly: reading either is `EIO` with a log line, after inflating at most the
/// declared size plus one byte (the first) or nothing (the second: larger than the daemon
/// inflates). A good entry of the same archive reads.
#[test]
fn zip_entries_inflating_beyond_their_declared_size() {
    const GIB: usize = 1 << 30;
    let (bomb, crc16) = deflated_zeros(GIB, 16);
    let (_, crc_all) = deflated_zeros(0, GIB);
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("a.zip");
    let group = GROUP.as_bytes().to_vec();
    let mut crc = flate2::Crc::new();
    crc.update(&group);
    std::fs::write(
        &archive,
        zip(&[
            ("zarr.json", 0, group.len() as u32, group.clone(), crc.sum()),
            ("small", 8, 16, bomb.clone(), crc16),
            ("honest", 8, GIB as u32, bomb.clone(), crc_all),
        ]),
    )
    .unwrap();
    assert!(std::fs::metadata(&archive).unwrap().len() < 4 << 20, "a small file on disk");
    let m = mount(&archive, &tmp.path().join("mnt"), "raw");
    assert_eq!(std::fs::read(m.path("zarr.json")).unwrap(), group);
    assert_eq!(std::fs::metadata(m.path("small")).unwrap().len(), 16);
    assert_eq!(errno(std::fs::read(m.path("small"))), Some(libc::EIO));
    assert!(m.log_text().contains("the central directory says 16"), "{}", m.log_text());
    assert_eq!(std::fs::metadata(m.path("honest")).unwrap().len(), GIB as u64);
    let mut buf = [0u8; 4096];
    let f = std::fs::File::open(m.path("honest")).unwrap();
    assert_eq!(errno(f.read_exact_at(&mut buf, 0)), Some(libc::EIO));
    assert!(m.log_text().contains("bytes the mount inflates"), "{}", m.log_text());
    assert_bounded_and_alive(m, "zip entries inflating to 1 GiB");
}

// ---- JSON nested 10^5 deep ----

fn nested(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

/// Documents nesting arrays 10^5 deep (`zarr.json` attributes, a v2 `.zattrs`, an array's
/// `zarr.json`, a group's inline consolidated metadata) are refused as JSON (serde_json's depth
/// limit, 128) without a stack overflow, in every view: the node is not read as Zarr (its
/// files pass through, or the view logs and leaves it out) while a good neighbour is served.
/// A reference file nested so deep fails the mount with one line (exit 2).
#[test]
fn json_nested_100000_deep() {
    let (tmp, src, mnt) = dirs();
    let deep = nested(100_000);
    write(&src.join("zarr.json"), GROUP);
    write(
        &src.join("attrs/zarr.json"),
        format!(r#"{{"zarr_format":3,"node_type":"group","attributes":{{"a":{deep}}}}}"#),
    );
    write(&src.join("v2/.zgroup"), r#"{"zarr_format":2}"#);
    write(&src.join("v2/.zattrs"), format!(r#"{{"a":{deep}}}"#));
    write(
        &src.join("shape/zarr.json"),
        array_json(&[4], &[4], "int8", None).replace("\"shape\":[4]", &format!("\"shape\":{deep}")),
    );
    write(
        &src.join("consolidated/zarr.json"),
        format!(
            r#"{{"zarr_format":3,"node_type":"group","consolidated_metadata":{{"kind":"inline","must_understand":false,"metadata":{{"x":{deep}}}}}}}"#
        ),
    );
    write(&src.join("ok/zarr.json"), array_json(&[4], &[4], "int8", None));
    write(&src.join("ok/c/0"), [1u8, 2, 3, 4]);
    for view in ["unsharded", "decoded", "v2", "flat"] {
        let m = mount(&src, &mnt.join(view), view);
        let mut seen = 0;
        for dir in ["attrs", "v2", "shape", "consolidated", "ok"] {
            // Whatever the view makes of the node: it answers.
            if let Ok(entries) = std::fs::read_dir(m.path(dir)) {
                for e in entries.flatten() {
                    let _ = std::fs::read(e.path());
                    seen += 1;
                }
            }
        }
        eprintln!("{view}: {seen} files under the deep documents and ok");
        let ok = match view {
            "flat" => std::fs::read(m.path("ok.npy")),
            "v2" => std::fs::read(m.path("ok/0")),
            _ => std::fs::read(m.path("ok/c/0")),
        };
        assert!(ok.unwrap().ends_with(&[1, 2, 3, 4]), "{view}: the good array");
        assert_bounded_and_alive(m, &format!("JSON 10^5 deep, {view} view"));
    }
    let refs = tmp.path().join("refs.json");
    std::fs::write(&refs, format!(r#"{{"version":1,"refs":{{"zarr.json":{deep}}}}}"#)).unwrap();
    std::fs::create_dir_all(tmp.path().join("refs-mnt")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_zarr-mount"))
        .arg(&refs)
        .arg(tmp.path().join("refs-mnt"))
        .arg("--foreground")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("recursion limit"), "{err}");
}

// ---- OME multiscales with 10^6 and 95,000 datasets ----

/// An OME-Zarr 0.5 image group whose one multiscale names `n` datasets (all the same 32 x 32
/// array at `img/0`), and that array.
fn ome_image_with_datasets(src: &Path, n: usize) -> usize {
    let datasets = vec![r#"{"path":"0"}"#; n].join(",");
    let axes = r#"[{"name":"y","type":"space"},{"name":"x","type":"space"}]"#;
    let doc = format!(
        r#"{{"zarr_format":3,"node_type":"group","attributes":{{"ome":{{"version":"0.5","multiscales":[{{"axes":{axes},"datasets":[{datasets}]}}]}}}}}}"#
    );
    write(&src.join("zarr.json"), GROUP);
    write(&src.join("img/zarr.json"), &doc);
    write(&src.join("img/0/zarr.json"), array_json(&[32, 32], &[16, 16], "uint8", None));
    write(&src.join("img/0/c/0/0"), vec![7u8; 256]);
    doc.len()
}

/// 10^6 datasets (a 13 MB `zarr.json`, over a million JSON objects): more than a metadata
/// document may hold, so the group is not read as Zarr (logged) in any view; its array still
/// is. Before the limit the v2 view held 3 GB for it.
#[test]
fn ome_multiscales_with_a_million_datasets() {
    let (_tmp, src, mnt) = dirs();
    ome_image_with_datasets(&src, 1_000_000);
    for view in ["v2", "flat"] {
        let m = mount(&src, &mnt.join(view), view);
        let shown = sorted_names(&m.path("img"));
        match view {
            "v2" => {
                assert!(!shown.contains(&".zattrs".to_string()), "{shown:?}");
                assert_eq!(std::fs::read(m.path("img/0/0/0")).unwrap().len(), 256);
            }
            _ => assert_eq!(shown, ["0.npy", "0.tif"]),
        }
        assert!(
            m.log_text().contains("more than 100000 JSON objects and arrays"),
            "{}",
            m.log_text()
        );
        assert_bounded_and_alive(m, &format!("OME 10^6 datasets, {view} view"));
    }
}

/// 95,000 datasets, just under the limit: the v2 view translates them to 0.4, the flat
/// view makes no `.ome.tif` (more than 64 levels, logged), within the memory budget.
#[test]
fn ome_multiscales_just_under_the_document_limit() {
    let (_tmp, src, mnt) = dirs();
    let doc_len = ome_image_with_datasets(&src, 95_000);
    let v2 = mount(&src, &mnt.join("v2"), "v2");
    let zattrs = std::fs::read(v2.path("img/.zattrs")).unwrap();
    let attrs: serde_json::Value = serde_json::from_slice(&zattrs).unwrap();
    let ms = &attrs["multiscales"][0];
    assert_eq!(ms["version"], "0.4");
    assert_eq!(ms["datasets"].as_array().unwrap().len(), 95_000);
    // Written indented, as zarr-python writes .zattrs: a few times the compact input.
    assert!(zattrs.len() < 4 * doc_len, "{} bytes for {doc_len}", zattrs.len());
    assert_eq!(std::fs::read(v2.path("img/0/0/0")).unwrap().len(), 256);
    assert_bounded_and_alive(v2, "OME 95,000 datasets, v2 view");

    let flat = mount(&src, &mnt.join("flat"), "flat");
    assert_eq!(sorted_names(&flat.path("img")), ["0.npy", "0.tif"]);
    assert!(flat.log_text().contains("more than 64 datasets"), "{}", flat.log_text());
    assert_bounded_and_alive(flat, "OME 95,000 datasets, flat view");
}
