//! Chunk grids of v3 arrays: `regular` (one chunk shape) and `rectilinear` (zarr-extensions
//! `chunk-grids/rectilinear`: per dimension a sequence of chunk edge lengths). A rectilinear
//! dimension is kept as runs of equal lengths, never expanded: a bare step or a `[length,
//! count]` pair may stand for very many chunks, and lookups stay a binary search over runs.
//!
//! Spec facts (checked against zarr-python 3.4, which writes these grids): every length is a
//! positive integer; per dimension either a bare integer (a step repeated until it covers the
//! extent) or a list of lengths and `[length, count]` pairs whose sum is at least the extent;
//! chunks may overhang the extent (the last one is encoded at its full length, as at a regular
//! grid's edge) and whole chunks past the extent are allowed but not part of the grid.

use serde_json::{Map, Value};

use crate::zarr::error::{GridError, MetadataError};
use crate::zarr::json::{name_and_config, u64_list, Named};

/// An array's chunk grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkGrid {
    /// `regular`: every chunk has this shape (those at the far edge overhang the array).
    Regular(Vec<u64>),
    Rectilinear(RectilinearGrid),
    /// A grid extension this crate does not know, by name: arrays with it are passed through.
    Other(String),
}

impl ChunkGrid {
    /// Parse the `chunk_grid` member of an array document of this `shape`.
    pub fn parse(v: &Value, shape: &[u64]) -> Result<ChunkGrid, MetadataError> {
        let Named { name, config } = name_and_config(v, "chunk_grid")?;
        match name.as_str() {
            "regular" => {
                let field = "chunk_grid.configuration.chunk_shape";
                let cs = config
                    .and_then(|c| c.get("chunk_shape"))
                    .ok_or(MetadataError::MissingField(field))?;
                let cs = u64_list(cs, field)?;
                if cs.contains(&0) {
                    return Err(MetadataError::InvalidField {
                        field,
                        expected: "positive integers",
                    });
                }
                if cs.len() != shape.len() {
                    return Err(MetadataError::RankMismatch {
                        shape: shape.len(),
                        chunk_shape: cs.len(),
                    });
                }
                Ok(ChunkGrid::Regular(cs))
            }
            "rectilinear" => Ok(ChunkGrid::Rectilinear(RectilinearGrid::parse(config, shape)?)),
            _ => Ok(ChunkGrid::Other(name)),
        }
    }

    /// The grid's name in metadata.
    pub fn name(&self) -> &str {
        match self {
            ChunkGrid::Regular(_) => "regular",
            ChunkGrid::Rectilinear(_) => "rectilinear",
            ChunkGrid::Other(name) => name,
        }
    }

    /// The chunk shape, if every chunk has the same one: a `regular` grid, or a rectilinear
    /// grid with one length per dimension (the same chunks, encoded the same way).
    pub fn regular_shape(&self) -> Option<Vec<u64>> {
        match self {
            ChunkGrid::Regular(cs) => Some(cs.clone()),
            ChunkGrid::Rectilinear(g) => g.uniform_shape(),
            ChunkGrid::Other(_) => None,
        }
    }

    /// A rectilinear grid whose chunks differ in shape (one no regular grid describes).
    pub fn truly_rectilinear(&self) -> Option<&RectilinearGrid> {
        match self {
            ChunkGrid::Rectilinear(g) if g.uniform_shape().is_none() => Some(g),
            _ => None,
        }
    }

    /// The grid's boundaries over an array of `shape`, rectilinear or not; `None` for an
    /// unknown grid.
    pub fn boundaries(&self, shape: &[u64]) -> Option<RectilinearGrid> {
        match self {
            ChunkGrid::Regular(cs) => Some(RectilinearGrid::regular(shape, cs)),
            ChunkGrid::Rectilinear(g) => Some(g.clone()),
            ChunkGrid::Other(_) => None,
        }
    }
}

