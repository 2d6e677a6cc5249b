//! The byte layout of a flat file: its exact size and the parts covering it in order, which
//! elements of which array a byte range of it holds, and where in the file the last byte of a
//! chunk of an array lies (so a sequential reader can let a chunk go once past it). Pure.

use std::collections::BTreeSet;
use std::ops::Range;

use bytes::Bytes;

use crate::views::shared::mapping::regions::Region;

/// The byte order of a file's elements. Decoded chunks are little-endian; a big-endian file
/// has its elements swapped when read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    Little,
    Big,
}

/// A box of elements of one array, in C order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementBox {
    /// Which of the file's arrays (`FlatFile::arrays`).
    pub source: usize,
    /// The elements, in array coordinates; a box overhanging the array (a TIFF edge tile)
    /// reads as the fill value there.
    pub region: Region,
    /// Bytes per element (the array's `FlatArray::item`).
    pub item: usize,
    /// The unit a byte order change reverses (`FlatArray::swap`).
    pub swap: usize,
}

impl ElementBox {
    pub fn elements(&self) -> u64 {
        self.region.iter().map(|r| r.end.saturating_sub(r.start)).product()
    }

    pub fn bytes(&self) -> u64 {
        self.elements().saturating_mul(self.item as u64)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// Literal bytes (a header, TIFF IFDs, XML).
    Bytes(Bytes),
    Elements(ElementBox),
}

/// One part of a file: `len` bytes from `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub offset: u64,
    pub len: u64,
    pub content: Content,
}

/// A file's size and its parts, in order, with no gaps (a gap is a `Content::Bytes` of zeros).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub size: u64,
    pub order: ByteOrder,
    parts: Vec<Part>,
    /// Per source array: the bounding box of its element boxes when they tile it as cells of
    /// one grid in the C order of the cells ([`cells_in_c_order`]), else `None`.
    ordered: Vec<Option<Region>>,
}

/// Builds a [`Layout`] part after part.
#[derive(Debug)]
pub struct LayoutBuilder {
    order: ByteOrder,
    parts: Vec<Part>,
    size: u64,
}

impl LayoutBuilder {
    pub fn new(order: ByteOrder) -> Self {
        LayoutBuilder { order, parts: Vec::new(), size: 0 }
    }

    /// Where the next part starts.
    pub fn offset(&self) -> u64 {
        self.size
    }

    pub fn bytes(&mut self, bytes: impl Into<Bytes>) -> &mut Self {
        let bytes = bytes.into();
        self.push(bytes.len() as u64, Content::Bytes(bytes))
    }

    /// `n` zero bytes (padding, e.g. to align the next part).
    pub fn zeros(&mut self, n: u64) -> &mut Self {
        self.bytes(vec![0u8; n as usize])
    }

    pub fn elements(&mut self, b: ElementBox) -> &mut Self {
        self.push(b.bytes(), Content::Elements(b))
    }

    fn push(&mut self, len: u64, content: Content) -> &mut Self {
        if len > 0 {
            self.parts.push(Part { offset: self.size, len, content });
            self.size = self.size.saturating_add(len);
        }
        self
    }

    pub fn build(self) -> Layout {
        let sources = self.parts.iter().filter_map(|p| match &p.content {
            Content::Elements(e) => Some(e.source + 1),
            Content::Bytes(_) => None,
        });
        let ordered = (0..sources.max().unwrap_or(0))
            .map(|source| {
                let boxes = self.parts.iter().filter_map(|p| match &p.content {
                    Content::Elements(e) if e.source == source => Some(&e.region),
                    _ => None,
                });
                cells_in_c_order(boxes)
            })
            .collect();
        Layout { size: self.size, order: self.order, parts: self.parts, ordered }
    }
}

/// The piece of a part a byte range covers: `within` is relative to the part's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Covered<'a> {
    pub part: &'a Part,
    pub within: Range<u64>,
}

