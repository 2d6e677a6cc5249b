//! The `sharding_indexed` format, one job per file. Here: detection of arrays we can
//! present unsharded, and the resulting shard layout (shapes, index size and position)
//! derived from the codec's configuration. [`index`]: the shard index (decode, check,
//! encode). [`build`]: assembling a shard object for the write path. Decoding a shard
//! is a codec like the others, in `zarr::codecs::sharding`, which uses these.

pub mod build;
pub mod index;

use std::borrow::Cow;

use serde_json::Value;
use thiserror::Error;

use crate::zarr::chunk_grid::{ChunkGrid, RectilinearGrid};
use crate::zarr::json::u64_list;
use crate::zarr::metadata::{parse_codecs, ArrayMetadata, Codec};

/// Largest shard index we accept: 2^26 entries is a 1 GiB index, far beyond any
/// sane configuration, and keeps every later allocation bounded.
pub const MAX_INDEX_ENTRIES: u64 = 1 << 26;

pub const SHARDING_CODEC: &str = "sharding_indexed";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexLocation {
    Start,
    End,
}

/// Everything needed to find inner chunks in a shard of one array.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardLayout {
    /// The array's chunk grid shape; every shard object covers this much.
    pub shard_shape: Vec<u64>,
    pub inner_chunk_shape: Vec<u64>,
    /// `shard_shape / inner_chunk_shape`, per dimension.
    pub chunks_per_shard: Vec<u64>,
    /// Product of `chunks_per_shard`, at most [`MAX_INDEX_ENTRIES`].
    pub n_entries: u64,
    pub index_location: IndexLocation,
    pub index_has_crc32c: bool,
    pub inner_codecs: Vec<Codec>,
    pub index_codecs: Vec<Codec>,
}

impl ShardLayout {
    /// The same layout for shards of another shape; `None` if the inner chunk does not
    /// divide it ([`shard_grid`] checked that it divides every shard of its grid).
    fn with_shard_shape(&self, shard_shape: Vec<u64>) -> Option<ShardLayout> {
        let (chunks_per_shard, n_entries) = entries(&shard_shape, &self.inner_chunk_shape).ok()?;
        Some(ShardLayout { shard_shape, chunks_per_shard, n_entries, ..self.clone() })
    }

    /// Bytes of the encoded index: 16 per entry, plus 4 for the checksum.
    /// Saturates (only reachable with a hand-built layout past the cap).
    pub fn index_size(&self) -> u64 {
        let crc = if self.index_has_crc32c { 4 } else { 0 };
        self.n_entries.saturating_mul(16).saturating_add(crc)
    }
}

/// A problem inside the `sharding_indexed` configuration.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigProblem {
    #[error("missing configuration")]
    MissingConfiguration,
    #[error("missing or invalid chunk_shape")]
    InvalidChunkShape,
    #[error(
        "array shape has rank {shape}, chunk grid has rank {grid}, or the grid has a zero size"
    )]
    InvalidGrid { shape: usize, grid: usize },
    #[error("inner chunk_shape has rank {inner}, shard shape has rank {shard}")]
    RankMismatch { shard: usize, inner: usize },
    #[error("inner chunk size {inner} does not divide shard size {shard} in dimension {dim}")]
    NotDivisible { dim: usize, shard: u64, inner: u64 },
    #[error("missing or invalid codecs")]
    InvalidCodecs,
    #[error("empty inner codec chain")]
    EmptyCodecs,
    #[error("missing or invalid index_codecs")]
    InvalidIndexCodecs,
    #[error("invalid index_location {0}")]
    InvalidIndexLocation(String),
}

/// Why an array is passed through untouched (logged by the caller).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NotUnpackable {
    #[error("not sharded")]
    NotSharded,
    #[error("array->array codec `{0}` precedes sharding")]
    ArrayToArrayBefore(String),
    #[error("codec `{0}` after sharding wraps whole shards")]
    BytesToBytesAfter(String),
    #[error("chunk grid `{0}` is unknown")]
    IrregularGrid(String),
    #[error("shards differ in shape")]
    VaryingShards,
    #[error("bad sharding configuration: {0}")]
    BadConfig(ConfigProblem),
    #[error("unsupported shard index codecs: {0}")]
    UnsupportedIndexCodecs(String),
    #[error("shard index would have {0} entries (limit {MAX_INDEX_ENTRIES})")]
    TooManyEntries(u64),
}