/// A rectilinear grid over one array: the chunk boundaries of every dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RectilinearGrid {
    dims: Vec<DimEdges>,
}

/// The chunks along one dimension that overlap the array (`0..extent`), as runs of equal
/// lengths in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DimEdges {
    runs: Vec<Run>,
    /// Chunks overlapping the array: 0 for an empty dimension.
    count: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    len: u64,
    count: u64,
    /// Index of the run's first chunk.
    first: u64,
    /// Offset of the run's first chunk.
    start: u64,
}

impl Run {
    /// Where the run ends. Every kept chunk starts inside the array, but the last may reach
    /// past `u64::MAX`: saturated, which no element offset reaches.
    fn end(&self) -> u64 {
        self.start.saturating_add(self.len.saturating_mul(self.count))
    }
}

impl RectilinearGrid {
    /// Parse a `rectilinear` grid's configuration for an array of `shape`.
    pub fn parse(
        config: Option<&Map<String, Value>>,
        shape: &[u64],
    ) -> Result<RectilinearGrid, MetadataError> {
        let config = config.ok_or(MetadataError::MissingField("chunk_grid.configuration"))?;
        match config.get("kind") {
            Some(Value::String(k)) if k == "inline" => {}
            Some(other) => return Err(GridError::Kind(other.to_string()).into()),
            None => return Err(MetadataError::MissingField("chunk_grid.configuration.kind")),
        }
        let Some(Value::Array(specs)) = config.get("chunk_shapes") else {
            return Err(MetadataError::InvalidField {
                field: "chunk_grid.configuration.chunk_shapes",
                expected: "an array with one entry per dimension",
            });
        };
        if specs.len() != shape.len() {
            return Err(GridError::Rank { grid: specs.len(), shape: shape.len() }.into());
        }
        let dims = specs
            .iter()
            .zip(shape)
            .enumerate()
            .map(|(dim, (spec, &extent))| DimEdges::parse(dim, spec, extent))
            .collect::<Result<Vec<_>, GridError>>()?;
        Ok(RectilinearGrid { dims })
    }

    /// A regular grid's boundaries: chunks of `chunk_shape` over `shape` (lengths of 0, which
    /// parsing refuses, count as 1).
    pub fn regular(shape: &[u64], chunk_shape: &[u64]) -> RectilinearGrid {
        let dims = shape.iter().zip(chunk_shape).map(|(&e, &c)| DimEdges::step(c.max(1), e));
        RectilinearGrid { dims: dims.collect() }
    }

    pub fn ndim(&self) -> usize {
        self.dims.len()
    }

    pub fn dim(&self, d: usize) -> &DimEdges {
        &self.dims[d]
    }

    /// Chunks per dimension (the chunk tree's grid).
    pub fn counts(&self) -> Vec<u64> {
        self.dims.iter().map(|d| d.count).collect()
    }

    /// True if `coords` has the grid's rank and names a chunk of it.
    pub fn contains(&self, coords: &[u64]) -> bool {
        coords.len() == self.dims.len() && coords.iter().zip(&self.dims).all(|(&c, d)| c < d.count)
    }

    /// The shape a chunk is encoded at (its full edge lengths, also where it overhangs the
    /// array); `None` outside the grid.
    pub fn chunk_shape(&self, coords: &[u64]) -> Option<Vec<u64>> {
        self.contains(coords)
            .then(|| self.dims.iter().zip(coords).map(|(d, &c)| d.len(c)).collect())
    }

    /// The array coordinates of a chunk's first element; `None` outside the grid.
    pub fn chunk_origin(&self, coords: &[u64]) -> Option<Vec<u64>> {
        self.contains(coords)
            .then(|| self.dims.iter().zip(coords).map(|(d, &c)| d.start(c)).collect())
    }

    /// The shape shared by every chunk, if there is one.
    pub fn uniform_shape(&self) -> Option<Vec<u64>> {
        self.dims.iter().map(DimEdges::uniform_len).collect()
    }

