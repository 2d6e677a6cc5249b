//! Chunk decoding (`zarr::codecs`): `ChunkSpec::decode`, and `decode_chunk` where it applies,
//! over arbitrary bytes, with the codec chains of the decoding test vectors in
//! src/zarr/codecs/testdata: bytes (both endiannesses, bool, complex), transpose (2-d and
//! 3-d), crc32c, zstd, gzip, numcodecs.zlib, blosc (lz4/zstd/blosclz, every shuffle),
//! sharding_indexed (index at the start and the end, after a transpose, wrapped in gzip,
//! nested), and the v2 chains `V2Array::chunk_spec` builds (order F, filters + compressor).
//!
//! Input: byte 0 picks the chain (modulo the number of chains, in the order of `CHAINS`);
//! the rest is the stored chunk. `scripts/fuzz.sh` seeds each chain with its vector's chunk.
//!
//! Invariant: decoding gives exactly `prod(chunk_shape) * itemsize` bytes or an error, never
//! more memory than the bounds allow (the allocation guard aborts otherwise), and both entry
//! points agree.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use zarr_mount::zarr::codecs::{decode_chunk, ChunkSpec};
use zarr_mount::zarr::data_type::DataType;
use zarr_mount::zarr::metadata::{parse_zarr_json, NodeMetadata};
use zarr_mount::zarr::v2::V2Array;

macro_rules! v3 {
    ($name:literal) => {
        (
            true,
            $name,
            include_bytes!(concat!("../../src/zarr/codecs/testdata/", $name, "/zarr.json"))
                .as_slice(),
        )
    };
}
macro_rules! v2 {
    ($name:literal) => {
        (
            false,
            $name,
            include_bytes!(concat!("../../src/zarr/codecs/testdata/v2/", $name, "/.zarray"))
                .as_slice(),
        )
    };
}

/// (is v3, vector name, metadata document). The order is the selector byte's meaning:
/// append only.
const CHAINS: [(bool, &str, &[u8]); 26] = [
    v3!("bool"),
    v3!("complex64_big"),
    v3!("float32_blosc_lz4_shuffle"),
    v3!("float64_big_zstd_crc32c"),
    v3!("float64_gzip"),
    v3!("int16_big"),
    v3!("int32_crc32c"),
    v3!("int32_numcodecs_zlib"),
    v3!("int32_transpose_3d"),
    v3!("int32_zstd"),
    v3!("nested_sharded_float64"),
    v3!("sharded_gzip_after"),
    v3!("sharded_int32_end"),
    v3!("sharded_uint16_start"),
    v3!("transpose_sharded_float32"),
    v3!("uint16_blosc_zstd_bitshuffle"),
    v3!("uint16_transpose"),
    v2!("bool_gzip"),
    v2!("complex128_F_3d"),
    v2!("float16_blosc_zstd_bitshuffle"),
    v2!("float32_F_big_crc32c"),
    v2!("float64_big_blosc_slash"),
    v2!("int16_big_gzip_crc32c"),
    v2!("int32_F_zlib"),
    v2!("uint16_zlib_filter_zstd_checksum"),
    v2!("uint8_blosc_autoshuffle"),
];

/// Each chain's spec, and whether `decode_chunk` (no sharding) applies to it.
fn specs() -> &'static [(ChunkSpec, bool)] {
    static SPECS: OnceLock<Vec<(ChunkSpec, bool)>> = OnceLock::new();
    SPECS.get_or_init(|| {
        CHAINS
            .iter()
            .map(|&(is_v3, name, doc)| {
                let spec = if is_v3 {
                    let Ok(NodeMetadata::Array(meta)) = parse_zarr_json(doc) else {
                        panic!("{name}: not an array")
                    };
                    ChunkSpec::from_v3(&meta)
                } else {
                    V2Array::parse(doc).expect(name).chunk_spec()
                };
                let spec = spec.unwrap_or_else(|e| panic!("{name}: {e}"));
                let plain = !spec.codecs.iter().any(|c| c.name == "sharding_indexed");
                (spec, plain)
            })
            .collect()
    })
}

fuzz_target!(init: { zarr_mount_fuzz::init(); specs(); }, |data: &[u8]| {
    let Some((&selector, encoded)) = data.split_first() else { return };
    let (spec, plain) = &specs()[usize::from(selector) % CHAINS.len()];
    let size = spec.decoded_size().expect("vector spec has a size");
    let decoded = spec.decode(encoded);
    if let Ok(out) = &decoded {
        assert_eq!(out.len() as u64, size, "decoded to the wrong size");
    }
    if *plain {
        let dt: &DataType = &spec.data_type;
        let other = decode_chunk(&spec.codecs, dt, &spec.chunk_shape, encoded);
        match (&decoded, &other) {
            (Ok(a), Ok(b)) => assert!(a == b, "decode_chunk and ChunkSpec::decode differ"),
            (Err(_), Err(_)) => {}
            _ => panic!("decode_chunk and ChunkSpec::decode disagree: {decoded:?} vs {other:?}"),
        }
    }
});
