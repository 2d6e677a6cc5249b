//! Shard index decoding (`zarr::sharding::index`) with the layout derived from a sharded array's
//! metadata (`zarr::sharding::shard_layout`), as the unsharded view does.
//!
//! Input: a header, then bytes.
//!   byte 0: bit 0 index at the start, bit 1 index has a crc32c, bits 2-3 rank (0-3),
//!           bit 4 "explicit size" mode
//!   per dimension: u16 LE inner chunks per shard, u8 inner chunk size (0s are refused)
//!   explicit size mode: u64 LE claimed shard size; the rest is the index bytes alone
//!   otherwise: the rest is the whole shard object (what `scripts/fuzz.sh` seeds from real
//!   shards)
//!
//! Invariants: a layout never has more than MAX_INDEX_ENTRIES entries (a header claiming more
//! is refused before anything is allocated for it: the allocation guard aborts otherwise);
//! accepted entries lie inside the shard and outside the index; encode(decode(x)) == x.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;
use zarr_mount::zarr::metadata::{parse_node, NodeMetadata};
use zarr_mount::zarr::sharding::index::{IndexError, ShardIndex};
use zarr_mount::zarr::sharding::{
    shard_layout, IndexLocation, NotUnpackable, ShardLayout, MAX_INDEX_ENTRIES,
};
use zarr_mount_fuzz::Reader;

fuzz_target!(init: zarr_mount_fuzz::init(), |data: &[u8]| {
    let mut r = Reader::new(data);
    let flags = r.u8();
    let start = flags & 1 != 0;
    let crc = flags & 2 != 0;
    let ndim = usize::from((flags >> 2) & 3);
    let explicit = flags & 16 != 0;
    let mut per = Vec::with_capacity(ndim);
    let mut inner = Vec::with_capacity(ndim);
    for _ in 0..ndim {
        per.push(u64::from(r.u16()));
        inner.push(u64::from(r.u8()));
    }
    let shard: Vec<u64> = per.iter().zip(&inner).map(|(p, i)| p * i).collect();
    let index_codecs = if crc { json!(["bytes", "crc32c"]) } else { json!([{"name": "bytes", "configuration": {"endian": "little"}}]) };
    let doc = json!({
        "zarr_format": 3, "node_type": "array", "shape": shard, "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": shard}},
        "fill_value": 0,
        "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": inner, "codecs": ["bytes"], "index_codecs": index_codecs,
            "index_location": if start { "start" } else { "end" }}}],
    });
    let meta = match parse_node(doc) {
        Ok(NodeMetadata::Array(meta)) => meta,
        _ => return, // a zero in the shard shape
    };
    let layout = match shard_layout(&meta) {
        Ok(layout) => layout,
        Err(NotUnpackable::TooManyEntries(n)) => {
            assert!(n > MAX_INDEX_ENTRIES);
            assert_eq!(n, per.iter().fold(1u64, |a, &p| a.saturating_mul(p)));
            return;
        }
        Err(_) => {
            assert!(inner.contains(&0), "valid sharding config refused");
            return;
        }
    };
    let n: u64 = per.iter().product();
    assert_eq!(layout.n_entries, n);
    assert!(n <= MAX_INDEX_ENTRIES);
    assert_eq!(layout.index_size(), 16 * n + if crc { 4 } else { 0 });
    assert_eq!(layout.index_location == IndexLocation::Start, start);
    assert_eq!(layout.index_has_crc32c, crc);

    if explicit {
        let claimed = r.u64();
        let bytes = r.rest;
        let region = ShardIndex::index_byte_range(&layout, claimed);
        match ShardIndex::decode(&layout, bytes, claimed) {
            Ok(index) => check(&layout, &index, bytes, claimed),
            Err(IndexError::WrongLength { .. }) => assert_ne!(bytes.len() as u64, layout.index_size()),
            Err(IndexError::ShardTooSmall { .. }) => assert!(region.is_err()),
            Err(_) => {}
        }
        // The same bytes under a layout claiming an absurd number of entries (only a
        // hand-built layout can): refused by length, and `new_empty` refuses it outright.
        let mut huge = layout.clone();
        huge.n_entries = claimed.max(MAX_INDEX_ENTRIES + 1);
        assert!(ShardIndex::decode(&huge, bytes, claimed).is_err());
        assert!(matches!(ShardIndex::new_empty(&huge), Err(IndexError::TooManyEntries(_))));
    } else {
        let shard = r.rest;
        let size = shard.len() as u64;
        let Ok(index) = ShardIndex::of_shard(&layout, shard) else { return };
        let region = ShardIndex::index_byte_range(&layout, size).expect("accepted, so it fits");
        let bytes = &shard[region.start as usize..region.end as usize];
        check(&layout, &index, bytes, size);
    }
    if n <= 1 << 12 {
        let empty = ShardIndex::new_empty(&layout).expect("within the cap");
        assert!(empty.all_absent());
        assert_eq!(empty.len(), n);
    }
});

/// An accepted index stays inside the shard, outside its own bytes, and re-encodes exactly.
fn check(layout: &ShardLayout, index: &ShardIndex, bytes: &[u8], shard_size: u64) {
    let region = ShardIndex::index_byte_range(layout, shard_size).expect("accepted, so it fits");
    assert_eq!(region.end - region.start, bytes.len() as u64);
    assert_eq!(index.len(), layout.n_entries);
    for (i, e) in index.present() {
        assert!(i < layout.n_entries);
        let end = e.offset.checked_add(e.nbytes).expect("no overflow");
        assert!(end <= shard_size, "entry {i} past the shard");
        assert!(
            e.nbytes == 0 || end <= region.start || e.offset >= region.end,
            "entry {i} overlaps the index"
        );
    }
    assert_eq!(index.encode(layout), bytes, "encode(decode(x)) != x");
    assert_eq!(ShardIndex::decode(layout, bytes, shard_size).as_ref(), Ok(index));
}
