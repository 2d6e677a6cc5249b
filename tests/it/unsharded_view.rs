//! The unsharded view driven through `ZarrFs` over an in-memory store (no FUSE): metadata
//! rewriting, virtual chunk listing from shard indexes, chunk bytes, corrupt indexes, and how
//! many store requests each of those costs.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use zarr_mount::fs::inodes::table::ROOT_INO;
use zarr_mount::fs::{FsConfig, FsError, ZarrFs};
use zarr_mount::store::backends::memory::MemoryStore;
use zarr_mount::store::layers::recording::RecordingStore;
use zarr_mount::store::prelude::*;
use zarr_mount::views::raw::namespace::RawNamespace;
use zarr_mount::views::unsharded::namespace::UnshardedNamespace;
use zarr_mount::zarr::metadata::{parse_zarr_json, NodeMetadata};
use zarr_mount::zarr::sharding::build::build_shard;
use zarr_mount::zarr::sharding::shard_layout;

const ARRAY_JSON: &str = r#"{"shape":[25,18],"data_type":"int32","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[10,8]}},"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},"fill_value":0,"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[5,4],"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":0,"checksum":false}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"end"}}],"attributes":{"a":1},"zarr_format":3,"node_type":"array","storage_transformers":[],"dimension_names":["y","x"],"extra_key":{"must":"stay"}}"#;

/// The fake encoded bytes of inner chunk (global) `y, x`: distinct per chunk and per length.
fn chunk_bytes(y: u64, x: u64) -> Vec<u8> {
    format!("chunk {y},{x} ").repeat((y + x + 1) as usize).into_bytes()
}

struct Fixture {
    fs: ZarrFs,
    /// Records the requests reaching the in-memory store (cleared once the fixture is built).
    store: Arc<RecordingStore>,
}

const RANGED: [&str; 2] = ["get_range", "get_ranged"];

