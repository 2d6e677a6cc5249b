//! Decoding the `sharding_indexed` array->bytes codec: a shard is the encoded
//! inner chunks plus an index of where each lies. Decoding reads and checks the
//! index (with [`crate::zarr::sharding::index`]), decodes every present inner chunk
//! through the inner chain (which may itself shard), places it into the shard's
//! C-order output and leaves absent inner chunks at the fill value.
//!
//! The configuration is checked by [`crate::zarr::sharding::layout_for_shape`], the
//! same code that decides whether the unsharded view can unpack an array, so both
//! accept exactly the same shards. This decoder stays among the codecs rather than in
//! `zarr/sharding/`: it is one codec of the chain and decodes inner chunks through it,
//! so moving it would make the two folders import each other.

use super::{decoded_size, ChunkSpec, CodecError, Plan};
use crate::zarr::data_type::DataType;
use crate::zarr::metadata::Codec;
use crate::zarr::sharding::index::ShardIndex;
use crate::zarr::sharding::{layout_for_shape, ShardLayout, SHARDING_CODEC};

/// How deeply sharding may nest (a shard of shards of ...). JSON parsing already
/// bounds the depth; this keeps a hand-built chain from recursing without limit.
pub(super) const MAX_NESTING: usize = 8;

fn corrupt(reason: impl Into<String>) -> CodecError {
    CodecError::Corrupt { codec: SHARDING_CODEC, reason: reason.into() }
}

/// A checked `sharding_indexed` codec for shards of one shape.
#[derive(Debug)]
pub(super) struct ShardCodec {
    layout: ShardLayout,
    /// The inner chain, for chunks of `layout.inner_chunk_shape`.
    inner: Box<Plan>,
    data_type: DataType,
    /// One element, little-endian.
    fill: Vec<u8>,
}

impl ShardCodec {
    /// Check `codec` (a `sharding_indexed` entry) for shards of `shard_shape` (the
    /// shape the codec sees, i.e. after any array->array codecs), including the
    /// inner chain, recursively. `depth` is the number of enclosing shard levels.
    pub(super) fn new(
        codec: &Codec,
        shard_shape: &[u64],
        spec: &ChunkSpec,
        depth: usize,
    ) -> Result<ShardCodec, CodecError> {
        if depth >= MAX_NESTING {
            return Err(CodecError::InvalidChain(format!(
                "sharding nested more than {MAX_NESTING} levels deep"
            )));
        }
        let layout = layout(codec, shard_shape)?;
        let inner_spec = ChunkSpec {
            codecs: layout.inner_codecs.clone(),
            data_type: spec.data_type.clone(),
            chunk_shape: layout.inner_chunk_shape.clone(),
            fill_value: spec.fill_value.clone(),
        };
        let inner = Box::new(Plan::new(&inner_spec, depth + 1)?);
        Ok(ShardCodec {
            layout,
            inner,
            data_type: spec.data_type.clone(),
            fill: spec.fill_value.clone(),
        })
    }

    /// Bytes of the shard index.
    pub(super) fn index_size(&self) -> u64 {
        self.layout.index_size()
    }

    /// Decode one shard into exactly `decoded_size(shard_shape)` bytes.
    pub(super) fn decode(&self, shard: &[u8]) -> Result<Vec<u8>, CodecError> {
        let itemsize = self.data_type.itemsize;
        let shard_shape = &self.layout.shard_shape;
        let inner_shape = &self.layout.inner_chunk_shape;
        let size = usize::try_from(decoded_size(&self.data_type, shard_shape)?)
            .map_err(|_| corrupt("shard does not fit in memory"))?;

        let shard_len = shard.len() as u64;
        let region = ShardIndex::index_byte_range(&self.layout, shard_len)
            .map_err(|e| corrupt(e.to_string()))?;
        let index_bytes = slice(shard, region.start, region.end)?;
        let index = ShardIndex::decode(&self.layout, index_bytes, shard_len)
            .map_err(|e| corrupt(e.to_string()))?;

        let mut out = repeat_fill(&self.fill, size);
        let cps = &self.layout.chunks_per_shard;
        let mut coords = vec![0u64; cps.len()];
        for (local, entry) in index.present() {
            let range = entry.range();
            let encoded = slice(shard, range.start, range.end)?;
            let chunk = self.inner.decode(encoded)?;
            // C-order position of inner chunk `local` in the chunks-per-shard grid.
            let mut rest = local;
            for (c, &per) in coords.iter_mut().zip(cps).rev() {
                *c = rest % per;
                rest /= per;
            }
            place(&mut out, &chunk, shard_shape, inner_shape, &coords, itemsize)?;
        }
        Ok(out)
    }
}