impl Layout {
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// Where the last byte in the file of the elements of `chunk` (a box of array
    /// `eb.source`) lies, relative to the first byte of `eb`, if it lies in `eb`; `None` when
    /// it lies in another part or the layout cannot say (its boxes of that array are not
    /// cells of one grid in C order: then no box claims it).
    ///
    /// Why it holds: let `p` be the largest corner of `chunk` within the boxes' bounds. Every
    /// element of the chunk in the file is `<= p` in every dimension. A box after the one
    /// holding `p` is a later cell, so at the first dimension where its cell index differs it
    /// starts past `p`: it holds none of the chunk. Within the box holding `p`, the chunk's
    /// elements there form a box whose largest corner is `p`, the last of them in C order.
    pub fn last_byte_of(&self, eb: &ElementBox, chunk: &[Range<u64>]) -> Option<u64> {
        let bounds = self.ordered.get(eb.source)?.as_ref()?;
        if chunk.len() != bounds.len() || eb.region.len() != bounds.len() {
            return None;
        }
        let mut index = 0u64;
        for ((c, b), r) in chunk.iter().zip(bounds).zip(&eb.region) {
            let p = c.end.min(b.end).checked_sub(1)?;
            if p < c.start.max(b.start) || !r.contains(&p) {
                return None;
            }
            index = index.checked_mul(r.end - r.start)?.checked_add(p - r.start)?;
        }
        index.checked_add(1)?.checked_mul(eb.item as u64)?.checked_sub(1)
    }

    /// How many elements of `chunk` (a box of array `source`) the file holds, each once; `None`
    /// when the layout cannot say (as for `last_byte_of`).
    pub fn elements_in_file(&self, source: usize, chunk: &[Range<u64>]) -> Option<u64> {
        let bounds = self.ordered.get(source)?.as_ref()?;
        (chunk.len() == bounds.len()).then(|| overlap(chunk, bounds))
    }

    /// The parts under bytes `range` (clipped to the file), in order, by binary search.
    pub fn covering(&self, range: Range<u64>) -> impl Iterator<Item = Covered<'_>> {
        let end = range.end.min(self.size);
        let start = range.start.min(end);
        let first = self.parts.partition_point(|p| p.offset + p.len <= start);
        self.parts[first..].iter().take_while(move |p| p.offset < end).map(move |part| Covered {
            part,
            within: start.max(part.offset) - part.offset
                ..end.min(part.offset + part.len) - part.offset,
        })
    }
}

/// The elements two boxes share.
pub fn overlap(a: &[Range<u64>], b: &[Range<u64>]) -> u64 {
    a.iter()
        .zip(b)
        .map(|(a, b)| a.end.min(b.end).saturating_sub(a.start.max(b.start)))
        .fold(1u64, u64::saturating_mul)
}

/// The bounding box of `boxes` (in file order) if they are distinct cells of one grid (in each
/// dimension the ranges they use do not overlap) in the C order of their cell indices that
/// tile it (every element of the bounding box in one of them), as the pages (C order of the
/// leading indices) and row-major tiles or strips of a TIFF are; `None` otherwise (e.g.
/// ImageJ's page order over an array in another order), or for no boxes.
fn cells_in_c_order<'a>(boxes: impl Iterator<Item = &'a Region>) -> Option<Region> {
    let mut used: Vec<BTreeSet<(u64, u64)>> = Vec::new();
    let mut previous: Option<&Region> = None;
    let mut volume = 0u128;
    for b in boxes {
        volume = volume.checked_add(volume_of(b)?)?;
        if let Some(prev) = previous {
            let starts = |r: &Region| r.iter().map(|d| d.start).collect::<Vec<_>>();
            if prev.len() != b.len() || starts(prev) >= starts(b) {
                return None;
            }
        } else {
            used = vec![BTreeSet::new(); b.len()];
        }
        for (set, r) in used.iter_mut().zip(b) {
            set.insert((r.start, r.end));
        }
        previous = Some(b);
    }
    previous?;
    let mut bounds = Region::new();
    for set in &used {
        let mut ranges = set.iter();
        let (first, mut end) = *ranges.next()?;
        for &(start, next_end) in ranges {
            if start < end {
                return None; // overlapping (or nested) ranges: not one grid
            }
            end = next_end;
        }
        bounds.push(first..end);
    }
    (volume_of(&bounds)? == volume).then_some(bounds)
}