/// Array "a" (25x18, shards 10x8 of 5x4 chunks = 2x2 per shard, 3x3 shards). Shard (0,0) is
/// missing (all fill), shard (1,1) lacks local chunk 3, shard (2,2) also stores the chunks
/// that lie past the array edge (global row 5 and column 4+), as some writers do.
async fn fixture() -> Fixture {
    let store = Arc::new(RecordingStore::new(Arc::new(MemoryStore::new())));
    store
        .put(
            "zarr.json",
            Bytes::from_static(br#"{"zarr_format":3,"node_type":"group","attributes":{}}"#),
        )
        .await
        .unwrap();
    store.put("a/zarr.json", Bytes::from_static(ARRAY_JSON.as_bytes())).await.unwrap();
    store.put("a/notes.txt", Bytes::from_static(b"not a chunk")).await.unwrap();
    let NodeMetadata::Array(meta) = parse_zarr_json(ARRAY_JSON.as_bytes()).unwrap() else {
        panic!()
    };
    let layout = shard_layout(&meta).unwrap();
    for sy in 0..3u64 {
        for sx in 0..3u64 {
            if (sy, sx) == (0, 0) {
                continue;
            }
            let mut chunks: Vec<(u64, Vec<u8>)> = Vec::new();
            for local in 0..4u64 {
                if (sy, sx) == (1, 1) && local == 3 {
                    continue;
                }
                let (y, x) = (sy * 2 + local / 2, sx * 2 + local % 2);
                chunks.push((local, chunk_bytes(y, x)));
            }
            let refs: Vec<(u64, &[u8])> = chunks.iter().map(|(l, b)| (*l, b.as_slice())).collect();
            let shard = build_shard(&layout, &refs).unwrap().unwrap();
            store.put(&format!("a/c/{sy}/{sx}"), Bytes::from(shard)).await.unwrap();
        }
    }
    let raw = RawNamespace::new(store.clone() as Arc<dyn Store>);
    let ns = UnshardedNamespace::new(raw, Duration::from_secs(60));
    let fs = ZarrFs::new(
        Arc::new(ns),
        FsConfig {
            metadata_ttl: Duration::from_secs(60),
            read_only: false,
            passthrough: false,
            perms: zarr_mount::perms::ShownPerms::of_this_process(),
        },
    );
    store.take();
    Fixture { fs, store }
}

async fn ino_of(fs: &ZarrFs, path: &str) -> Result<u64, FsError> {
    let mut ino = ROOT_INO;
    for comp in path.split('/') {
        ino = fs.lookup(ino, comp).await?.ino;
    }
    Ok(ino)
}

async fn read_file(fs: &ZarrFs, path: &str) -> Result<Vec<u8>, FsError> {
    let ino = ino_of(fs, path).await?;
    let size = fs.getattr(ino).await?.size;
    let h = fs.open(ino, libc::O_RDONLY).await?;
    let data = fs.read(h.fh, 0, size as u32 + 10).await?;
    fs.release(h.fh).await?;
    Ok(data.to_vec())
}

async fn list(fs: &ZarrFs, path: &str) -> Vec<String> {
    let ino = if path.is_empty() { ROOT_INO } else { ino_of(fs, path).await.unwrap() };
    let fh = fs.opendir(ino).await.unwrap();
    let names = fs.readdir(fh).unwrap().iter().skip(2).map(|e| e.name.clone()).collect();
    fs.releasedir(fh);
    names
}

#[tokio::test]
async fn metadata_is_rewritten_to_the_inner_chunks() {
    let f = fixture().await;
    let json: serde_json::Value =
        serde_json::from_slice(&read_file(&f.fs, "a/zarr.json").await.unwrap()).unwrap();
    assert_eq!(json["chunk_grid"]["configuration"]["chunk_shape"], serde_json::json!([5, 4]));
    assert_eq!(json["codecs"][0]["name"], "bytes");
    assert_eq!(json["codecs"][1]["name"], "zstd");
    assert_eq!(json["codecs"].as_array().unwrap().len(), 2);
    assert_eq!(json["attributes"]["a"], 1);
    assert_eq!(json["extra_key"]["must"], "stay");
    assert_eq!(json["dimension_names"], serde_json::json!(["y", "x"]));
    // Key order is kept.
    let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
    let orig: serde_json::Value = serde_json::from_str(ARRAY_JSON).unwrap();
    assert_eq!(keys, orig.as_object().unwrap().keys().collect::<Vec<_>>());
    // The size the mount reports is the rewritten document's size.
    let ino = ino_of(&f.fs, "a/zarr.json").await.unwrap();
    assert_eq!(
        f.fs.getattr(ino).await.unwrap().size,
        read_file(&f.fs, "a/zarr.json").await.unwrap().len() as u64
    );
}

#[tokio::test]
async fn chunk_files_are_exactly_the_inner_chunks() {
    let f = fixture().await;
    // Inner grid is ceil(25/5) x ceil(18/4) = 5 x 5.
    for y in 0..5u64 {
        for x in 0..5u64 {
            let path = format!("a/c/{y}/{x}");
            let got = read_file(&f.fs, &path).await;
            let absent = (y < 2 && x < 2) || (y == 3 && x == 3);
            if absent {
                assert!(
                    matches!(got, Err(FsError::NotFound)),
                    "{path} should be absent, got {got:?}"
                );
            } else {
                assert_eq!(got.unwrap(), chunk_bytes(y, x), "{path}");
            }
        }
    }
    // Stored past the edge (global row 5, column 5) but outside the array: not shown.
    assert!(matches!(read_file(&f.fs, "a/c/5/4").await, Err(FsError::NotFound)));
    assert!(matches!(read_file(&f.fs, "a/c/4/5").await, Err(FsError::NotFound)));
    // Other files of the array pass through.
    assert_eq!(read_file(&f.fs, "a/notes.txt").await.unwrap(), b"not a chunk");
}

#[tokio::test]
async fn listings_come_from_shard_indexes_only() {
    let f = fixture().await;
    assert_eq!(list(&f.fs, "a").await, vec!["c", "notes.txt", "zarr.json"]);
    assert_eq!(list(&f.fs, "a/c").await, vec!["0", "1", "2", "3", "4"]);
    assert_eq!(list(&f.fs, "a/c/0").await, vec!["2", "3", "4"]);
    assert_eq!(list(&f.fs, "a/c/3").await, vec!["0", "1", "2", "4"]);
    assert_eq!(list(&f.fs, "a/c/4").await, vec!["0", "1", "2", "3", "4"]);
    // No chunk bytes were read: only zarr.json (whole) and one index per shard (ranged).
    assert_eq!(f.store.count(&["get"]), 0);
    let ranged = f.store.count(&RANGED);
    // root + a zarr.json reads, plus at most one index fetch for each of the 9 shards.
    assert!(ranged <= 2 + 9 + 1, "{ranged} ranged requests");
}

#[tokio::test]
async fn a_chunk_read_is_one_ranged_get_once_the_index_is_cached() {
    let f = fixture().await;
    read_file(&f.fs, "a/c/2/2").await.unwrap();
    let before = f.store.count(&RANGED);
    assert_eq!(read_file(&f.fs, "a/c/2/3").await.unwrap(), chunk_bytes(2, 3));
    assert_eq!(f.store.count(&RANGED) - before, 1);
}

#[tokio::test]
async fn corrupt_index_fails_only_its_own_shard() {
    let f = fixture().await;
    let mut shard = f.store.get("a/c/1/1").await.unwrap().to_vec();
    let n = shard.len();
    shard[n - 10] ^= 0xff; // inside the index: the crc32c no longer matches
    f.store.put("a/c/1/1", Bytes::from(shard)).await.unwrap();
    let err = read_file(&f.fs, "a/c/2/2").await.unwrap_err();
    assert!(matches!(err, FsError::Corrupt(_)), "{err:?}");
    assert_eq!(err.errno(), libc::EIO);
    assert_eq!(read_file(&f.fs, "a/c/2/0").await.unwrap(), chunk_bytes(2, 0));
    // Listing skips the corrupt shard's chunks but still works.
    assert_eq!(list(&f.fs, "a/c/2").await, vec!["0", "1", "4"]);
}

#[tokio::test]
async fn index_pointing_past_the_shard_end_is_corrupt() {
    let f = fixture().await;
    let NodeMetadata::Array(meta) = parse_zarr_json(ARRAY_JSON.as_bytes()).unwrap() else {
        panic!()
    };
    let layout = shard_layout(&meta).unwrap();
    // A shard whose only entry claims 1000 bytes of a 40-byte body.
    let mut index = zarr_mount::zarr::sharding::index::ShardIndex::new_empty(&layout).unwrap();
    index
        .set(0, Some(zarr_mount::zarr::sharding::index::ChunkEntry { offset: 0, nbytes: 1000 }))
        .unwrap();
    let mut shard = vec![0u8; 40];
    shard.extend(index.encode(&layout));
    f.store.put("a/c/2/1", Bytes::from(shard)).await.unwrap();
    assert_eq!(read_file(&f.fs, "a/c/4/2").await.unwrap_err().errno(), libc::EIO);
}

#[tokio::test]
async fn arrays_that_cannot_be_unpacked_pass_through() {
    let f = fixture().await;
    // crc32c after sharding wraps the whole shard: not unpackable.
    let json = ARRAY_JSON
        .replace(r#""index_location":"end"}}]"#, r#""index_location":"end"}},{"name":"crc32c"}]"#);
    f.store.put("b/zarr.json", Bytes::from(json.clone())).await.unwrap();
    f.store.put("b/c/0/0", Bytes::from_static(b"raw shard bytes")).await.unwrap();
    assert_eq!(read_file(&f.fs, "b/zarr.json").await.unwrap(), json.as_bytes());
    assert_eq!(read_file(&f.fs, "b/c/0/0").await.unwrap(), b"raw shard bytes");
}

#[tokio::test]
async fn names_outside_the_chunk_grid_are_refused_inside_the_chunk_tree() {
    let f = fixture().await;
    let dir = ino_of(&f.fs, "a/c/2").await.unwrap();
    assert_eq!(f.fs.create(dir, "junk", libc::O_WRONLY).await.unwrap_err().errno(), libc::EPERM);
    assert_eq!(
        f.fs.create(dir, "9", libc::O_WRONLY).await.unwrap_err().errno(),
        libc::EPERM,
        "past the grid"
    );
    assert_eq!(f.fs.mkdir(dir, "7").await.unwrap_err().errno(), libc::EPERM);
    // Writing elsewhere still works.
    let (_, h) = f.fs.create(ROOT_INO, "free.txt", libc::O_WRONLY).await.unwrap();
    f.fs.write(h.fh, 0, b"ok").await.unwrap();
    f.fs.release(h.fh).await.unwrap();
    assert_eq!(f.store.get("free.txt").await.unwrap(), Bytes::from_static(b"ok"));
}

#[tokio::test]
async fn consolidated_metadata_of_groups_is_rewritten() {
    let f = fixture().await;
    let array: serde_json::Value = serde_json::from_str(ARRAY_JSON).unwrap();
    let group = serde_json::json!({
        "zarr_format": 3, "node_type": "group", "attributes": {"g": true},
        "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {"a": array}}
    });
    f.store.put("zarr.json", Bytes::from(serde_json::to_vec(&group).unwrap())).await.unwrap();
    let fs2 = {
        let raw = RawNamespace::new(f.store.clone() as Arc<dyn Store>);
        ZarrFs::new(
            Arc::new(UnshardedNamespace::new(raw, Duration::from_secs(60))),
            FsConfig {
                metadata_ttl: Duration::from_secs(60),
                read_only: false,
                passthrough: false,
                perms: zarr_mount::perms::ShownPerms::of_this_process(),
            },
        )
    };
    let json: serde_json::Value =
        serde_json::from_slice(&read_file(&fs2, "zarr.json").await.unwrap()).unwrap();
    let entry = &json["consolidated_metadata"]["metadata"]["a"];
    assert_eq!(entry["chunk_grid"]["configuration"]["chunk_shape"], serde_json::json!([5, 4]));
    assert_eq!(entry["codecs"][0]["name"], "bytes");
    assert_eq!(json["attributes"]["g"], true);
    // And it equals what the array's own zarr.json says.
    let own: serde_json::Value =
        serde_json::from_slice(&read_file(&fs2, "a/zarr.json").await.unwrap()).unwrap();
    assert_eq!(entry, &own);
}

// ---- writes through the view (shard rewrites) ----

async fn write_file(fs: &ZarrFs, dir: &str, name: &str, data: &[u8]) -> Result<(), FsError> {
    let parent = if dir.is_empty() { ROOT_INO } else { ino_of(fs, dir).await? };
    let (_, h) = fs.create(parent, name, libc::O_WRONLY | libc::O_TRUNC).await?;
    fs.write(h.fh, 0, data).await?;
    fs.release(h.fh).await
}

/// The chunks stored in shard `key`, decoded independently of the view.
async fn stored_chunks(store: &RecordingStore, key: &str) -> Option<Vec<(u64, Vec<u8>)>> {
    let shard = store.get(key).await.ok()?;
    let NodeMetadata::Array(meta) = parse_zarr_json(ARRAY_JSON.as_bytes()).unwrap() else {
        panic!()
    };
    let layout = shard_layout(&meta).unwrap();
    let size = shard.len() as u64;
    let r = zarr_mount::zarr::sharding::index::ShardIndex::index_byte_range(&layout, size).unwrap();
    let index = zarr_mount::zarr::sharding::index::ShardIndex::decode(
        &layout,
        &shard[r.start as usize..r.end as usize],
        size,
    )
    .unwrap();
    Some(
        index
            .present()
            .map(|(l, e)| (l, shard[e.offset as usize..(e.offset + e.nbytes) as usize].to_vec()))
            .collect(),
    )
}

#[tokio::test]
async fn writing_a_chunk_file_rewrites_its_shard() {
    let f = fixture().await;
    write_file(&f.fs, "a/c/2", "3", b"NEW BYTES").await.unwrap();
    // Shard (1,1) local 1 = global (2,3); its other chunks are untouched, the index is valid.
    let chunks = stored_chunks(&f.store, "a/c/1/1").await.unwrap();
    assert_eq!(
        chunks,
        vec![(0, chunk_bytes(2, 2)), (1, b"NEW BYTES".to_vec()), (2, chunk_bytes(3, 2))]
    );
    // Read-after-write through the view, including a neighbour whose offset moved.
    assert_eq!(read_file(&f.fs, "a/c/2/3").await.unwrap(), b"NEW BYTES");
    assert_eq!(read_file(&f.fs, "a/c/3/2").await.unwrap(), chunk_bytes(3, 2));
    // The missing local chunk 3 of shard (1,1) can be created.
    write_file(&f.fs, "a/c/3", "3", b"filled in").await.unwrap();
    assert_eq!(stored_chunks(&f.store, "a/c/1/1").await.unwrap().len(), 4);
}

#[tokio::test]
async fn a_new_shard_is_created_and_an_emptied_one_deleted() {
    let f = fixture().await;
    assert!(f.store.get("a/c/0/0").await.is_err());
    write_file(&f.fs, "a/c/1", "0", b"first chunk of shard 0,0").await.unwrap();
    assert_eq!(
        stored_chunks(&f.store, "a/c/0/0").await.unwrap(),
        vec![(2, b"first chunk of shard 0,0".to_vec())]
    );
    assert_eq!(list(&f.fs, "a/c/1").await, vec!["0", "2", "3", "4"]);
    // Delete every chunk of shard (2,2) (global rows 4, cols 4): the shard object goes away.
    let c4 = ino_of(&f.fs, "a/c/4").await.unwrap();
    f.fs.unlink(c4, "4").await.unwrap();
    assert!(f.store.get("a/c/2/2").await.is_err(), "all-absent shard must be deleted");
    assert!(matches!(read_file(&f.fs, "a/c/4/4").await, Err(FsError::NotFound)));
    // Removing an absent chunk is ENOENT, not a rewrite.
    assert_eq!(f.fs.unlink(c4, "4").await.unwrap_err().errno(), libc::ENOENT);
}

#[tokio::test]
async fn concurrent_writers_of_one_shard_lose_nothing() {
    let f = Arc::new(fixture().await);
    let mut tasks = Vec::new();
    for round in 0..5u8 {
        for (y, x) in [(4u64, 2u64), (4, 3)] {
            let f = f.clone();
            tasks.push(tokio::spawn(async move {
                let data = format!("round {round} chunk {y},{x}");
                write_file(&f.fs, &format!("a/c/{y}"), &x.to_string(), data.as_bytes())
                    .await
                    .unwrap();
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let chunks = stored_chunks(&f.store, "a/c/2/1").await.unwrap();
    let locals: Vec<u64> = chunks.iter().map(|c| c.0).collect();
    // Both written chunks are there; the chunks stored past the array edge were dropped.
    assert_eq!(locals, vec![0, 1], "{chunks:?}");
    for (_, bytes) in &chunks {
        assert!(String::from_utf8_lossy(bytes).starts_with("round "), "{bytes:?}");
    }
}

#[tokio::test]
async fn zarr_json_of_a_sharded_array_accepts_only_attribute_changes() {
    let f = fixture().await;
    let mut shown: serde_json::Value =
        serde_json::from_slice(&read_file(&f.fs, "a/zarr.json").await.unwrap()).unwrap();
    shown["attributes"] = serde_json::json!({"a": 2, "new": "yes"});
    write_file(&f.fs, "a", "zarr.json", &serde_json::to_vec(&shown).unwrap()).await.unwrap();
    let real: serde_json::Value =
        serde_json::from_slice(&f.store.get("a/zarr.json").await.unwrap()).unwrap();
    assert_eq!(real["attributes"], serde_json::json!({"a": 2, "new": "yes"}));
    assert_eq!(real["codecs"][0]["name"], "sharding_indexed", "the real document stays sharded");
    // Changing anything else (here the shape) is refused and changes nothing.
    shown["shape"] = serde_json::json!([30, 18]);
    let err = write_file(&f.fs, "a", "zarr.json", &serde_json::to_vec(&shown).unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.errno(), libc::EPERM);
    let after: serde_json::Value =
        serde_json::from_slice(&f.store.get("a/zarr.json").await.unwrap()).unwrap();
    assert_eq!(after["shape"], serde_json::json!([25, 18]));
}

#[tokio::test]
async fn a_shard_with_a_corrupt_index_is_never_rewritten() {
    let f = fixture().await;
    let mut shard = f.store.get("a/c/1/1").await.unwrap().to_vec();
    let n = shard.len();
    shard[n - 10] ^= 0xff;
    f.store.put("a/c/1/1", Bytes::from(shard.clone())).await.unwrap();
    let err = write_file(&f.fs, "a/c/2", "2", b"x").await.unwrap_err();
    assert_eq!(err.errno(), libc::EIO);
    assert_eq!(
        f.store.get("a/c/1/1").await.unwrap().to_vec(),
        shard,
        "the corrupt shard is left as it was"
    );
}

/// O_CREAT|O_EXCL of an inner chunk (#20): EEXIST for a chunk present in its shard, and of two
/// daemons (two filesystems on one store) creating the same absent chunk, the one that closes
/// second gets EEXIST and the shard keeps the first one's bytes and its other chunks.
#[tokio::test]
async fn exclusive_creates_of_inner_chunks_are_decided_in_the_shard() {
    let f = fixture().await;
    let excl = libc::O_WRONLY | libc::O_EXCL;
    let c2 = ino_of(&f.fs, "a/c/2").await.unwrap();
    assert_eq!(f.fs.create(c2, "2", excl).await.unwrap_err().errno(), libc::EEXIST);

    // A second daemon on the same store.
    let raw = RawNamespace::new(f.store.clone() as Arc<dyn Store>);
    let other = ZarrFs::new(
        Arc::new(UnshardedNamespace::new(raw, Duration::from_secs(60))),
        FsConfig {
            metadata_ttl: Duration::from_secs(60),
            read_only: false,
            passthrough: false,
            perms: zarr_mount::perms::ShownPerms::of_this_process(),
        },
    );
    let c3 = ino_of(&f.fs, "a/c/3").await.unwrap();
    let o3 = ino_of(&other, "a/c/3").await.unwrap();
    let (_, mine) = f.fs.create(c3, "3", excl).await.unwrap();
    let (_, theirs) = other.create(o3, "3", excl).await.unwrap();
    other.write(theirs.fh, 0, b"theirs").await.unwrap();
    f.fs.write(mine.fh, 0, b"mine").await.unwrap();
    other.flush(theirs.fh).await.unwrap();
    assert_eq!(f.fs.flush(mine.fh).await.unwrap_err().errno(), libc::EEXIST);
    f.fs.release(mine.fh).await.unwrap();
    other.release(theirs.fh).await.unwrap();
    assert_eq!(
        stored_chunks(&f.store, "a/c/1/1").await.unwrap(),
        vec![
            (0, chunk_bytes(2, 2)),
            (1, chunk_bytes(2, 3)),
            (2, chunk_bytes(3, 2)),
            (3, b"theirs".to_vec())
        ]
    );
}

/// zarr-python asks for zarr.json, .zarray and .zattrs at once. The lookup of a v2 document
/// does not wait for the walk to read the zarr.json of every directory above it: its request
/// goes out while the walk's first read is still unanswered, and the answer is the raw
/// store's (here: absent, and present).
#[tokio::test]
async fn a_v2_document_lookup_goes_out_beside_the_walk() {
    use zarr_mount::views::shared::namespace::Namespace;
    let memory = Arc::new(MemoryStore::new());
    memory.put("a/zarr.json", Bytes::from_static(ARRAY_JSON.as_bytes())).await.unwrap();
    memory.put("a/.zattrs", Bytes::from_static(b"{}")).await.unwrap();
    let store = Arc::new(RecordingStore::with_read_delay(memory, Duration::from_millis(200)));
    for (name, present) in [(".zarray", false), (".zattrs", true)] {
        let raw = RawNamespace::new(store.clone() as Arc<dyn Store>);
        let ns = UnshardedNamespace::new(raw, Duration::from_secs(60));
        store.take();
        let path = format!("a/{name}");
        assert_eq!(ns.lookup(&path).await.unwrap().is_some(), present, "{path}");
        let calls = store.take();
        let first_of = |what: &str| calls.iter().position(|c| c.contains(what));
        let (doc, walk) = (first_of(&path).unwrap(), first_of("a/zarr.json").unwrap());
        assert!(doc < walk, "{path} was asked for after the walk read a/zarr.json: {calls:?}");
    }
}