/// A sharded array's shards: where they lie and how each is laid out. On a rectilinear shard
/// grid shards differ in shape (and so in index size); every one holds whole inner chunks.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardGrid {
    /// The shard boundaries (a regular grid's too: one length per dimension).
    pub bounds: RectilinearGrid,
    /// The layout of the largest shard; [`layout_of`](Self::layout_of) gives each shard's.
    pub largest: ShardLayout,
}

impl ShardGrid {
    /// The layout of the shard at `shard_coords`; `None` outside the grid.
    pub fn layout_of(&self, shard_coords: &[u64]) -> Option<Cow<'_, ShardLayout>> {
        let shape = self.bounds.chunk_shape(shard_coords)?;
        if shape == self.largest.shard_shape {
            return Some(Cow::Borrowed(&self.largest));
        }
        self.largest.with_shard_shape(shape).map(Cow::Owned)
    }
}

/// Decide whether `meta` is a sharded array we can unpack, and describe its shards. A
/// regular shard grid, or a rectilinear one whose every shard length the inner chunk divides.
pub fn shard_grid(meta: &ArrayMetadata) -> Result<ShardGrid, NotUnpackable> {
    let pos = meta
        .codecs
        .iter()
        .position(|c| c.name == SHARDING_CODEC)
        .ok_or(NotUnpackable::NotSharded)?;
    let bounds = meta
        .chunk_grid
        .boundaries(&meta.shape)
        .ok_or_else(|| NotUnpackable::IrregularGrid(meta.chunk_grid.name().to_string()))?;
    // Anything before would change the coordinates the index is addressed by;
    // anything after encodes whole shards, so inner chunks are not byte ranges.
    if let Some(c) = meta.codecs[..pos].first() {
        return Err(NotUnpackable::ArrayToArrayBefore(c.name.clone()));
    }
    if let Some(c) = meta.codecs.get(pos + 1) {
        return Err(NotUnpackable::BytesToBytesAfter(c.name.clone()));
    }
    // Parsed documents guarantee this; re-checked because the fields are public and
    // every later division relies on it.
    let (grid, has_zero) = match &meta.chunk_grid {
        ChunkGrid::Regular(cs) => (cs.len(), cs.contains(&0)),
        _ => (bounds.ndim(), false),
    };
    let shape = meta.shape.len();
    if grid != shape || has_zero {
        return Err(NotUnpackable::BadConfig(ConfigProblem::InvalidGrid { shape, grid }));
    }
    let largest = layout_for_shape(&meta.codecs[pos], &bounds.largest_chunk())?;
    // The largest shard's layout checked its lengths; every other length must hold whole
    // inner chunks too.
    for (dim, &inner) in largest.inner_chunk_shape.iter().enumerate() {
        if let Some(shard) = bounds.dim(dim).lengths().into_iter().find(|l| l % inner != 0) {
            return Err(NotUnpackable::BadConfig(ConfigProblem::NotDivisible {
                dim,
                shard,
                inner,
            }));
        }
    }
    Ok(ShardGrid { bounds, largest })
}

/// The layout of a sharded array whose shards all have one shape (a regular grid, or a
/// rectilinear one with one length per dimension).
pub fn shard_layout(meta: &ArrayMetadata) -> Result<ShardLayout, NotUnpackable> {
    let grid = shard_grid(meta)?;
    match grid.bounds.uniform_shape() {
        Some(_) => Ok(grid.largest),
        None => Err(NotUnpackable::VaryingShards),
    }
}