/// The elements of a box, `None` past u128 (a hostile shape).
fn volume_of(b: &[Range<u64>]) -> Option<u128> {
    b.iter().try_fold(1u128, |n, r| n.checked_mul(u128::from(r.end.saturating_sub(r.start))))
}

/// Boxes (array coordinates) whose elements, each box in C order, one box after another, are
/// exactly elements `elements` (C-order indices) of `region`: at most 2 * ndim - 1 of them.
pub fn c_order_boxes(region: &[Range<u64>], elements: Range<u64>) -> Vec<Region> {
    let shape: Vec<u64> = region.iter().map(|r| r.end.saturating_sub(r.start)).collect();
    let total: u64 = shape.iter().product();
    let (start, end) = (elements.start.min(total), elements.end.min(total));
    let mut out = Vec::new();
    if start < end {
        split(region, &shape, Vec::new(), start, end, &mut out);
    }
    out
}

/// `c_order_boxes` of `start..end` (non-empty, relative to the sub-box whose leading
/// coordinates are `fixed`), appended to `out`.
fn split(
    region: &[Range<u64>],
    shape: &[u64],
    fixed: Vec<u64>,
    start: u64,
    end: u64,
    out: &mut Vec<Region>,
) {
    let d = fixed.len();
    let boxed = |fixed: &[u64], dim: Range<u64>| -> Region {
        let mut b: Region =
            fixed.iter().zip(region).map(|(&c, r)| r.start + c..r.start + c + 1).collect();
        if d < shape.len() {
            b.push(region[d].start + dim.start..region[d].start + dim.end);
            b.extend(region[d + 1..].iter().cloned());
        }
        b
    };
    if d == shape.len() {
        out.push(boxed(&fixed, 0..0)); // 0-d: the one element
        return;
    }
    let stride: u64 = shape[d + 1..].iter().product();
    let (first, last) = (start / stride, (end - 1) / stride);
    let with = |c: u64| {
        let mut f = fixed.clone();
        f.push(c);
        f
    };
    if first == last {
        if start.is_multiple_of(stride) && end.is_multiple_of(stride) || stride == 1 {
            out.push(boxed(&fixed, first..last + 1));
        } else {
            split(region, shape, with(first), start - first * stride, end - first * stride, out);
        }
        return;
    }
    let mut whole = first..last + 1;
    if !start.is_multiple_of(stride) {
        split(region, shape, with(first), start - first * stride, stride, out);
        whole.start += 1;
    }
    let tail = !end.is_multiple_of(stride);
    if tail {
        whole.end -= 1;
    }
    if !whole.is_empty() {
        out.push(boxed(&fixed, whole));
    }
    if tail {
        split(region, shape, with(last), 0, end - last * stride, out);
    }
}

/// Test helpers shared with the formats' tests.
#[cfg(test)]
pub(crate) mod check {
    use super::*;
    use crate::views::shared::mapping::regions::GridBoxIter;

    /// The C-order index of `at` in `region`.
    fn index_in(region: &[Range<u64>], at: &[u64]) -> u64 {
        at.iter().zip(region).fold(0, |acc, (&a, r)| acc * (r.end - r.start) + (a - r.start))
    }

