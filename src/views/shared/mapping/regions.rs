//! Regions of an array and the chunks under them, as pure geometry: which chunks of a grid a box of
//! elements overlaps, and how to copy each chunk's part of the box from its decoded bytes into a
//! buffer holding the box. Used to assemble chunks on a grid the array is not stored on
//! (`views::presented::mapping::retile`); a view serving whole arrays would use it the same way. No
//! I/O: `views::shared::regions` fetches and decodes the chunks.

use std::ops::Range;

use thiserror::Error;

use crate::zarr::chunk_grid::RectilinearGrid;

/// A box of array elements: one range of indices per dimension.
pub type Region = Vec<Range<u64>>;

/// A chunk under a region: its grid coordinates and the part of the region it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub chunk: Vec<u64>,
    pub overlap: Region,
}

/// A C-order buffer holding a box of elements: where the box starts and its shape.
#[derive(Debug, Clone, Copy)]
pub struct Placed<'a> {
    pub origin: &'a [u64],
    pub shape: &'a [u64],
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RegionError {
    #[error("a buffer of {len} bytes does not hold {elements} elements of {item} bytes")]
    BufferSize { len: usize, elements: u64, item: usize },
    #[error("the overlap {overlap:?} lies outside a box at {origin:?} of shape {shape:?}")]
    OutsideBox { overlap: Region, origin: Vec<u64>, shape: Vec<u64> },
}

/// The chunks of `grid` that `region` overlaps, boxed: one range of chunk coordinates per
/// dimension.
pub fn chunks_under(grid: &RectilinearGrid, region: &[Range<u64>]) -> Vec<Range<u64>> {
    region.iter().enumerate().map(|(d, r)| grid.dim(d).chunks_over(r.clone())).collect()
}

/// The chunks of `grid` under `region`, in C order, each with the part of `region` it holds.
pub fn pieces<'a>(
    grid: &'a RectilinearGrid,
    region: &'a [Range<u64>],
) -> impl Iterator<Item = Piece> + 'a {
    GridBoxIter::new(chunks_under(grid, region)).map(move |chunk| {
        let overlap = region
            .iter()
            .enumerate()
            .map(|(d, r)| {
                let (start, len) = (grid.dim(d).start(chunk[d]), grid.dim(d).len(chunk[d]));
                r.start.max(start)..r.end.min(start.saturating_add(len))
            })
            .collect();
        Piece { chunk, overlap }
    })
}

fn elements(shape: &[u64]) -> u64 {
    shape.iter().try_fold(1u64, |n, &s| n.checked_mul(s)).unwrap_or(u64::MAX)
}

fn check(
    buf_len: usize,
    placed: Placed,
    item: usize,
    overlap: &[Range<u64>],
) -> Result<(), RegionError> {
    let elements = elements(placed.shape);
    if (elements as u128) * (item as u128) != buf_len as u128
        || placed.origin.len() != placed.shape.len()
    {
        return Err(RegionError::BufferSize { len: buf_len, elements, item });
    }
    let inside = overlap.len() == placed.shape.len()
        && overlap
            .iter()
            .zip(placed.origin.iter().zip(placed.shape))
            .all(|(r, (&o, &s))| r.start >= o && r.end <= o.saturating_add(s));
    if !inside {
        return Err(RegionError::OutsideBox {
            overlap: overlap.to_vec(),
            origin: placed.origin.to_vec(),
            shape: placed.shape.to_vec(),
        });
    }
    Ok(())
}

/// Byte offset of element `at` (array coordinates) in a C-order buffer of `placed`.
fn offset_of(placed: Placed, at: &[u64], item: usize) -> usize {
    let index = at
        .iter()
        .zip(placed.origin.iter().zip(placed.shape))
        .fold(0u64, |acc, (&a, (&o, &s))| acc * s + (a - o));
    index as usize * item
}

/// Copy the elements of `overlap` (array coordinates) from `src`, a C-order buffer of `from`,
/// into `dst`, a C-order buffer of `to`; `item` bytes per element. Both boxes must hold the
/// overlap and the buffers their boxes.
pub fn copy_overlap(
    src: &[u8],
    from: Placed,
    dst: &mut [u8],
    to: Placed,
    overlap: &[Range<u64>],
    item: usize,
) -> Result<(), RegionError> {
    check(src.len(), from, item, overlap)?;
    check(dst.len(), to, item, overlap)?;
    if overlap.iter().any(|r| r.is_empty()) {
        return Ok(());
    }
    // Copy row by row: the last dimension is contiguous in both buffers.
    let Some((last, outer)) = overlap.split_last() else {
        dst[..item].copy_from_slice(&src[..item]); // 0-d: the one element
        return Ok(());
    };
    let row = (last.end - last.start) as usize * item;
    for mut at in GridBoxIter::new(outer.to_vec()) {
        at.push(last.start);
        let (s, d) = (offset_of(from, &at, item), offset_of(to, &at, item));
        dst[d..d + row].copy_from_slice(&src[s..s + row]);
    }
    Ok(())
}

/// C-order iterator over a box of grid coordinates (one range per dimension).
/// A 0-d box yields one empty coordinate list; a box with an empty range yields
/// nothing.
#[derive(Debug, Clone)]
pub struct GridBoxIter {
    ranges: Vec<Range<u64>>,
    next: Option<Vec<u64>>,
}

impl GridBoxIter {
    pub fn new(ranges: Vec<Range<u64>>) -> Self {
        let next = if ranges.iter().any(|r| r.is_empty()) {
            None
        } else {
            Some(ranges.iter().map(|r| r.start).collect())
        };
        GridBoxIter { ranges, next }
    }
}

impl Iterator for GridBoxIter {
    type Item = Vec<u64>;