/// The layout of shards of `shard_shape` under `codec`, a `sharding_indexed` entry (its
/// configuration checked).
pub fn layout_for_shape(codec: &Codec, shard_shape: &[u64]) -> Result<ShardLayout, NotUnpackable> {
    let bad = NotUnpackable::BadConfig;
    let config = &codec.configuration;
    if config.is_empty() {
        return Err(bad(ConfigProblem::MissingConfiguration));
    }
    let inner_chunk_shape = config
        .get("chunk_shape")
        .and_then(|v| u64_list(v, "chunk_shape").ok())
        .filter(|s| !s.contains(&0))
        .ok_or(bad(ConfigProblem::InvalidChunkShape))?;
    if inner_chunk_shape.len() != shard_shape.len() {
        return Err(bad(ConfigProblem::RankMismatch {
            shard: shard_shape.len(),
            inner: inner_chunk_shape.len(),
        }));
    }
    let (chunks_per_shard, n_entries) = entries(shard_shape, &inner_chunk_shape)?;

    let inner_codecs = config
        .get("codecs")
        .and_then(|v| parse_codecs(v, "codecs").ok())
        .ok_or(bad(ConfigProblem::InvalidCodecs))?;
    if inner_codecs.is_empty() {
        return Err(bad(ConfigProblem::EmptyCodecs));
    }
    let index_codecs = config
        .get("index_codecs")
        .and_then(|v| parse_codecs(v, "index_codecs").ok())
        .ok_or(bad(ConfigProblem::InvalidIndexCodecs))?;
    let index_has_crc32c = supported_index_codecs(&index_codecs)?;

    let index_location = match config.get("index_location") {
        None => IndexLocation::End,
        Some(Value::String(s)) if s == "end" => IndexLocation::End,
        Some(Value::String(s)) if s == "start" => IndexLocation::Start,
        Some(other) => return Err(bad(ConfigProblem::InvalidIndexLocation(other.to_string()))),
    };

    Ok(ShardLayout {
        shard_shape: shard_shape.to_vec(),
        inner_chunk_shape,
        chunks_per_shard,
        n_entries,
        index_location,
        index_has_crc32c,
        inner_codecs,
        index_codecs,
    })
}

/// Inner chunks per shard dimension, and their product (at most [`MAX_INDEX_ENTRIES`]).
fn entries(shard_shape: &[u64], inner: &[u64]) -> Result<(Vec<u64>, u64), NotUnpackable> {
    let mut chunks_per_shard = Vec::with_capacity(shard_shape.len());
    let mut n_entries: u64 = 1;
    for (dim, (&shard, &inner)) in shard_shape.iter().zip(inner).enumerate() {
        if shard % inner != 0 {
            return Err(NotUnpackable::BadConfig(ConfigProblem::NotDivisible {
                dim,
                shard,
                inner,
            }));
        }
        let per = shard / inner;
        chunks_per_shard.push(per);
        // Saturate so an overflowing product is reported as "too many" too.
        n_entries = n_entries.saturating_mul(per);
    }
    if n_entries > MAX_INDEX_ENTRIES {
        return Err(NotUnpackable::TooManyEntries(n_entries));
    }
    Ok((chunks_per_shard, n_entries))
}

