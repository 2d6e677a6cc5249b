//! Parsers of untrusted bytes never panic and never allocate what the input merely claims:
//! property tests over random and mutated inputs, run by `cargo test`. The coverage-guided
//! fuzz targets in fuzz/ (scripts/fuzz.sh, cargo-fuzz on stable) go deeper on the same parsers.

use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use zarr_mount::store::backends::memory::MemoryStore;
use zarr_mount::store::backends::zip::ZipStore;
use zarr_mount::store::prelude::*;
use zarr_mount::zarr::metadata::parse_zarr_json;
use zarr_mount::zarr::metadata::NodeMetadata;
use zarr_mount::zarr::sharding::index::ShardIndex;
use zarr_mount::zarr::sharding::shard_layout;

const SHARDED: &str = r#"{"shape":[100,100],"data_type":"int32","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[50,50]}},"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},"fill_value":0,"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[10,10],"codecs":[{"name":"bytes","configuration":{"endian":"little"}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"end"}}],"attributes":{},"zarr_format":3,"node_type":"array"}"#;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    #[test]
    fn shard_index_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600), size in any::<u64>()) {
        let NodeMetadata::Array(meta) = parse_zarr_json(SHARDED.as_bytes()).unwrap() else { panic!() };
        let layout = shard_layout(&meta).unwrap();
        let _ = ShardIndex::index_byte_range(&layout, size);
        if let Ok(index) = ShardIndex::decode(&layout, &bytes, size) {
            // Whatever it accepted is inside the shard.
            for (_, e) in index.present() {
                prop_assert!(e.offset.checked_add(e.nbytes).is_some_and(|end| end <= size));
            }
        }
    }

    #[test]
    fn zarr_json_parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse_zarr_json(&bytes);
    }

    #[test]
    fn mutated_zarr_json_never_panics(pos in 0usize..SHARDED.len(), byte in any::<u8>(), cut in 0usize..SHARDED.len()) {
        let mut doc = SHARDED.as_bytes().to_vec();
        doc[pos] = byte;
        for d in [&doc[..], &doc[..cut]] {
            if let Ok(NodeMetadata::Array(meta)) = parse_zarr_json(d) {
                if let Ok(layout) = shard_layout(&meta) {
                    let _ = ShardIndex::new_empty(&layout);
                    let _ = zarr_mount::views::unsharded::mapping::UnshardedArray::new(meta.clone()).map(|a| a.rewritten_zarr_json());
                }
            }
        }
    }

    #[test]
    fn zip_open_never_panics_on_garbage_or_mutations(
        garbage in proptest::collection::vec(any::<u8>(), 0..300),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let fixture = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/zip/v3.zip")).unwrap();
        let mut mutated = fixture.clone();
        for (i, b) in &flips {
            let at = i.index(mutated.len());
            mutated[at] = *b;
        }
        for archive in [garbage, mutated] {
            let store = Arc::new(MemoryStore::new());
            rt.block_on(async {
                store.put("a.zip", Bytes::from(archive)).await.unwrap();
                if let Ok(zip) = ZipStore::open(store.clone(), "a.zip").await {
                    // Every listed entry can be read or fails cleanly.
                    let listing = zip.list("").await;
                    if let Ok(listing) = listing {
                        for (name, _) in listing.files {
                            let _ = zip.get(&name).await;
                        }
                    }
                }
            });
        }
    }
}
