//! The decoded and v2 views over an in-memory store (no FUSE): what each path shows, the bytes
//! of decoded and translated chunks, listings, EROFS, and EIO for a chunk that fails to decode.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use zarr_mount::store::backends::memory::MemoryStore;
use zarr_mount::store::prelude::*;
use zarr_mount::views::presented::mapping::decoded::DecodedPresenter;
use zarr_mount::views::presented::mapping::v2::{V2DecodedPresenter, V2Presenter};
use zarr_mount::views::presented::mapping::Presenter;
use zarr_mount::views::presented::namespace::PresentedNamespace;
use zarr_mount::views::raw::namespace::RawNamespace;
use zarr_mount::views::shared::namespace::{read_all, Namespace, NamespaceWrites};
use zarr_mount::views::unsharded::namespace::UnshardedNamespace;
use zarr_mount::zarr::metadata::{parse_zarr_json, NodeMetadata};
use zarr_mount::zarr::sharding::build::build_shard;
use zarr_mount::zarr::sharding::shard_layout;

/// int16 5x4 in chunks of 2x4, big-endian + zstd; chunk (2,0) is absent.
const PLAIN: &str = r#"{"zarr_format":3,"node_type":"array","shape":[5,4],"data_type":"int16",
    "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2,4]}},
    "chunk_key_encoding":{"name":"default"},"fill_value":-1,
    "codecs":[{"name":"bytes","configuration":{"endian":"big"}},{"name":"zstd","configuration":{"level":1,"checksum":false}}],
    "attributes":{"units":"m"},"dimension_names":["y","x"]}"#;

/// uint8 8 in shards of 4 with inner chunks of 2 (bytes + zstd), `.` keys; inner chunk 3 absent.
const SHARDED: &str = r#"{"zarr_format":3,"node_type":"array","shape":[8],"data_type":"uint8",
    "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[4]}},
    "chunk_key_encoding":{"name":"default","configuration":{"separator":"."}},"fill_value":0,
    "codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[2],
        "codecs":[{"name":"bytes"},{"name":"zstd","configuration":{"level":1,"checksum":false}}],
        "index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"end"}}],
    "attributes":{}}"#;

/// uint8 8 in shards of 4 with inner chunks of 2 stored as bytes + crc32c; the checksum of
/// inner chunk 2 (shard 1) is wrong.
const CRC: &str = r#"{"zarr_format":3,"node_type":"array","shape":[8],"data_type":"uint8",
    "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[4]}},
    "chunk_key_encoding":{"name":"default"},"fill_value":0,
    "codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[2],
        "codecs":[{"name":"bytes"},{"name":"crc32c"}],
        "index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]}}],
    "attributes":{}}"#;

/// Strings 3 in chunks of 2 (vlen-utf8 + zstd); chunk 1 holds "c" and the fill value.
const STR: &str = r#"{"zarr_format":3,"node_type":"array","shape":[3],"data_type":"string",
    "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2]}},
    "chunk_key_encoding":{"name":"default"},"fill_value":"",
    "codecs":[{"name":"vlen-utf8","configuration":{}},{"name":"zstd","configuration":{"level":1,"checksum":false}}],
    "attributes":{}}"#;

/// numcodecs' vlen-utf8 encoding: item count, then each item's length and bytes (u32 LE).
fn vlen(items: &[&str]) -> Vec<u8> {
    let mut out = (items.len() as u32).to_le_bytes().to_vec();
    for s in items {
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    out
}

/// The element values of plain chunk (y, 0): row-major, 2x4.
fn plain_values(y: i16) -> Vec<i16> {
    (0..8).map(|i| y * 100 + i - 50).collect()
}

fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::encode_all(data, 1).unwrap()
}

