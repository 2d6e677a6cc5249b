//! Kerchunk reference sets (`store::backends::reference::ReferenceStore`), JSON and Parquet,
//! opened over memory stores, then listed and read as the mount does.
//!
//! Input: the first byte picks the form. JSON (even): the rest is a reference file
//! (`s3://bucket/refs/refs.json`). Parquet (odd): two little-endian bytes give the length of
//! a `.zmetadata`, the rest is one record file, placed as `refs.0.parq` of every array the
//! `.zmetadata` names (`s3://bucket/refs/set.parq/...`). Every target resolves to one memory
//! store holding `data.nc` (4 KiB).
//!
//! Invariants: opening refuses or succeeds without a panic and without allocating what the
//! input merely claims (the allocation guard aborts otherwise); every listed directory lists
//! again and every listed file reads as its listed size or fails cleanly (`EIO`, not a panic).
#![no_main]

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use zarr_mount::store::backends::memory::MemoryStore;
use zarr_mount::store::backends::reference::{ReferenceStore, TargetOpener};
use zarr_mount::store::location::{Cloud, Location};
use zarr_mount::store::prelude::*;

/// Directories and files visited per input.
const MAX_VISITS: usize = 256;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().expect("runtime"))
}

fuzz_target!(init: zarr_mount_fuzz::init(), |data: &[u8]| {
    runtime().block_on(check(data));
});

async fn check(data: &[u8]) {
    let Some((&form, rest)) = data.split_first() else { return };
    let targets = Arc::new(MemoryStore::new());
    targets.put("data.nc", Bytes::from(vec![7u8; 4096])).await.expect("memory put");
    let refs_dir = Arc::new(MemoryStore::new());
    let parquet = Arc::new(MemoryStore::new());
    let url = if form % 2 == 0 {
        refs_dir.put("refs.json", Bytes::copy_from_slice(rest)).await.expect("memory put");
        "s3://bucket/refs/refs.json"
    } else {
        let n = usize::from(u16::from_le_bytes([
            rest.first().copied().unwrap_or(0),
            rest.get(1).copied().unwrap_or(0),
        ]));
        let rest = rest.get(2..).unwrap_or_default();
        let (zmetadata, record) = rest.split_at(n.min(rest.len()));
        parquet.put(".zmetadata", Bytes::copy_from_slice(zmetadata)).await.expect("memory put");
        for field in fields(zmetadata) {
            let key = format!("{field}/refs.0.parq");
            parquet.put(&key, Bytes::copy_from_slice(record)).await.expect("memory put");
        }
        "s3://bucket/refs/set.parq"
    };
    let (t, r, p) = (targets.clone(), refs_dir.clone(), parquet.clone());
    let opener: TargetOpener = Arc::new(move |loc: &Location| {
        let Location::Remote { url, .. } = loc else { return Err("local".into()) };
        Ok(match url.trim_end_matches('/') {
            "s3://bucket/refs" => r.clone() as Arc<dyn Store>,
            "s3://bucket/refs/set.parq" => p.clone() as Arc<dyn Store>,
            _ => t.clone() as Arc<dyn Store>,
        })
    });
    let location = Location::Remote { cloud: Cloud::S3, url: url.into() };
    let Ok(store) = ReferenceStore::open(&location, opener, &[]).await else { return };

    let mut dirs = vec![String::new()];
    let mut visits = 0;
    while let Some(dir) = dirs.pop() {
        visits += 1;
        if visits > MAX_VISITS {
            return;
        }
        let Ok(listing) = store.list(&dir).await else { continue };
        for sub in listing.dirs {
            dirs.push(join(&dir, &sub));
        }
        for (leaf, meta) in listing.files {
            visits += 1;
            if visits > MAX_VISITS {
                return;
            }
            let key = join(&dir, &leaf);
            if let Ok(got) = store.get(&key).await {
                assert_eq!(
                    got.len() as u64,
                    meta.size,
                    "{key}: read {} of {}",
                    got.len(),
                    meta.size
                );
            }
        }
    }
}

/// The arrays a `.zmetadata` names (keys `FIELD/.zarray`), at most 8.
fn fields(doc: &[u8]) -> Vec<String> {
    let Ok(serde_json::Value::Object(v)) = serde_json::from_slice::<serde_json::Value>(doc) else {
        return vec![];
    };
    let Some(serde_json::Value::Object(meta)) = v.get("metadata") else { return vec![] };
    meta.keys().filter_map(|k| k.strip_suffix("/.zarray")).take(8).map(String::from).collect()
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}