    /// Per dimension the longest chunk (the shape no chunk exceeds).
    pub fn largest_chunk(&self) -> Vec<u64> {
        self.dims.iter().map(DimEdges::max_len).collect()
    }
}

impl DimEdges {
    /// One dimension of a `chunk_shapes` entry over `extent`.
    fn parse(dim: usize, spec: &Value, extent: u64) -> Result<DimEdges, GridError> {
        let bad = |v: &Value| GridError::BadLength { dim, value: v.to_string() };
        let positive = |v: &Value| v.as_u64().filter(|&n| n > 0).ok_or_else(|| bad(v));
        let items = match spec {
            Value::Array(items) => items,
            step => return Ok(DimEdges::step(positive(step)?, extent)),
        };
        if items.is_empty() {
            return Err(GridError::NoLengths { dim });
        }
        let mut edges = DimEdges { runs: Vec::new(), count: 0 };
        // Offset where the next chunk starts, while it is still inside the array.
        let mut end = 0u64;
        for item in items {
            let (len, count) = match item {
                Value::Array(pair) if pair.len() == 2 => {
                    match (pair[0].as_u64(), pair[1].as_u64()) {
                        (Some(len), Some(count)) if len > 0 && count > 0 => (len, count),
                        _ => return Err(bad(item)),
                    }
                }
                Value::Array(_) => return Err(bad(item)),
                len => (positive(len)?, 1),
            };
            // Chunks past the array are allowed and ignored (every entry is still checked);
            // an empty array keeps its first chunk so its lengths stay known.
            let covered = end >= extent && !edges.runs.is_empty();
            if !covered {
                let needed = (extent - end.min(extent)).div_ceil(len).max(1);
                edges.push(len, count.min(needed));
                end = edges.end();
            }
        }
        if end < extent {
            return Err(GridError::Short { dim, sum: end, extent });
        }
        edges.count = if extent == 0 { 0 } else { edges.runs.iter().map(|r| r.count).sum() };
        Ok(edges)
    }

    /// Chunks of `len` repeated until they cover `extent`.
    fn step(len: u64, extent: u64) -> DimEdges {
        let count = extent.div_ceil(len);
        let run = Run { len, count: count.max(1), first: 0, start: 0 };
        DimEdges { runs: vec![run], count }
    }

    /// Append `count` chunks of `len` (merged into the last run when equal). Only called
    /// while the chunks so far end before the extent, so offsets stay below it plus one chunk.
    fn push(&mut self, len: u64, count: u64) {
        match self.runs.last_mut() {
            Some(last) if last.len == len => last.count += count,
            _ => {
                let (first, start) = match self.runs.last() {
                    Some(r) => (r.first + r.count, r.end()),
                    None => (0, 0),
                };
                self.runs.push(Run { len, count, first, start });
            }
        }
    }

    /// Where the kept chunks end.
    fn end(&self) -> u64 {
        self.runs.last().map_or(0, Run::end)
    }

    /// Chunks overlapping the array.
    pub fn count(&self) -> u64 {
        self.count
    }

    fn run_of(&self, chunk: u64) -> &Run {
        let i = self.runs.partition_point(|r| r.first + r.count <= chunk);
        &self.runs[i.min(self.runs.len() - 1)]
    }

    /// The length chunk `chunk` is encoded at (callers keep `chunk` below `count`).
    pub fn len(&self, chunk: u64) -> u64 {
        self.run_of(chunk).len
    }

    /// The offset of chunk `chunk`'s first element (callers keep `chunk` below `count`).
    pub fn start(&self, chunk: u64) -> u64 {
        let r = self.run_of(chunk);
        r.start + (chunk - r.first) * r.len
    }

    /// The chunk holding element `offset`; `None` past the chunks of the array.
    pub fn chunk_at(&self, offset: u64) -> Option<u64> {
        if self.count == 0 || offset >= self.end() {
            return None;
        }
        let i = self.runs.partition_point(|r| r.end() <= offset);
        let r = &self.runs[i];
        Some(r.first + (offset - r.start) / r.len)
    }