/// We decode the index ourselves, so only `bytes` (little endian) optionally
/// followed by `crc32c` is accepted. Returns whether the checksum is present.
fn supported_index_codecs(codecs: &[Codec]) -> Result<bool, NotUnpackable> {
    let names: Vec<&str> = codecs.iter().map(|c| c.name.as_str()).collect();
    let unsupported = || NotUnpackable::UnsupportedIndexCodecs(names.join(","));
    let has_crc = match names.as_slice() {
        ["bytes"] => false,
        ["bytes", "crc32c"] => true,
        _ => return Err(unsupported()),
    };
    match codecs[0].configuration.get("endian") {
        None => {}
        Some(Value::String(e)) if e == "little" => {}
        Some(_) => return Err(unsupported()),
    }
    Ok(has_crc)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::zarr::metadata::tests::{fixture, FIXTURE};
    use crate::zarr::metadata::{parse_node, NodeMetadata};
    use serde_json::{json, Value};

    /// Fixture document with `edit` applied to its JSON before parsing.
    pub(crate) fn meta_with(edit: impl FnOnce(&mut Value)) -> ArrayMetadata {
        let mut v: Value = serde_json::from_str(FIXTURE).unwrap();
        edit(&mut v);
        match parse_node(v).unwrap() {
            NodeMetadata::Array(a) => a,
            NodeMetadata::Group(_) => panic!(),
        }
    }

    fn sharding_config(v: &mut Value) -> &mut serde_json::Map<String, Value> {
        v["codecs"][0]["configuration"].as_object_mut().unwrap()
    }

    #[test]
    fn fixture_layout() {
        let l = shard_layout(&fixture()).unwrap();
        assert_eq!(l.shard_shape, vec![50, 50]);
        assert_eq!(l.inner_chunk_shape, vec![10, 10]);
        assert_eq!(l.chunks_per_shard, vec![5, 5]);
        assert_eq!(l.n_entries, 25);
        assert_eq!(l.index_location, IndexLocation::End);
        assert!(l.index_has_crc32c);
        assert_eq!(l.index_size(), 25 * 16 + 4);
        let names: Vec<_> = l.inner_codecs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["bytes", "zstd"]);
    }

    #[test]
    fn variants_that_unpack() {
        let m = meta_with(|v| {
            let c = sharding_config(v);
            c.remove("index_location"); // default is end
            c.insert("index_codecs".into(), json!(["bytes"])); // no crc, no endian
        });
        let l = shard_layout(&m).unwrap();
        assert_eq!(l.index_location, IndexLocation::End);
        assert!(!l.index_has_crc32c);
        assert_eq!(l.index_size(), 25 * 16);

        let m = meta_with(|v| {
            sharding_config(v).insert("index_location".into(), json!("start"));
        });
        assert_eq!(shard_layout(&m).unwrap().index_location, IndexLocation::Start);

        // Nested sharding: the inner chain is presented as is.
        let m = meta_with(|v| {
            sharding_config(v).insert(
                "codecs".into(),
                json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [5, 5],
                    "codecs": ["bytes"], "index_codecs": ["bytes", "crc32c"]}}]),
            );
        });
        assert_eq!(shard_layout(&m).unwrap().inner_codecs[0].name, "sharding_indexed");

        // 0-d arrays have a single entry.
        let m = meta_with(|v| {
            v["shape"] = json!([]);
            v["chunk_grid"]["configuration"]["chunk_shape"] = json!([]);
            sharding_config(v).insert("chunk_shape".into(), json!([]));
        });
        let l = shard_layout(&m).unwrap();
        assert_eq!(l.n_entries, 1);
        assert_eq!(l.index_size(), 20);
    }

    fn reason(edit: impl FnOnce(&mut Value)) -> NotUnpackable {
        shard_layout(&meta_with(edit)).unwrap_err()
    }

    #[test]
    fn not_unpackable_cases() {
        use ConfigProblem::*;
        use NotUnpackable::*;
        assert_eq!(reason(|v| v["codecs"] = json!(["bytes", "zstd"])), NotSharded);
        assert_eq!(reason(|v| v["codecs"] = json!([])), NotSharded);
        assert_eq!(
            reason(|v| v["chunk_grid"] = json!({"name": "spiral", "configuration": {}})),
            IrregularGrid("spiral".into())
        );
        assert_eq!(
            reason(|v| {
                let s = v["codecs"][0].clone();
                v["codecs"] = json!([{"name": "transpose", "configuration": {"order": [1, 0]}}, s]);
            }),
            ArrayToArrayBefore("transpose".into())
        );
        assert_eq!(
            reason(|v| v["codecs"].as_array_mut().unwrap().push(json!({"name": "crc32c"}))),
            BytesToBytesAfter("crc32c".into())
        );
        assert_eq!(
            reason(|v| v["codecs"].as_array_mut().unwrap().push(json!("zstd"))),
            BytesToBytesAfter("zstd".into())
        );
        assert_eq!(
            reason(|v| v["codecs"][0] = json!("sharding_indexed")),
            BadConfig(MissingConfiguration)
        );
        assert_eq!(
            reason(|v| {
                sharding_config(v).remove("chunk_shape");
            }),
            BadConfig(InvalidChunkShape)
        );
        assert_eq!(
            reason(|v| {
                sharding_config(v).insert("chunk_shape".into(), json!([0, 10]));
            }),
            BadConfig(InvalidChunkShape)
        );
        assert_eq!(
            reason(|v| {
                sharding_config(v).insert("chunk_shape".into(), json!([10]));
            }),
            BadConfig(RankMismatch { shard: 2, inner: 1 })
        );
        assert_eq!(
            reason(|v| {
                sharding_config(v).insert("chunk_shape".into(), json!([10, 15]));
            }),
            BadConfig(NotDivisible { dim: 1, shard: 50, inner: 15 })
        );
        assert_eq!(
            reason(|v| {
                sharding_config(v).remove("codecs");
            }),
            BadConfig(InvalidCodecs)
        );
        assert_eq!(
            reason(|v| {
                sharding_config(v).insert("codecs".into(), json!([]));
            }),
            BadConfig(EmptyCodecs)
        );
        assert_eq!(
            reason(|v| {
                sharding_config(v).remove("index_codecs");
            }),
            BadConfig(InvalidIndexCodecs)
        );
        assert_eq!(
            reason(|v| {
                sharding_config(v).insert("index_location".into(), json!("middle"));
            }),
            BadConfig(InvalidIndexLocation("\"middle\"".into()))
        );
        for ic in [
            json!(["bytes", "zstd"]),
            json!(["bytes", "crc32c", "crc32c"]),
            json!(["crc32c", "bytes"]),
            json!([]),
            json!([{"name": "bytes", "configuration": {"endian": "big"}}, "crc32c"]),
        ] {
            let ic2 = ic.clone();
            assert!(
                matches!(
                    reason(|v| {
                        sharding_config(v).insert("index_codecs".into(), ic2);
                    }),
                    UnsupportedIndexCodecs(_)
                ),
                "{ic}"
            );
        }
    }

    #[test]
    fn hand_built_bad_grid_refused() {
        let mut m = fixture();
        m.chunk_grid = ChunkGrid::Regular(vec![0, 50]);
        assert_eq!(
            shard_layout(&m),
            Err(NotUnpackable::BadConfig(ConfigProblem::InvalidGrid { shape: 2, grid: 2 }))
        );
        m.chunk_grid = ChunkGrid::Regular(vec![50]);
        assert_eq!(
            shard_layout(&m),
            Err(NotUnpackable::BadConfig(ConfigProblem::InvalidGrid { shape: 2, grid: 1 }))
        );
    }

    #[test]
    fn huge_index_refused() {
        // 2^30 entries per shard.
        let r = reason(|v| {
            v["shape"] = json!([1u64 << 40, 1u64 << 40]);
            v["chunk_grid"]["configuration"]["chunk_shape"] = json!([1u64 << 15, 1u64 << 15]);
            sharding_config(v).insert("chunk_shape".into(), json!([1, 1]));
        });
        assert_eq!(r, NotUnpackable::TooManyEntries(1 << 30));
        // A product overflowing u64 is refused, not wrapped.
        let r = reason(|v| {
            v["shape"] = json!([u64::MAX, u64::MAX]);
            v["chunk_grid"]["configuration"]["chunk_shape"] = json!([u64::MAX, u64::MAX]);
            sharding_config(v).insert("chunk_shape".into(), json!([1, 1]));
        });
        assert_eq!(r, NotUnpackable::TooManyEntries(u64::MAX));
        // Exactly at the cap is fine.
        let m = meta_with(|v| {
            v["chunk_grid"]["configuration"]["chunk_shape"] = json!([1u64 << 13, 1u64 << 13]);
            sharding_config(v).insert("chunk_shape".into(), json!([1, 1]));
        });
        assert_eq!(shard_layout(&m).unwrap().n_entries, MAX_INDEX_ENTRIES);
    }

    /// A rectilinear shard grid (as zarr-python 3.4 writes it): every shard length holds
    /// whole inner chunks, and each shard's index has its own number of entries.
    #[test]
    fn rectilinear_shard_grid() {
        let rect = |shapes: Value| {
            move |v: &mut Value| {
                v["chunk_grid"] = json!({"name": "rectilinear",
                    "configuration": {"kind": "inline", "chunk_shapes": shapes}});
            }
        };
        let g = shard_grid(&meta_with(rect(json!([[40, 60], [30, 40, 30]])))).unwrap();
        assert_eq!(g.bounds.counts(), [2, 3]);
        assert_eq!(g.largest.shard_shape, [60, 40]);
        assert_eq!(g.largest.n_entries, 24);
        let small = g.layout_of(&[0, 0]).unwrap();
        assert_eq!((small.shard_shape.as_slice(), small.n_entries), ([40, 30].as_slice(), 12));
        assert_eq!(small.chunks_per_shard, [4, 3]);
        assert_eq!(small.index_size(), 12 * 16 + 4);
        assert!(matches!(g.layout_of(&[1, 1]).unwrap(), Cow::Borrowed(_)));
        assert_eq!(g.layout_of(&[2, 0]), None);
        // An inner chunk that does not divide some shard length: not unpacked.
        assert_eq!(
            reason(rect(json!([[40, 60], [30, 45, 25]]))),
            NotUnpackable::BadConfig(ConfigProblem::NotDivisible { dim: 1, shard: 45, inner: 10 })
        );
        // The largest shard decides the index size cap.
        let huge = reason(|v| {
            rect(json!([[10, 8192], [16384]]))(v);
            v["shape"] = json!([8202, 16384]);
            sharding_config(v).insert("chunk_shape".into(), json!([1, 1]));
        });
        assert_eq!(huge, NotUnpackable::TooManyEntries(1 << 27));
        // Regular grids are one length per dimension.
        let g = shard_grid(&fixture()).unwrap();
        assert_eq!(g.bounds.uniform_shape(), Some(vec![50, 50]));
        assert!(matches!(g.layout_of(&[1, 1]).unwrap(), Cow::Borrowed(_)));
    }
}