/// The layout of shards of `shard_shape` under `codec`, checked by [`layout_for_shape`].
fn layout(codec: &Codec, shard_shape: &[u64]) -> Result<ShardLayout, CodecError> {
    layout_for_shape(codec, shard_shape).map_err(|e| CodecError::InvalidConfiguration {
        codec: SHARDING_CODEC.into(),
        reason: e.to_string(),
    })
}

/// `data[start..end]`, or a Corrupt error instead of a panic.
fn slice(data: &[u8], start: u64, end: u64) -> Result<&[u8], CodecError> {
    usize::try_from(start)
        .ok()
        .zip(usize::try_from(end).ok())
        .and_then(|(s, e)| data.get(s..e))
        .ok_or_else(|| {
            corrupt(format!("byte range {start}..{end} lies outside the {}-byte shard", data.len()))
        })
}

/// `size` bytes of the repeated element `fill` (`size` is a multiple of its length).
pub(super) fn repeat_fill(fill: &[u8], size: usize) -> Vec<u8> {
    if fill.iter().all(|&b| b == 0) {
        return vec![0; size];
    }
    let mut out = Vec::with_capacity(size);
    while out.len() + fill.len() <= size && !fill.is_empty() {
        out.extend_from_slice(fill);
    }
    out.resize(size, 0);
    out
}

/// Copy the C-order inner chunk `chunk` (shape `inner`) into the C-order shard
/// `out` (shape `shard`) at chunk-grid position `coords`.
fn place(
    out: &mut [u8],
    chunk: &[u8],
    shard: &[u64],
    inner: &[u64],
    coords: &[u64],
    itemsize: usize,
) -> Result<(), CodecError> {
    let Some(last) = shard.len().checked_sub(1) else {
        // 0-d: one element.
        return copy(out, 0, chunk);
    };
    // Every offset below is inside `out`, whose size is prod(shard) * itemsize and
    // fits in usize; `copy` still checks.
    let mut stride = vec![itemsize; shard.len()];
    for j in (0..last).rev() {
        stride[j] = stride[j + 1] * shard[j + 1] as usize;
    }
    let origin: usize = (0..shard.len()).map(|j| (coords[j] * inner[j]) as usize * stride[j]).sum();
    let row = inner[last] as usize * itemsize;
    let mut idx = vec![0u64; last];
    for src in chunk.chunks(row.max(1)) {
        let dst = origin + idx.iter().zip(&stride).map(|(&i, &s)| i as usize * s).sum::<usize>();
        copy(out, dst, src)?;
        // Odometer over the inner chunk's rows (all axes but the last).
        for j in (0..last).rev() {
            idx[j] += 1;
            if idx[j] < inner[j] {
                break;
            }
            idx[j] = 0;
        }
    }
    Ok(())
}