    /// The chunks overlapping elements `range` (clipped to the grid).
    pub fn chunks_over(&self, range: std::ops::Range<u64>) -> std::ops::Range<u64> {
        if range.is_empty() {
            return 0..0;
        }
        let Some(first) = self.chunk_at(range.start) else { return 0..0 };
        let last = self.chunk_at(range.end - 1).unwrap_or(self.count.saturating_sub(1));
        first..(last + 1).min(self.count)
    }

    /// The single length of every chunk, if they share one.
    pub fn uniform_len(&self) -> Option<u64> {
        match self.runs.as_slice() {
            [run] => Some(run.len),
            _ => None,
        }
    }

    /// The longest chunk.
    pub fn max_len(&self) -> u64 {
        self.runs.iter().map(|r| r.len).max().unwrap_or(1)
    }

    /// The distinct lengths, in order of first appearance.
    pub fn lengths(&self) -> Vec<u64> {
        let mut out: Vec<u64> = Vec::new();
        for r in &self.runs {
            if !out.contains(&r.len) {
                out.push(r.len);
            }
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::zarr::metadata::{parse_zarr_json, ArrayMetadata, NodeMetadata};
    use serde_json::json;
    use std::path::PathBuf;

    /// tests/fixtures/rectilinear: arrays zarr-python 3.4 wrote (see make_rectilinear.py).
    pub(crate) fn fixtures() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rectilinear")
    }

    /// Every file of the fixture store under `under` (`""` for all): key relative to the
    /// store, and content.
    pub(crate) fn fixture_files(under: &str) -> Vec<(String, Vec<u8>)> {
        let root = fixtures().join("store");
        let mut out = Vec::new();
        let mut dirs = vec![root.join(under)];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    let key = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
                    out.push((key, std::fs::read(&path).unwrap()));
                }
            }
        }
        out
    }

    /// The metadata of fixture array `name`.
    pub(crate) fn fixture_meta(name: &str) -> ArrayMetadata {
        let doc = std::fs::read(fixtures().join("store").join(name).join("zarr.json")).unwrap();
        match parse_zarr_json(&doc).unwrap() {
            NodeMetadata::Array(a) => a,
            NodeMetadata::Group(_) => panic!("{name} is an array"),
        }
    }

    fn grid(shapes: Value, shape: &[u64]) -> Result<RectilinearGrid, MetadataError> {
        let v = json!({"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": shapes}});
        match ChunkGrid::parse(&v, shape)? {
            ChunkGrid::Rectilinear(g) => Ok(g),
            other => panic!("{other:?}"),
        }
    }

    fn lens(d: &DimEdges) -> Vec<u64> {
        (0..d.count()).map(|i| d.len(i)).collect()
    }

    /// The example of the spec's README: every way of writing a dimension.
    #[test]
    fn spec_example() {
        let g = grid(json!([4, [1, 2, 3], [[4, 2]], [[1, 3], 3], [4, 4, 4]]), &[6; 5]).unwrap();
        assert_eq!(lens(g.dim(0)), [4, 4]);
        assert_eq!(lens(g.dim(1)), [1, 2, 3]);
        assert_eq!(lens(g.dim(2)), [4, 4]);
        assert_eq!(lens(g.dim(3)), [1, 1, 1, 3]);
        // A chunk wholly past the array is not part of the grid.
        assert_eq!(lens(g.dim(4)), [4, 4]);
        assert_eq!(g.counts(), [2, 3, 2, 4, 2]);
        assert_eq!(g.chunk_shape(&[1, 2, 0, 3, 1]), Some(vec![4, 3, 4, 3, 4]));
        assert_eq!(g.chunk_origin(&[1, 2, 0, 3, 1]), Some(vec![4, 3, 0, 3, 4]));
        assert_eq!(g.chunk_shape(&[2, 0, 0, 0, 0]), None);
        assert_eq!(g.uniform_shape(), None);
        assert_eq!(g.largest_chunk(), [4, 3, 4, 3, 4]);
    }

    /// What zarr-python 3.4 writes (see scripts/gen_rectilinear_fixtures.py).
    #[test]
    fn zarr_python_form() {
        let g = grid(json!([[40, 60], [[30, 2], 10]]), &[100, 70]).unwrap();
        assert_eq!(g.counts(), [2, 3]);
        let d = g.dim(1);
        assert_eq!((d.start(2), d.len(2)), (60, 10));
        assert_eq!(d.lengths(), [30, 10]);
        assert_eq!(d.chunk_at(59), Some(1));
        assert_eq!(d.chunk_at(60), Some(2));
        assert_eq!(d.chunk_at(70), None);
        assert_eq!(d.chunks_over(25..61), 0..3);
        assert_eq!(d.chunks_over(30..60), 1..2);
        assert_eq!(d.chunks_over(65..200), 2..3);
        assert_eq!(d.chunks_over(5..5), 0..0);
    }

    #[test]
    fn overhang_and_uniform_grids() {
        // The last chunk overhangs the array: encoded at its full length.
        let g = grid(json!([[40, 70]]), &[100]).unwrap();
        assert_eq!(g.chunk_shape(&[1]), Some(vec![70]));
        assert_eq!(g.dim(0).chunk_at(105), Some(1)); // inside the overhang
        assert_eq!(g.dim(0).chunk_at(110), None);
        // One length per dimension: the chunks of a regular grid.
        let g = grid(json!([[[10, 12]], 5]), &[95, 12]).unwrap();
        assert_eq!(g.uniform_shape(), Some(vec![10, 5]));
        assert_eq!(g, RectilinearGrid::regular(&[95, 12], &[10, 5]));
        assert_eq!(g.counts(), [10, 3]);
        // Huge run-length counts are never expanded.
        let g = grid(json!([[[1, u64::MAX], 7]]), &[1 << 40]).unwrap();
        assert_eq!(g.counts(), [1 << 40]);
        assert_eq!(g.dim(0).chunk_at((1 << 40) - 1), Some((1 << 40) - 1));
        // An empty array has no chunks but keeps its lengths.
        let g = grid(json!([[3, 4], 2]), &[0, 0]).unwrap();
        assert_eq!(g.counts(), [0, 0]);
        assert_eq!(g.largest_chunk(), [3, 2]);
        assert_eq!(g.dim(0).chunks_over(0..10), 0..0);
        // 0-d.
        let g = grid(json!([]), &[]).unwrap();
        assert!(g.contains(&[]));
        assert_eq!(g.chunk_shape(&[]), Some(vec![]));
    }

    #[test]
    fn many_runs_look_up_by_bisection() {
        let shapes: Vec<Value> = (1..=50u64).map(|n| json!([n, 2])).collect();
        let g = grid(json!([shapes]), &[2550]).unwrap();
        let d = g.dim(0);
        assert_eq!(d.count(), 100);
        let mut offset = 0;
        for i in 0..100 {
            assert_eq!((d.start(i), d.len(i)), (offset, i / 2 + 1), "{i}");
            assert_eq!(d.chunk_at(offset), Some(i));
            assert_eq!(d.chunk_at(offset + d.len(i) - 1), Some(i));
            offset += d.len(i);
        }
        assert_eq!(d.lengths().len(), 50);
        assert_eq!(d.max_len(), 50);
    }

    #[test]
    fn bad_grids_have_clear_errors() {
        let err = |shapes: Value, shape: &[u64]| grid(shapes, shape).unwrap_err().to_string();
        assert_eq!(
            err(json!([[40, 50]]), &[100]),
            "rectilinear chunk grid: dimension 0: the chunk lengths sum to 90, short of the extent 100"
        );
        assert!(err(json!([[40, 0]]), &[10]).contains("dimension 0: invalid chunk length 0"));
        assert!(
            err(json!([5, [[4, 0]]]), &[5, 4]).contains("dimension 1: invalid chunk length [4,0]")
        );
        assert!(err(json!([[[4, 2, 1]]]), &[8]).contains("[4,2,1]"));
        assert!(err(json!([[-3]]), &[8]).contains("-3"));
        assert!(err(json!([0]), &[8]).contains("invalid chunk length 0"));
        assert!(err(json!([2.5]), &[8]).contains("2.5"));
        assert!(err(json!(["4"]), &[8]).contains("\"4\""));
        assert_eq!(err(json!([[]]), &[0]), "rectilinear chunk grid: dimension 0: no chunk lengths");
        assert_eq!(
            err(json!([4, 4]), &[8]),
            "rectilinear chunk grid: 2 dimensions in chunk_shapes, 1 in the array's shape"
        );
        // A bad entry past the extent is still an error.
        assert!(err(json!([[8, 0]]), &[8]).contains("invalid chunk length 0"));
        // Lengths whose sum overflows: the extent is covered before the sum is needed.
        assert!(grid(json!([[u64::MAX, u64::MAX]]), &[8]).is_ok());
        let g = grid(json!([[40, u64::MAX]]), &[100]).unwrap();
        assert_eq!((g.dim(0).chunk_at(99), g.dim(0).chunk_at(u64::MAX)), (Some(1), None));
        let v = |config: Value| json!({"name": "rectilinear", "configuration": config});
        for bad in [
            json!({"chunk_shapes": [[4]]}),
            json!({"kind": "external", "chunk_shapes": [[4]]}),
            json!({"kind": "inline"}),
            json!({"kind": "inline", "chunk_shapes": 4}),
        ] {
            assert!(ChunkGrid::parse(&v(bad.clone()), &[4]).is_err(), "{bad}");
        }
        assert!(ChunkGrid::parse(&json!({"name": "rectilinear"}), &[4]).is_err());
        assert!(ChunkGrid::parse(&json!("rectilinear"), &[4]).is_err());
    }

    #[test]
    fn regular_and_unknown() {
        let g = ChunkGrid::parse(
            &json!({"name": "regular", "configuration": {"chunk_shape": [3, 4]}}),
            &[10, 10],
        )
        .unwrap();
        assert_eq!(g.regular_shape(), Some(vec![3, 4]));
        assert_eq!(g.boundaries(&[10, 10]).unwrap().counts(), [4, 3]);
        assert!(g.truly_rectilinear().is_none());
        let other = ChunkGrid::parse(&json!({"name": "spiral"}), &[10]).unwrap();
        assert_eq!(
            (other.name(), other.regular_shape(), other.boundaries(&[10])),
            ("spiral", None, None)
        );
        assert!(ChunkGrid::parse(
            &json!({"name": "regular", "configuration": {"chunk_shape": [3]}}),
            &[10, 10]
        )
        .is_err());
    }

    /// The fixtures zarr-python 3.4 wrote (tests/fixtures/rectilinear): the same chunks, at
    /// the same offsets and encoded lengths, as zarr-python's own grid.
    #[test]
    fn zarr_python_fixtures() {
        let cases: Value =
            serde_json::from_slice(&std::fs::read(fixtures().join("cases.json")).unwrap()).unwrap();
        let mut checked = 0;
        for (name, case) in cases.as_object().unwrap() {
            let Some(want) = case["chunks"].as_array() else { continue };
            let meta = fixture_meta(name);
            let g = meta.chunk_grid.boundaries(&meta.shape).unwrap();
            for (d, chunks) in want.iter().enumerate() {
                let got: Vec<Value> = (0..g.dim(d).count())
                    .map(|i| json!([g.dim(d).start(i), g.dim(d).len(i)]))
                    .collect();
                assert_eq!(&Value::Array(got), chunks, "{name} dimension {d}");
            }
            checked += 1;
        }
        assert_eq!(checked, 8);
    }
}