    fn next(&mut self) -> Option<Vec<u64>> {
        let current = self.next.take()?;
        let mut succ = current.clone();
        // Odometer: bump the last dimension, carrying leftwards.
        for i in (0..succ.len()).rev() {
            succ[i] += 1; // < range end <= u64::MAX, cannot overflow
            if succ[i] < self.ranges[i].end {
                self.next = Some(succ);
                return Some(current);
            }
            succ[i] = self.ranges[i].start;
        }
        Some(current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::chunk_grid::ChunkGrid;
    use serde_json::json;

    fn rect(shapes: serde_json::Value, shape: &[u64]) -> RectilinearGrid {
        let v = json!({"name": "rectilinear", "configuration": {"kind": "inline", "chunk_shapes": shapes}});
        ChunkGrid::parse(&v, shape).unwrap().boundaries(shape).unwrap()
    }

    #[test]
    fn pieces_of_a_region() {
        let g = rect(json!([[40, 60], [30, 30, 10]]), &[100, 70]);
        let got: Vec<Piece> = pieces(&g, &[30..50, 25..65]).collect();
        let want = [
            ([0, 0], [30..40, 25..30]),
            ([0, 1], [30..40, 30..60]),
            ([0, 2], [30..40, 60..65]),
            ([1, 0], [40..50, 25..30]),
            ([1, 1], [40..50, 30..60]),
            ([1, 2], [40..50, 60..65]),
        ];
        assert_eq!(got.len(), want.len());
        for (p, (chunk, overlap)) in got.iter().zip(want) {
            assert_eq!(
                (p.chunk.as_slice(), p.overlap.as_slice()),
                (chunk.as_slice(), overlap.as_slice())
            );
        }
        // A region past the array's chunks has none; one inside a chunk has one.
        assert_eq!(pieces(&g, &[100..120, 0..10]).count(), 0);
        assert_eq!(pieces(&g, &[0..0, 0..10]).count(), 0);
        let one: Vec<Piece> = pieces(&g, &[41..42, 69..70]).collect();
        assert_eq!(one, [Piece { chunk: vec![1, 2], overlap: vec![41..42, 69..70] }]);
        // A region overhanging the array: the last chunk's overhang counts, nothing past it.
        let g = rect(json!([[40, 70]]), &[95]);
        let region: Region = std::iter::once(70..140).collect();
        let p: Vec<Piece> = pieces(&g, &region).collect();
        assert_eq!(p, [Piece { chunk: vec![1], overlap: std::iter::once(70..110).collect() }]);
    }

    /// A buffer of `shape` at `origin` whose element at array coordinates (i, j) is i * 100 + j.
    fn numbered(origin: &[u64], shape: &[u64]) -> Vec<u8> {
        let mut out = Vec::new();
        for i in origin[0]..origin[0] + shape[0] {
            for j in origin[1]..origin[1] + shape[1] {
                out.extend_from_slice(&((i * 100 + j) as u16).to_le_bytes());
            }
        }
        out
    }

    #[test]
    fn copies_rows_of_the_overlap() {
        let src = numbered(&[10, 20], &[4, 5]);
        let mut dst = vec![0u8; 3 * 6 * 2];
        let (from, to) = (
            Placed { origin: &[10, 20], shape: &[4, 5] },
            Placed { origin: &[12, 18], shape: &[3, 6] },
        );
        copy_overlap(&src, from, &mut dst, to, &[12..14, 20..23], 2).unwrap();
        let got: Vec<u16> = dst.chunks(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
        #[rustfmt::skip]
        let want = [
            0, 0, 1220, 1221, 1222, 0,
            0, 0, 1320, 1321, 1322, 0,
            0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(got, want);
        // 0-d and empty overlaps.
        let mut one = [0u8; 4];
        copy_overlap(
            &[1, 2, 3, 4],
            Placed { origin: &[], shape: &[] },
            &mut one,
            Placed { origin: &[], shape: &[] },
            &[],
            4,
        )
        .unwrap();
        assert_eq!(one, [1, 2, 3, 4]);
        copy_overlap(&src, from, &mut dst, to, &[12..12, 20..23], 2).unwrap();
    }

    #[test]
    fn bad_boxes_are_errors() {
        let src = numbered(&[0, 0], &[2, 2]);
        let mut dst = vec![0u8; 8];
        let p = Placed { origin: &[0, 0], shape: &[2, 2] };
        assert!(matches!(
            copy_overlap(&src[..6], p, &mut dst, p, &[0..1, 0..1], 2),
            Err(RegionError::BufferSize { len: 6, elements: 4, item: 2 })
        ));
        assert!(matches!(
            copy_overlap(&src, p, &mut dst, p, &[0..3, 0..1], 2),
            Err(RegionError::OutsideBox { .. })
        ));
        assert!(matches!(
            copy_overlap(&src, p, &mut dst, p, std::slice::from_ref(&(0..1)), 2),
            Err(RegionError::OutsideBox { .. })
        ));
        let far = Placed { origin: &[5, 5], shape: &[2, 2] };
        assert!(copy_overlap(&src, p, &mut dst, far, &[0..1, 0..1], 2).is_err());
    }

    #[test]
    fn grid_box_iter() {
        let v: Vec<_> = GridBoxIter::new(vec![1..3, 5..7]).collect();
        assert_eq!(v, vec![vec![1, 5], vec![1, 6], vec![2, 5], vec![2, 6]]);
        assert_eq!(GridBoxIter::new(vec![0..2, 3..3]).count(), 0);
        assert_eq!(GridBoxIter::new(vec![]).count(), 1);
        let top = u64::MAX - 1..u64::MAX;
        assert_eq!(GridBoxIter::new(vec![top.clone(), top]).count(), 1);
    }
}
