//! The `sharding_indexed` format, one job per file. Here: detection of arrays we can
//! present unsharded, and the resulting shard layout (shapes, index size and position)
//! derived from the codec's configuration. [`index`]: the shard index (decode, check,
//! encode). [`build`]: assembling a shard object for the write path. Decoding a shard
//! is a codec like the others, in `zarr::codecs::sharding`, which uses these.

pub mod build;
pub mod index;

use serde_json::Value;
use thiserror::Error;

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
    #[error("chunk grid `{0}` is not regular")]
    IrregularGrid(String),
    #[error("bad sharding configuration: {0}")]
    BadConfig(ConfigProblem),
    #[error("unsupported shard index codecs: {0}")]
    UnsupportedIndexCodecs(String),
    #[error("shard index would have {0} entries (limit {MAX_INDEX_ENTRIES})")]
    TooManyEntries(u64),
}

/// Decide whether `meta` is a sharded array we can unpack, and describe its shards.
pub fn shard_layout(meta: &ArrayMetadata) -> Result<ShardLayout, NotUnpackable> {
    let pos = meta
        .codecs
        .iter()
        .position(|c| c.name == SHARDING_CODEC)
        .ok_or(NotUnpackable::NotSharded)?;
    let shard_shape = meta
        .chunk_shape
        .clone()
        .ok_or_else(|| NotUnpackable::IrregularGrid(meta.chunk_grid_name.clone()))?;
    // Anything before would change the coordinates the index is addressed by;
    // anything after encodes whole shards, so inner chunks are not byte ranges.
    if let Some(c) = meta.codecs[..pos].first() {
        return Err(NotUnpackable::ArrayToArrayBefore(c.name.clone()));
    }
    if let Some(c) = meta.codecs.get(pos + 1) {
        return Err(NotUnpackable::BytesToBytesAfter(c.name.clone()));
    }
    let bad = NotUnpackable::BadConfig;
    // Parsed documents guarantee this; re-checked because the fields are public and
    // every later division relies on it.
    if shard_shape.len() != meta.shape.len() || shard_shape.contains(&0) {
        return Err(bad(ConfigProblem::InvalidGrid {
            shape: meta.shape.len(),
            grid: shard_shape.len(),
        }));
    }
    let config = &meta.codecs[pos].configuration;
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
    let mut chunks_per_shard = Vec::with_capacity(shard_shape.len());
    let mut n_entries: u64 = 1;
    for (dim, (&shard, &inner)) in shard_shape.iter().zip(&inner_chunk_shape).enumerate() {
        if shard % inner != 0 {
            return Err(bad(ConfigProblem::NotDivisible { dim, shard, inner }));
        }
        let per = shard / inner;
        chunks_per_shard.push(per);
        // Saturate so an overflowing product is reported as "too many" too.
        n_entries = n_entries.saturating_mul(per);
    }
    if n_entries > MAX_INDEX_ENTRIES {
        return Err(NotUnpackable::TooManyEntries(n_entries));
    }

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
        shard_shape,
        inner_chunk_shape,
        chunks_per_shard,
        n_entries,
        index_location,
        index_has_crc32c,
        inner_codecs,
        index_codecs,
    })
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
            reason(|v| v["chunk_grid"] = json!({"name": "rectilinear", "configuration": {}})),
            IrregularGrid("rectilinear".into())
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
        m.chunk_shape = Some(vec![0, 50]);
        assert_eq!(
            shard_layout(&m),
            Err(NotUnpackable::BadConfig(ConfigProblem::InvalidGrid { shape: 2, grid: 2 }))
        );
        m.chunk_shape = Some(vec![50]);
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
}