async fn store() -> Arc<dyn Store> {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let put = |k: &str, v: Vec<u8>| {
        let store = store.clone();
        let k = k.to_string();
        async move { store.put(&k, Bytes::from(v)).await.unwrap() }
    };
    let plain: Value = serde_json::from_str(PLAIN).unwrap();
    let root = json!({"zarr_format": 3, "node_type": "group", "attributes": {"title": "t"},
        "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {"plain": plain}}});
    put("zarr.json", root.to_string().into_bytes()).await;
    put("plain/zarr.json", PLAIN.as_bytes().to_vec()).await;
    for y in 0..2i16 {
        let be: Vec<u8> = plain_values(y).iter().flat_map(|v| v.to_be_bytes()).collect();
        put(&format!("plain/c/{y}/0"), zstd(&be)).await;
    }
    put("plain/notes.txt", b"hello".to_vec()).await;
    put("sharded/zarr.json", SHARDED.as_bytes().to_vec()).await;
    let NodeMetadata::Array(meta) = parse_zarr_json(SHARDED.as_bytes()).unwrap() else { panic!() };
    let layout = shard_layout(&meta).unwrap();
    for shard in 0..2u64 {
        let chunks: Vec<(u64, Vec<u8>)> = (0..2u64)
            .filter(|&l| (shard, l) != (1, 1))
            .map(|l| (l, zstd(&[(shard * 4 + l * 2) as u8 + 10, (shard * 4 + l * 2) as u8 + 11])))
            .collect();
        let refs: Vec<(u64, &[u8])> = chunks.iter().map(|(l, b)| (*l, b.as_slice())).collect();
        put(&format!("sharded/c.{shard}"), build_shard(&layout, &refs).unwrap().unwrap()).await;
    }
    put("crc/zarr.json", CRC.as_bytes().to_vec()).await;
    let NodeMetadata::Array(meta) = parse_zarr_json(CRC.as_bytes()).unwrap() else { panic!() };
    let layout = shard_layout(&meta).unwrap();
    for shard in 0..2u8 {
        let chunks: Vec<(u64, Vec<u8>)> = (0..2u8)
            .map(|l| {
                let mut c = vec![shard * 4 + l * 2 + 10, shard * 4 + l * 2 + 11];
                let crc = crc32c::crc32c(&c) ^ u32::from((shard, l) == (1, 0));
                c.extend_from_slice(&crc.to_le_bytes());
                (u64::from(l), c)
            })
            .collect();
        let refs: Vec<(u64, &[u8])> = chunks.iter().map(|(l, b)| (*l, b.as_slice())).collect();
        put(&format!("crc/c/{shard}"), build_shard(&layout, &refs).unwrap().unwrap()).await;
    }
    put("str/zarr.json", STR.as_bytes().to_vec()).await;
    put("str/c/0", zstd(&vlen(&["a", "bé"]))).await;
    put("str/c/1", zstd(&vlen(&["c", ""]))).await;
    // An array whose only chunk is garbage.
    let broken = PLAIN.replace("[5,4]", "[2,4]");
    put("broken/zarr.json", broken.into_bytes()).await;
    put("broken/c/0/0", b"not zstd at all".to_vec()).await;
    store
}

async fn view(presenter: Box<dyn Presenter>) -> PresentedNamespace {
    let store = store().await;
    let ttl = Duration::from_secs(60);
    let unsharded = UnshardedNamespace::new(RawNamespace::new(store), ttl);
    PresentedNamespace::new(Arc::new(unsharded), presenter, ttl, 1 << 20)
}

async fn read(ns: &PresentedNamespace, path: &str) -> Vec<u8> {
    let node = ns.lookup(path).await.unwrap().unwrap_or_else(|| panic!("{path} missing"));
    let data = read_all(ns, path, &node).await.unwrap();
    assert_eq!(data.len() as u64, node.size, "{path}: size known before reading");
    data
}

async fn read_json(ns: &PresentedNamespace, path: &str) -> Value {
    serde_json::from_slice(&read(ns, path).await).unwrap()
}

async fn names(ns: &PresentedNamespace, dir: &str) -> Vec<String> {
    ns.list(dir).await.unwrap().into_iter().map(|(n, _)| n).collect()
}

fn le16(v: &[i16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[tokio::test]
async fn decoded_view() {
    let ns = view(Box::new(DecodedPresenter)).await;
    assert_eq!(read(&ns, "plain/c/1/0").await, le16(&plain_values(1)));
    assert!(ns.lookup("plain/c/2/0").await.unwrap().is_none(), "absent chunks stay absent");
    assert_eq!(names(&ns, "plain").await, ["c", "notes.txt", "zarr.json"]);
    assert_eq!(names(&ns, "plain/c").await, ["0", "1"]);
    assert_eq!(read(&ns, "plain/notes.txt").await, b"hello");
    let meta = read_json(&ns, "plain/zarr.json").await;
    assert_eq!(meta["codecs"], json!([{"name": "bytes", "configuration": {"endian": "little"}}]));
    assert_eq!(meta["attributes"], json!({"units": "m"}));
    let root = read_json(&ns, "zarr.json").await;
    assert_eq!(root["consolidated_metadata"]["metadata"]["plain"], meta);
    // Inner chunks of shards, decoded; the absent one stays absent.
    assert_eq!(names(&ns, "sharded").await, ["c.0", "c.1", "c.2", "zarr.json"]);
    assert_eq!(read(&ns, "sharded/c.2").await, [14, 15]);
    assert!(ns.lookup("sharded/c.3").await.unwrap().is_none());
    // A chunk that cannot be decoded: EIO on that file only.
    let node = ns.lookup("broken/c/0/0").await.unwrap().unwrap();
    assert_eq!(node.size, 16);
    let err = ns.read("broken/c/0/0", &node, 0, 16).await.unwrap_err();
    assert_eq!(err.errno(), libc::EIO);
    assert_eq!(read(&ns, "plain/c/0/0").await, le16(&plain_values(0)));
    // Read-only.
    for e in [
        ns.write_file("plain/x", Bytes::new()).await.unwrap_err(),
        ns.mkdir("d").await.unwrap_err(),
        ns.remove_file("plain/notes.txt").await.unwrap_err(),
    ] {
        assert_eq!(e.errno(), libc::EROFS);
    }
}

#[tokio::test]
async fn v2_view() {
    let ns = view(Box::new(V2Presenter::default())).await;
    assert_eq!(
        names(&ns, "").await,
        [".zattrs", ".zgroup", ".zmetadata", "broken", "crc", "plain", "sharded", "str"]
    );
    assert_eq!(read_json(&ns, ".zattrs").await, json!({"title": "t"}));
    assert!(ns.lookup("zarr.json").await.unwrap().is_none());
    let zarray = read_json(&ns, "plain/.zarray").await;
    assert_eq!(zarray["dtype"], ">i2");
    assert_eq!(zarray["compressor"], json!({"id": "zstd", "level": 1}));
    assert_eq!(zarray["fill_value"], -1);
    assert_eq!(zarray["dimension_separator"], "/");
    assert_eq!(
        read_json(&ns, "plain/.zattrs").await,
        json!({"units": "m", "_ARRAY_DIMENSIONS": ["y", "x"]})
    );
    let zm = read_json(&ns, ".zmetadata").await;
    assert_eq!(zm["metadata"]["plain/.zarray"], zarray);
    // Chunks keep their stored bytes under v2 keys; the v3 chunk tree is gone.
    let be: Vec<u8> = plain_values(1).iter().flat_map(|v| v.to_be_bytes()).collect();
    assert_eq!(zstd::decode_all(&read(&ns, "plain/1/0").await[..]).unwrap(), be);
    assert_eq!(names(&ns, "plain").await, [".zarray", ".zattrs", "0", "1", "notes.txt"]);
    assert_eq!(names(&ns, "plain/1").await, ["0"]);
    for gone in ["plain/c", "plain/c/1/0", "plain/zarr.json", "plain/2/0"] {
        assert!(ns.lookup(gone).await.unwrap().is_none(), "{gone}");
    }
    // `.` keys lose their `c.` prefix; inner chunks of shards are the unsharded ones.
    assert_eq!(names(&ns, "sharded").await, [".zarray", ".zattrs", "0", "1", "2"]);
    assert_eq!(zstd::decode_all(&read(&ns, "sharded/2").await[..]).unwrap(), [14, 15]);
    assert_eq!(read_json(&ns, "sharded/.zarray").await["chunks"], json!([2]));
    // A trailing crc32c is checked and cut off: the v2 form has no codec at all.
    let zarray = read_json(&ns, "crc/.zarray").await;
    assert_eq!((&zarray["compressor"], &zarray["filters"]), (&Value::Null, &Value::Null));
    assert_eq!(read(&ns, "crc/0").await, [10, 11]);
    assert_eq!(read(&ns, "crc/3").await, [16, 17]);
    let node = ns.lookup("crc/2").await.unwrap().unwrap();
    assert_eq!(node.size, 2);
    let err = ns.read("crc/2", &node, 0, 2).await.unwrap_err();
    assert_eq!(err.errno(), libc::EIO, "checksum mismatch");
    assert_eq!(read(&ns, "crc/1").await, [12, 13], "the other chunks still read");
}

#[tokio::test]
async fn v2_decoded_view() {
    let ns = view(Box::new(V2DecodedPresenter::default())).await;
    let zarray = read_json(&ns, "plain/.zarray").await;
    assert_eq!((&zarray["compressor"], &zarray["filters"]), (&Value::Null, &Value::Null));
    assert_eq!((zarray["dtype"].as_str(), zarray["order"].as_str()), (Some("<i2"), Some("C")));
    assert_eq!(read(&ns, "plain/1/0").await, le16(&plain_values(1)));
    assert!(ns.lookup("plain/2/0").await.unwrap().is_none(), "absent chunks stay absent");
    assert_eq!(read_json(&ns, ".zmetadata").await["metadata"]["plain/.zarray"], zarray);
    assert_eq!(read(&ns, "sharded/2").await, [14, 15]);
    assert_eq!(read(&ns, "crc/0").await, [10, 11]);
    let node = ns.lookup("crc/2").await.unwrap().unwrap();
    assert_eq!(ns.read("crc/2", &node, 0, 2).await.unwrap_err().errno(), libc::EIO);
    // Strings keep only their vlen filter; the size is known once listed or looked up.
    let zarray = read_json(&ns, "str/.zarray").await;
    assert_eq!(zarray["filters"], json!([{"id": "vlen-utf8"}]));
    assert_eq!((&zarray["compressor"], zarray["dtype"].as_str()), (&Value::Null, Some("|O")));
    assert_eq!(names(&ns, "str").await, [".zarray", ".zattrs", "0", "1"]);
    let listed = ns.list("str").await.unwrap().into_iter().find(|(n, _)| n == "0").unwrap().1;
    assert_eq!(listed.size, vlen(&["a", "bé"]).len() as u64);
    assert_eq!(read(&ns, "str/0").await, vlen(&["a", "bé"]));
    assert_eq!(read(&ns, "str/1").await, vlen(&["c", ""]));
    assert_eq!(ns.write_file("str/0", Bytes::new()).await.unwrap_err().errno(), libc::EROFS);
}