    /// For every chunk of `chunk` shape (per source, a grid from the origin over `extent`):
    /// the file offset of its last byte and its elements in the file, found by visiting every
    /// element of every part, against `Layout::last_byte_of` (`None` if no part claims it; two
    /// claims fail) and `Layout::elements_in_file` (given exactly when a part claims it).
    /// Returns the chunks checked and how many of them some part claimed.
    pub fn last_bytes(layout: &Layout, chunks: &[(Vec<u64>, Vec<u64>)]) -> (usize, usize) {
        let (mut checked, mut claimed) = (0, 0);
        for (source, (extent, chunk)) in chunks.iter().enumerate() {
            let grid: Region = extent.iter().zip(chunk).map(|(e, c)| 0..e.div_ceil(*c)).collect();
            for at in GridBoxIter::new(grid) {
                let cbox: Region = at.iter().zip(chunk).map(|(a, c)| a * c..(a + 1) * c).collect();
                let (mut brute, mut count) = (None, 0u64);
                let mut claims = Vec::new();
                for part in layout.parts() {
                    let Content::Elements(eb) = &part.content else { continue };
                    if eb.source != source {
                        continue;
                    }
                    for e in GridBoxIter::new(eb.region.clone()) {
                        if e.iter().zip(&cbox).all(|(x, r)| r.contains(x)) {
                            let last = (index_in(&eb.region, &e) + 1) * eb.item as u64 - 1;
                            brute = brute.max(Some(part.offset + last));
                            count += 1;
                        }
                    }
                    if let Some(b) = layout.last_byte_of(eb, &cbox) {
                        claims.push(part.offset + b);
                    }
                }
                assert!(claims.len() <= 1, "chunk {at:?} claimed by {claims:?}");
                let in_file = layout.elements_in_file(source, &cbox);
                assert!(in_file.is_none_or(|n| n == count), "chunk {at:?}: {in_file:?}, {count}");
                if count > 0 {
                    assert_eq!(in_file.is_some(), !claims.is_empty(), "chunk {at:?}");
                }
                if let Some(&c) = claims.first() {
                    assert_eq!(Some(c), brute, "chunk {at:?} of source {source}");
                    claimed += 1;
                }
                checked += 1;
            }
        }
        (checked, claimed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::shared::mapping::regions::GridBoxIter;

    /// The C-order indices (within `region`) of the elements of `boxes`, in order.
    fn indices(region: &[Range<u64>], boxes: &[Region]) -> Vec<u64> {
        let shape: Vec<u64> = region.iter().map(|r| r.end - r.start).collect();
        let mut out = Vec::new();
        for b in boxes {
            for at in GridBoxIter::new(b.clone()) {
                let i = at
                    .iter()
                    .zip(region.iter().zip(&shape))
                    .fold(0, |acc, (&a, (r, &s))| acc * s + (a - r.start));
                out.push(i);
            }
        }
        out
    }

    #[test]
    fn boxes_cover_exactly_the_elements_in_order() {
        let region: Region = vec![2..5, 10..14, 0..3];
        let total = 3 * 4 * 3;
        for start in 0..=total {
            for end in start..=total + 2 {
                let boxes = c_order_boxes(&region, start..end);
                assert!(boxes.len() <= 5, "{start}..{end}: {boxes:?}");
                let want: Vec<u64> = (start..end.min(total)).collect();
                assert_eq!(indices(&region, &boxes), want, "{start}..{end}: {boxes:?}");
            }
        }
        // Whole rows of a 2-d array are one box.
        assert_eq!(c_order_boxes(&[0..20000, 0..20000], 40000..80000), [vec![2..4, 0..20000]]);
        // 0-d: one element.
        assert_eq!(c_order_boxes(&[], 0..1), [Vec::<Range<u64>>::new()]);
        assert!(c_order_boxes(&[0..0, 0..3], 0..5).is_empty());
    }

    #[test]
    fn parts_under_a_range() {
        let mut b = LayoutBuilder::new(ByteOrder::Little);
        b.bytes(vec![1u8; 10]);
        b.elements(ElementBox { source: 0, region: vec![0..4, 0..5], item: 2, swap: 2 });
        b.zeros(0).zeros(6);
        let layout = b.build();
        assert_eq!(layout.size, 10 + 40 + 6);
        assert_eq!(layout.parts().len(), 3);
        let got: Vec<(u64, Range<u64>)> =
            layout.covering(5..52).map(|c| (c.part.offset, c.within)).collect();
        assert_eq!(got, [(0, 5..10), (10, 0..40), (50, 0..2)]);
        let got: Vec<(u64, Range<u64>)> =
            layout.covering(10..11).map(|c| (c.part.offset, c.within)).collect();
        assert_eq!(got, [(10, 0..1)]);
        assert_eq!(layout.covering(56..100).count(), 0);
        assert_eq!(layout.covering(40..1000).last().unwrap().within, 0..6);
    }

    fn boxes(order: ByteOrder, regions: &[Region], item: usize) -> Layout {
        let mut b = LayoutBuilder::new(order);
        b.bytes(vec![7u8; 5]);
        for region in regions {
            b.elements(ElementBox { source: 0, region: region.clone(), item, swap: item });
        }
        b.build()
    }

    /// A chunk's last byte in the file is found in the one part that holds it, for an .npy
    /// (one box), row-major tiles and strips (cells of a grid in C order, chunks not
    /// aligned with them); not for cells out of C order or boxes not of one grid.
    #[test]
    fn last_byte_of_a_chunk_where_the_boxes_are_cells_in_c_order() {
        let npy = boxes(ByteOrder::Little, &[vec![0..5, 0..7]], 2);
        assert_eq!(check::last_bytes(&npy, &[(vec![5, 7], vec![2, 3])]), (9, 9));
        // Chunk (0, 0) holds rows 0..2, columns 0..3: its last element is (1, 2), the 10th.
        let eb = match &npy.parts()[1].content {
            Content::Elements(e) => e.clone(),
            _ => unreachable!(),
        };
        assert_eq!(npy.last_byte_of(&eb, &[0..2, 0..3]), Some(9 * 2 + 1));
        // Past the array's edge the last element is the array's.
        assert_eq!(npy.last_byte_of(&eb, &[4..6, 6..9]), Some(34 * 2 + 1));
        let cells = |rows: &[Range<u64>], cols: &[Range<u64>]| -> Vec<Region> {
            rows.iter().flat_map(|r| cols.iter().map(move |c| vec![r.clone(), c.clone()])).collect()
        };
        let tiles = cells(&[0..4, 4..8, 8..12], &[0..4, 4..8]);
        for chunk in [vec![4, 4], vec![3, 5], vec![12, 2], vec![1, 1]] {
            let l = boxes(ByteOrder::Big, &tiles, 4);
            let (checked, claimed) = check::last_bytes(&l, &[(vec![12, 8], chunk.clone())]);
            assert_eq!(checked, claimed, "{chunk:?}");
        }
        let strips = cells(&[0..3, 3..6, 6..7], &std::iter::once(0..9).collect::<Vec<_>>());
        let l = boxes(ByteOrder::Little, &strips, 1);
        assert_eq!(check::last_bytes(&l, &[(vec![7, 9], vec![2, 4])]), (12, 12));
        // Column-major tiles: the rule does not hold, so no part claims a chunk.
        let mut by_column = tiles.clone();
        by_column.sort_by_key(|r| (r[1].start, r[0].start));
        let l = boxes(ByteOrder::Little, &by_column, 1);
        assert_eq!(check::last_bytes(&l, &[(vec![12, 8], vec![4, 4])]), (6, 0));
        // Overlapping boxes are not one grid.
        let l = boxes(ByteOrder::Little, &[vec![0..4, 0..4], vec![2..6, 0..4]], 1);
        assert_eq!(check::last_bytes(&l, &[(vec![6, 4], vec![2, 2])]), (6, 0));
        // Cells in C order that leave part of their bounds out cannot count a chunk.
        let l = boxes(ByteOrder::Little, &[vec![0..4, 0..4], vec![4..8, 4..8]], 1);
        assert_eq!(check::last_bytes(&l, &[(vec![8, 8], vec![4, 4])]), (4, 0));
    }
}