fn copy(out: &mut [u8], at: usize, src: &[u8]) -> Result<(), CodecError> {
    at.checked_add(src.len())
        .and_then(|end| out.get_mut(at..end))
        .ok_or_else(|| corrupt("inner chunk lies outside the shard"))?
        .copy_from_slice(src);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::metadata::parse_codecs;
    use crate::zarr::sharding::index::ChunkEntry;
    use serde_json::{json, Value};

    fn codecs(v: Value) -> Vec<Codec> {
        parse_codecs(&v, "codecs").unwrap()
    }

    /// A 1-d uint8 shard of `n` inner chunks of 2 elements, raw bytes inside.
    fn spec(n: u64, location: &str, fill: u8) -> ChunkSpec {
        ChunkSpec {
            codecs: codecs(json!([{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [2], "codecs": ["bytes"],
                "index_codecs": ["bytes", "crc32c"], "index_location": location}}])),
            data_type: DataType::from_name("uint8").unwrap(),
            chunk_shape: vec![2 * n],
            fill_value: vec![fill],
        }
    }

    /// Build a shard by hand from `(local, bytes)` pairs.
    fn build(s: &ChunkSpec, chunks: &[(u64, &[u8])], start: bool) -> Vec<u8> {
        let l = layout(&s.codecs[0], &s.chunk_shape).unwrap();
        let mut index = ShardIndex::new_empty(&l).unwrap();
        let mut data = Vec::new();
        let base = if start { l.index_size() } else { 0 };
        for &(local, bytes) in chunks {
            let offset = base + data.len() as u64;
            index.set(local, Some(ChunkEntry { offset, nbytes: bytes.len() as u64 })).unwrap();
            data.extend_from_slice(bytes);
        }
        let idx = index.encode(&l);
        if start {
            [idx, data].concat()
        } else {
            [data, idx].concat()
        }
    }

    #[test]
    fn hand_built_shards() {
        for (loc, start) in [("end", false), ("start", true)] {
            let s = spec(3, loc, 9);
            // Stored out of order, middle chunk absent.
            let shard = build(&s, &[(2, &[5, 6]), (0, &[1, 2])], start);
            assert_eq!(s.decode(&shard).unwrap(), [1, 2, 9, 9, 5, 6]);
            // All absent: just the index.
            let shard = build(&s, &[], start);
            assert_eq!(s.decode(&shard).unwrap(), [9; 6]);
            assert_eq!(s.fill_chunk().unwrap(), [9; 6]);
        }
    }

    #[test]
    fn corrupt_shards_are_errors() {
        let s = spec(3, "end", 0);
        let good = build(&s, &[(0, &[1, 2]), (1, &[3, 4])], false);
        assert!(s.decode(&good).is_ok());
        // Too short for the index, a flipped index byte (checksum), a wrong-sized
        // inner chunk, an entry past the end.
        assert!(matches!(s.decode(&good[..10]), Err(CodecError::Corrupt { .. })));
        let mut flipped = good.clone();
        flipped[6] ^= 1;
        assert!(matches!(s.decode(&flipped), Err(CodecError::Corrupt { .. })));
        let short = build(&s, &[(0, &[1])], false);
        assert!(matches!(s.decode(&short), Err(CodecError::WrongSize { .. })));
        let l = layout(&s.codecs[0], &s.chunk_shape).unwrap();
        let mut index = ShardIndex::new_empty(&l).unwrap();
        index.set(0, Some(ChunkEntry { offset: 0, nbytes: 1000 })).unwrap();
        let past = [vec![0u8; 4], index.encode(&l)].concat();
        assert!(matches!(s.decode(&past), Err(CodecError::Corrupt { .. })));
    }

    #[test]
    fn place_2d_and_0d() {
        // Shard (4, 6), inner (2, 3): chunk (1, 1) covers rows 2..4, cols 3..6.
        let mut out = vec![0u8; 24];
        place(&mut out, &[1, 2, 3, 4, 5, 6], &[4, 6], &[2, 3], &[1, 1], 1).unwrap();
        let mut want = vec![0u8; 24];
        want[15..18].copy_from_slice(&[1, 2, 3]);
        want[21..24].copy_from_slice(&[4, 5, 6]);
        assert_eq!(out, want);
        let mut one = vec![0u8; 2];
        place(&mut one, &[7, 8], &[], &[], &[], 2).unwrap();
        assert_eq!(one, [7, 8]);
        // Out of range is an error, not a panic.
        assert!(place(&mut out, &[1, 2, 3, 4, 5, 6], &[4, 6], &[2, 3], &[2, 1], 1).is_err());
    }

    #[test]
    fn repeat() {
        assert_eq!(repeat_fill(&[1, 2], 6), [1, 2, 1, 2, 1, 2]);
        assert_eq!(repeat_fill(&[0, 0], 4), [0; 4]);
        assert_eq!(repeat_fill(&[1, 2], 0), Vec::<u8>::new());
    }

    #[test]
    fn nesting_is_bounded() {
        let mut chain = json!(["bytes"]);
        for _ in 0..=MAX_NESTING {
            chain = json!([{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [1], "codecs": chain, "index_codecs": ["bytes"]}}]);
        }
        let s = ChunkSpec {
            codecs: codecs(chain),
            data_type: DataType::from_name("uint8").unwrap(),
            chunk_shape: vec![1],
            fill_value: vec![0],
        };
        assert!(matches!(s.check(), Err(CodecError::InvalidChain(_))));
    }
}
