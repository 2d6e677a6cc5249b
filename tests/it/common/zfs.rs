//! Driving `ZarrFs` directly, without FUSE: path-based helpers over its inode API, and a
//! small sharded array whose shards the tests decode independently of the view.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use zarr_mount::fs::inodes::table::ROOT_INO;
use zarr_mount::fs::{FsConfig, FsResult, ZarrFs};
use zarr_mount::store::prelude::*;
use zarr_mount::store::split_key;
use zarr_mount::views::raw::namespace::RawNamespace;
use zarr_mount::views::unsharded::namespace::UnshardedNamespace;
use zarr_mount::zarr::metadata::{parse_zarr_json, NodeMetadata};
use zarr_mount::zarr::sharding::build::build_shard;
use zarr_mount::zarr::sharding::index::ShardIndex;
use zarr_mount::zarr::sharding::{shard_layout, ShardLayout};

/// Long enough that nothing expires during a test: every refresh comes from invalidation.
pub const TTL: Duration = Duration::from_secs(60);

fn config(read_only: bool) -> FsConfig {
    FsConfig {
        metadata_ttl: TTL,
        read_only,
        passthrough: false,
        perms: zarr_mount::perms::ShownPerms::of_this_process(),
    }
}

/// The raw view of `store`.
pub fn raw_fs(store: Arc<dyn Store>, read_only: bool) -> ZarrFs {
    ZarrFs::new(Arc::new(RawNamespace::new(store)), config(read_only))
}

/// The unsharded view of `store` (the default view of a mount).
pub fn unsharded_fs(store: Arc<dyn Store>) -> ZarrFs {
    let ns = UnshardedNamespace::new(RawNamespace::new(store), TTL);
    ZarrFs::new(Arc::new(ns), config(false))
}

pub async fn ino_of(fs: &ZarrFs, path: &str) -> FsResult<u64> {
    let mut ino = ROOT_INO;
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        ino = fs.lookup(ino, comp).await?.ino;
    }
    Ok(ino)
}

/// The parent directory's inode and the last name of `path`.
async fn parent_of<'a>(fs: &ZarrFs, path: &'a str) -> FsResult<(u64, &'a str)> {
    let (dir, name) = split_key(path);
    Ok((ino_of(fs, dir).await?, name))
}

/// open, one read of the whole file (however long it is by then), release.
pub async fn read_file(fs: &ZarrFs, path: &str) -> FsResult<Vec<u8>> {
    let ino = ino_of(fs, path).await?;
    let h = fs.open(ino, libc::O_RDONLY).await?;
    let data = fs.read(h.fh, 0, u32::MAX).await;
    fs.release(h.fh).await?;
    Ok(data?.to_vec())
}

/// create (truncating), write in pieces of `piece` bytes, flush, release: what `close()`
/// reports is the flush's error, so that one comes first.
pub async fn write_file_in(fs: &ZarrFs, path: &str, data: &[u8], piece: usize) -> FsResult<()> {
    let (parent, name) = parent_of(fs, path).await?;
    let (_, h) = fs.create(parent, name, libc::O_WRONLY | libc::O_TRUNC).await?;
    let mut written = Ok(0);
    for (i, part) in data.chunks(piece.max(1)).enumerate() {
        written = fs.write(h.fh, (i * piece) as u64, part).await;
        if written.is_err() {
            break;
        }
    }
    let flushed = fs.flush(h.fh).await;
    let released = fs.release(h.fh).await;
    written.and(flushed).and(released)
}

pub async fn write_file(fs: &ZarrFs, path: &str, data: &[u8]) -> FsResult<()> {
    write_file_in(fs, path, data, data.len()).await
}

pub async fn remove_file(fs: &ZarrFs, path: &str) -> FsResult<()> {
    let (parent, name) = parent_of(fs, path).await?;
    fs.unlink(parent, name).await
}

pub async fn rename(fs: &ZarrFs, from: &str, to: &str) -> FsResult<()> {
    let (p1, n1) = parent_of(fs, from).await?;
    let (p2, n2) = parent_of(fs, to).await?;
    fs.rename(p1, n1, p2, n2, 0).await
}

pub async fn list(fs: &ZarrFs, dir: &str) -> FsResult<Vec<String>> {
    let fh = fs.opendir(ino_of(fs, dir).await?).await?;
    let names = fs.readdir(fh)?.iter().skip(2).map(|e| e.name.clone()).collect();
    fs.releasedir(fh);
    Ok(names)
}

/// A 16x16 int32 array in 8x8 shards of 2x2 inner chunks: 2x2 shards, 16 inner chunks each;
/// inner chunk (y, x) is the file `c/y/x` of the unsharded view.
pub const SHARDED_ARRAY: &str = r#"{"zarr_format":3,"node_type":"array","shape":[16,16],"data_type":"int32",
"chunk_grid":{"name":"regular","configuration":{"chunk_shape":[8,8]}},
"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},"fill_value":0,
"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[2,2],
"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],
"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"end"}}],
"attributes":{}}"#;

pub fn sharded_layout() -> ShardLayout {
    let NodeMetadata::Array(meta) =
        parse_zarr_json(SHARDED_ARRAY.as_bytes()).expect("valid metadata")
    else {
        panic!("not an array")
    };
    shard_layout(&meta).expect("unpackable")
}

/// Local index, inside shard (0, 0), of inner chunk (y, x).
pub fn local_of(y: u64, x: u64) -> u64 {
    y * 4 + x
}

/// Write `dir/zarr.json` and shard (0, 0) holding `chunks` (local index, encoded bytes).
pub async fn put_sharded_array(store: &dyn Store, dir: &str, chunks: &BTreeMap<u64, Vec<u8>>) {
    store
        .put(&format!("{dir}/zarr.json"), Bytes::from_static(SHARDED_ARRAY.as_bytes()))
        .await
        .unwrap();
    let parts: Vec<(u64, &[u8])> = chunks.iter().map(|(l, b)| (*l, b.as_slice())).collect();
    if let Some(shard) = build_shard(&sharded_layout(), &parts).unwrap() {
        store.put(&format!("{dir}/c/0/0"), Bytes::from(shard)).await.unwrap();
    }
}

/// The chunks stored in the shard at `key`, decoded without the view (None: no shard).
pub async fn stored_chunks(store: &dyn Store, key: &str) -> Option<BTreeMap<u64, Vec<u8>>> {
    let shard = store.get(key).await.ok()?;
    let layout = sharded_layout();
    let size = shard.len() as u64;
    let r = ShardIndex::index_byte_range(&layout, size).expect("index range");
    let index = ShardIndex::decode(&layout, &shard[r.start as usize..r.end as usize], size)
        .expect("valid index");
    Some(
        index
            .present()
            .map(|(l, e)| (l, shard[e.offset as usize..(e.offset + e.nbytes) as usize].to_vec()))
            .collect(),
    )
}
