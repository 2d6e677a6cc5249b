//! How to decode each chunk of an array. The chunks of a regular grid share one [`ChunkSpec`];
//! those of a rectilinear grid differ in shape (each is encoded at its own edge lengths), so
//! each gets the array's spec with its own chunk shape.

use std::sync::Arc;

use crate::zarr::chunk_grid::RectilinearGrid;
use crate::zarr::codecs::{ChunkSpec, CodecError};
use crate::zarr::metadata::ArrayMetadata;

#[derive(Debug, Clone, PartialEq)]
pub struct ChunkSpecs {
    /// The spec of every chunk of a regular grid; on a rectilinear grid, of its largest
    /// chunk shape (see [`of`](Self::of)).
    base: Arc<ChunkSpec>,
    /// A grid whose chunks differ in shape.
    varying: Option<Arc<RectilinearGrid>>,
}

impl ChunkSpecs {
    /// Chunks that all have `spec`'s shape.
    pub fn single(spec: ChunkSpec) -> ChunkSpecs {
        ChunkSpecs { base: Arc::new(spec), varying: None }
    }

    /// The specs of a v3 array's chunks, checked for every chunk shape its grid has.
    pub fn from_v3(meta: &ArrayMetadata) -> Result<ChunkSpecs, CodecError> {
        let Some(grid) = meta.chunk_grid.truly_rectilinear() else {
            return ChunkSpec::from_v3(meta).map(ChunkSpecs::single);
        };
        let mut largest = meta.clone();
        largest.chunk_grid = crate::zarr::chunk_grid::ChunkGrid::Regular(grid.largest_chunk());
        let base = ChunkSpec::from_v3(&largest)?;
        // A chain's demands on the shape are per dimension (sharding's divisibility) or grow
        // with it (the size limit, checked on the largest chunk: every combination of lengths
        // is a chunk): each length of each dimension, the others at their largest, covers
        // them without trying every combination.
        for d in 0..grid.ndim() {
            for len in grid.dim(d).lengths() {
                let mut spec = base.clone();
                spec.chunk_shape[d] = len;
                spec.check()?;
            }
        }
        Ok(ChunkSpecs { base: Arc::new(base), varying: Some(Arc::new(grid.clone())) })
    }

    /// The spec shared by every chunk, or on a rectilinear grid the largest chunk's.
    pub fn base(&self) -> &ChunkSpec {
        &self.base
    }

    /// The grid, if its chunks differ in shape.
    pub fn varying(&self) -> Option<&RectilinearGrid> {
        self.varying.as_deref()
    }

    /// The spec of the chunk at `coords`; `None` outside a rectilinear grid. Trailing axes
    /// the base spec has beyond the grid's rank (see [`with_trailing_axis`](Self::with_trailing_axis))
    /// are kept.
    pub fn of(&self, coords: &[u64]) -> Option<Arc<ChunkSpec>> {
        let Some(grid) = &self.varying else { return Some(self.base.clone()) };
        let shape = grid.chunk_shape(coords)?;
        if self.base.chunk_shape.starts_with(&shape) {
            return Some(self.base.clone());
        }
        let mut spec = (*self.base).clone();
        spec.chunk_shape[..shape.len()].copy_from_slice(&shape);
        Some(Arc::new(spec))
    }

    /// The same chunks decoded with one more, innermost axis of `n` elements (an element of a
    /// fixed-size string type as its bytes or code units); refused if the largest chunk then
    /// exceeds the size limit.
    pub fn with_trailing_axis(mut self, n: u64) -> Result<ChunkSpecs, CodecError> {
        Arc::make_mut(&mut self.base).chunk_shape.push(n);
        self.base.decoded_size()?;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::chunk_grid::tests::fixture_meta;
    use serde_json::json;

    #[test]
    fn a_spec_per_chunk_shape() {
        // chunks [[2, 3, 4], 6 (over 20), [3, 3, 1]] of float64, gzip
        let specs = ChunkSpecs::from_v3(&fixture_meta("chunks3d_f64")).unwrap();
        assert_eq!(specs.base().chunk_shape, [4, 6, 3]);
        assert_eq!(specs.of(&[0, 3, 2]).unwrap().chunk_shape, [2, 6, 1]);
        assert_eq!(specs.of(&[1, 0, 0]).unwrap().decoded_size().unwrap(), 3 * 6 * 3 * 8);
        assert!(Arc::ptr_eq(&specs.of(&[2, 1, 1]).unwrap(), &specs.of(&[2, 0, 0]).unwrap()));
        assert_eq!(specs.of(&[3, 0, 0]), None);
        assert_eq!(specs.varying().unwrap().counts(), [3, 4, 3]);
        // A rectilinear grid of one length per dimension is a regular one.
        let uniform = ChunkSpecs::from_v3(&fixture_meta("chunks_uniform")).unwrap();
        assert!(uniform.varying().is_none());
        assert_eq!(uniform.of(&[7, 7]).unwrap().chunk_shape, [4, 5]);
        // Trailing axes stay behind the grid's.
        let wide = specs.clone().with_trailing_axis(5).unwrap();
        assert_eq!(wide.of(&[0, 0, 2]).unwrap().chunk_shape, [2, 6, 1, 5]);
        assert!(matches!(specs.with_trailing_axis(1 << 30), Err(CodecError::TooLarge { .. })));
    }

    /// Every chunk shape is checked: sharding whose inner chunk does not divide some length.
    #[test]
    fn every_length_checked() {
        let mut meta = fixture_meta("shards_nodivide");
        assert!(matches!(ChunkSpecs::from_v3(&meta), Err(CodecError::InvalidConfiguration { .. })));
        // Only the largest shards would pass.
        let grid = json!({"name": "rectilinear", "configuration": {"kind": "inline",
            "chunk_shapes": [[40, 60], [40, 40]]}});
        meta.chunk_grid = crate::zarr::chunk_grid::ChunkGrid::parse(&grid, &meta.shape).unwrap();
        assert!(ChunkSpecs::from_v3(&meta).is_ok());
        let grid = json!({"name": "rectilinear", "configuration": {"kind": "inline",
            "chunk_shapes": [[40, 60, 10], [40, 40]]}});
        meta.shape = vec![110, 70];
        meta.chunk_grid = crate::zarr::chunk_grid::ChunkGrid::parse(&grid, &meta.shape).unwrap();
        assert!(ChunkSpecs::from_v3(&meta).is_err());
    }
}
