//! Reference stores whose targets (and reference files) live in S3 (issue 24), against a local
//! moto server (scripts/s3-server.sh) and its request log: a chunk file read is one ranged GET
//! of exactly its referenced bytes, and the NetCDF file is never downloaded whole.
//!
//! The NetCDF4 file and its kerchunk references come from scripts/gen_reference_fixtures.py
//! (netCDF4 + kerchunk in the project venv), with `--big`: besides chunks of a few hundred
//! bytes there are 400 KB ones, which the kernel reads in several FUSE reads (still one GET). The tests skip (with a message) only when moto
//! cannot be installed.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::s3::{S3Server, BUCKET, ENV, S3};
use common::Mount;

const GENERATOR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/gen_reference_fixtures.py");
const NC_KEY: &str = "nc/data.nc";

/// The fixtures, with references naming `s3://bkt/nc/data.nc`.
fn fixtures(dir: &Path) -> serde_json::Value {
    let python = common::python::venv_python();
    let out = Command::new(python)
        .arg(GENERATOR)
        .arg(dir)
        .arg("--url")
        .arg(format!("s3://{BUCKET}/{NC_KEY}"))
        .arg("--big")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "gen_reference_fixtures.py failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

/// (mount-relative chunk path, offset, length) of every ranged reference.
fn references(manifest: &serde_json::Value) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for (var, v) in manifest["variables"].as_object().unwrap() {
        for (key, r) in v["references"].as_object().unwrap() {
            let r = r.as_array().unwrap();
            out.push((format!("{var}/{key}"), r[1].as_u64().unwrap(), r[2].as_u64().unwrap()));
        }
    }
    out
}

/// Read every chunk file and check it against the NetCDF's bytes; the GETs of the NetCDF in
/// moto's log: one ranged GET (206) per chunk, nothing else (no HEAD, no whole download).
fn check_chunk_reads(moto: &S3, m: &Mount, refs: &[(String, u64, u64)], nc: &[u8]) {
    let mark = moto.log().len();
    for (path, offset, length) in refs {
        let got = std::fs::read(m.path(path)).unwrap();
        assert_eq!(got.len() as u64, *length, "{path}");
        assert!(got == nc[*offset as usize..(offset + length) as usize], "{path}: wrong bytes");
    }
    let reqs = moto.responses_since(mark);
    let on_nc: Vec<_> = reqs.iter().filter(|(r, _)| r.contains(NC_KEY)).collect();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (r, status) in &on_nc {
        *counts.entry(format!("{} {status}", r.split(' ').next().unwrap())).or_default() += 1;
    }
    eprintln!("{} chunk files read; requests on the NetCDF: {counts:?}", refs.len());
    assert_eq!(
        counts,
        BTreeMap::from([("GET 206".to_string(), refs.len())]),
        "one ranged GET per chunk read, nothing else: {on_nc:?}"
    );
}

#[test]
fn local_references_read_s3_targets_by_ranges() {
    let Some(moto) = S3::start(S3Server::Moto) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let fx = tmp.path().join("fx");
    let manifest = fixtures(&fx);
    let nc = std::fs::read(fx.join("data.nc")).unwrap();
    assert!(nc.len() > 8 << 20, "data.nc must be larger than the whole-object limit");
    moto.put(NC_KEY, &nc);
    let refs = references(&manifest);
    assert!(refs.len() >= 40, "{} references", refs.len());
    let endpoint = moto.endpoint();
    for (i, set) in ["refs-v1.json", "refs.parq"].into_iter().enumerate() {
        let m = Mount::start_with(
            fx.join(set).to_str().unwrap(),
            &tmp.path().join(format!("mnt{i}")),
            &["--endpoint-url", endpoint.as_str(), "--view", "raw"],
            ENV,
        );
        check_chunk_reads(&moto, &m, &refs, &nc);
        drop(m);
    }
}

#[test]
fn reference_sets_in_s3_mount_like_local_ones() {
    let Some(moto) = S3::start(S3Server::Moto) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let fx = tmp.path().join("fx");
    let manifest = fixtures(&fx);
    let nc = std::fs::read(fx.join("data.nc")).unwrap();
    moto.put(NC_KEY, &nc);
    moto.put("refs/refs.json", &std::fs::read(fx.join("refs-v1.json")).unwrap());
    for (rel, data) in common::python::files_under(&fx.join("refs.parq")) {
        moto.put(&format!("refs/set.parq/{rel}"), &data);
    }
    let refs = references(&manifest);
    let endpoint = moto.endpoint();
    for (i, source) in ["refs/refs.json", "refs/set.parq"].into_iter().enumerate() {
        let m = Mount::start_with(
            &format!("s3://{BUCKET}/{source}"),
            &tmp.path().join(format!("mnt{i}")),
            &["--endpoint-url", endpoint.as_str()],
            ENV,
        );
        let mut top: Vec<String> = std::fs::read_dir(&m.mnt)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        top.sort();
        // The Parquet set adds a consolidated .zmetadata; the JSON one has none.
        let mut want = vec![".zattrs", ".zgroup", "noise", "pres", "small", "t", "temp"];
        if source.ends_with(".parq") {
            want.insert(2, ".zmetadata");
        }
        assert_eq!(top, want);
        check_chunk_reads(&moto, &m, &refs, &nc);
        drop(m);
    }
}
