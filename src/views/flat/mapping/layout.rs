//! The byte layout of a flat file: its exact size and the parts covering it in order, and
//! which elements of which array a byte range of it holds. Pure.

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
        Layout { size: self.size, order: self.order, parts: self.parts }
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
}
