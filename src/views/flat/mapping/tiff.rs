//! The layout of an uncompressed, little-endian TIFF whose pixels are boxes of array elements:
//! one page (IFD) per 2-d plane, each cut into tiles (one per chunk) or strips, and optional
//! reduced-resolution planes as SubIFDs of each page (the OME-TIFF pyramid). Every IFD comes
//! first, then the pixel data, so a reader learns the whole file from its head and each tile
//! or strip is a C-order slice of the array that the filesystem fills from decoded chunks.

use crate::views::shared::mapping::regions::Region;

use super::tiff_ifd::{ifd_bytes, ifd_len, tag, Flavor, Value};
use super::{ByteOrder, ElementBox, Layout, LayoutBuilder};

/// Files above this size are BigTIFF (classic TIFF offsets are 32-bit).
pub const CLASSIC_LIMIT: u64 = u32::MAX as u64;

/// TIFF requires tile sides that are multiples of this.
const TILE_MULTIPLE: u64 = 16;

/// Tiles and strips one TIFF may have, over all its pages and SubIFDs. Its layout is built
/// whole when the file is looked up, at about 150 bytes a block (the IFD's offsets and byte
/// counts, one part of the layout), so this bounds one file's layout to about 150 MiB however
/// large the array claims to be; a larger one is left out with a log line.
pub const MAX_BLOCKS: u64 = 1 << 20;

/// One sample's encoding: BitsPerSample and SampleFormat (1 unsigned, 2 signed, 3 float).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub bits: u16,
    pub format: u16,
}

impl Sample {
    /// The TIFF sample of an image data type (numpy kind and bytes per element): 8- to 64-bit
    /// integers, float32, float64.
    pub fn of(kind: char, item: usize) -> Option<Sample> {
        let format = match (kind, item) {
            ('u', 1 | 2 | 4 | 8) => 1,
            ('i', 1 | 2 | 4 | 8) => 2,
            ('f', 4 | 8) => 3,
            _ => return None,
        };
        Some(Sample { bits: item as u16 * 8, format })
    }

    pub fn bytes(self) -> usize {
        usize::from(self.bits / 8)
    }
}

/// How a plane's pixels are cut into blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocks {
    Tiles { length: u64, width: u64 },
    Strips { rows: u64 },
}

impl Blocks {
    /// One tile per chunk when the chunk's sides are multiples of 16, else strips one chunk
    /// high.
    pub fn for_chunk(chunk_length: u64, chunk_width: u64) -> Blocks {
        let fits = |n: u64| n > 0 && n.is_multiple_of(TILE_MULTIPLE);
        if fits(chunk_length) && fits(chunk_width) {
            Blocks::Tiles { length: chunk_length, width: chunk_width }
        } else {
            Blocks::Strips { rows: chunk_length.max(1) }
        }
    }
}

/// One 2-d image of the file: the plane of array `source` at `index` of its leading
/// dimensions; the array's last two dimensions are its height and width.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plane {
    pub source: usize,
    pub index: Vec<u64>,
    pub height: u64,
    pub width: u64,
    pub blocks: Blocks,
}

impl Plane {
    /// The plane's blocks in file order, each a box of elements: edge tiles are whole tiles
    /// overhanging the array; the last strip is as short as the image.
    fn blocks(&self) -> impl Iterator<Item = Region> + '_ {
        let (step_y, step_x, rows, cols) = self.grid();
        let tiled = matches!(self.blocks, Blocks::Tiles { .. });
        (0..rows * cols).map(move |i| {
            let (y, x) = (i / cols * step_y, i % cols * step_x);
            let y_end = if tiled { y + step_y } else { (y + step_y).min(self.height) };
            let mut region: Region = self.index.iter().map(|&i| i..i + 1).collect();
            region.extend([y..y_end, x..x + step_x]);
            region
        })
    }

    /// A block's height and width, and how many rows and columns of blocks there are.
    fn grid(&self) -> (u64, u64, u64, u64) {
        let (step_y, step_x) = match self.blocks {
            Blocks::Tiles { length, width } => (length, width),
            Blocks::Strips { rows } => (rows, self.width.max(1)),
        };
        (step_y, step_x, self.height.div_ceil(step_y), self.width.div_ceil(step_x))
    }

    fn block_count(&self) -> usize {
        usize::try_from(self.blocks_total().unwrap_or(u64::MAX)).unwrap_or(usize::MAX)
    }

    /// How many tiles or strips the plane has (`None` beyond u64).
    pub fn blocks_total(&self) -> Option<u64> {
        let (_, _, rows, cols) = self.grid();
        rows.checked_mul(cols)
    }
}

/// Refuse a TIFF of `pages` pages (the product of the leading dimensions, `None` when it
/// overflows) of planes like `planes` (a page and its SubIFDs) with more than [`MAX_BLOCKS`]
/// tiles and strips in all, before anything is allocated for its pages.
pub fn check_size<'a>(
    pages: Option<u64>,
    planes: impl IntoIterator<Item = &'a Plane>,
) -> Result<(), String> {
    let per_page =
        planes.into_iter().try_fold(0u64, |n, p| p.blocks_total().and_then(|b| n.checked_add(b)));
    match pages.zip(per_page).and_then(|(p, b)| p.checked_mul(b)) {
        Some(n) if n <= MAX_BLOCKS => Ok(()),
        Some(n) => Err(format!("a TIFF of {n} tiles or strips, more than {MAX_BLOCKS}")),
        None => Err(format!("a TIFF of more than 2^64 tiles or strips (at most {MAX_BLOCKS})")),
    }
}

/// The number of planes of an array of `shape` (its leading dimensions' product), `None`
/// beyond u64.
pub fn plane_count(shape: &[u64]) -> Option<u64> {
    let leading = &shape[..shape.len().saturating_sub(2)];
    leading.iter().try_fold(1u64, |n, &d| n.checked_mul(d))
}

/// One page of the file: a full-resolution plane, the ImageDescription it carries, and its
/// reduced-resolution planes (SubIFDs, largest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub plane: Plane,
    pub description: Option<String>,
    pub reduced: Vec<Plane>,
}

/// What a TIFF file holds: its pages in order, all of one sample type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TiffSpec {
    pub sample: Sample,
    pub pages: Vec<Page>,
}

/// One IFD to write: its plane, whether it is a reduced-resolution image, its description
/// and the IFDs of its SubIFDs (indices into the IFD list).
struct Ifd<'a> {
    plane: &'a Plane,
    reduced: bool,
    description: Option<&'a str>,
    sub_ifds: Vec<usize>,
}

/// The layout of `spec`: classic TIFF when the file fits in `classic_limit` bytes (at most
/// [`CLASSIC_LIMIT`]; a parameter so tests can force BigTIFF), else BigTIFF.
pub fn layout(spec: &TiffSpec, classic_limit: u64) -> Layout {
    let ifds = ifd_list(spec);
    let classic = layout_as(spec, &ifds, Flavor::Classic);
    if classic.size <= classic_limit.min(CLASSIC_LIMIT) {
        classic
    } else {
        layout_as(spec, &ifds, Flavor::Big)
    }
}

/// The IFDs in file order: the pages (the main chain), then the reduced planes level by level
/// (each level's planes in page order), which is also the order of their pixel data.
fn ifd_list(spec: &TiffSpec) -> Vec<Ifd<'_>> {
    let pages = spec.pages.len();
    let levels = spec.pages.iter().map(|p| p.reduced.len()).max().unwrap_or(0);
    let mut reduced_at = vec![Vec::new(); pages];
    let mut reduced = Vec::new();
    for level in 0..levels {
        for (p, page) in spec.pages.iter().enumerate() {
            if let Some(plane) = page.reduced.get(level) {
                reduced_at[p].push(pages + reduced.len());
                reduced.push(Ifd { plane, reduced: true, description: None, sub_ifds: vec![] });
            }
        }
    }
    let main = spec.pages.iter().zip(reduced_at).map(|(page, sub_ifds)| Ifd {
        plane: &page.plane,
        reduced: false,
        description: page.description.as_deref(),
        sub_ifds,
    });
    main.chain(reduced).collect()
}

fn layout_as(spec: &TiffSpec, ifds: &[Ifd], flavor: Flavor) -> Layout {
    let item = spec.sample.bytes();
    let zeros = |n: usize| vec![0; n];
    let mut at = Vec::with_capacity(ifds.len());
    let mut end = flavor.header_len();
    for ifd in ifds {
        let blocks = ifd.plane.block_count();
        let entries = ifd_entries(spec.sample, ifd, zeros(blocks), zeros(ifd.sub_ifds.len()));
        at.push(end);
        end += ifd_len(flavor, &entries);
    }
    let data_start = end.div_ceil(16) * 16;
    let mut boxes = Vec::new();
    let mut offsets = Vec::with_capacity(ifds.len());
    let mut pos = data_start;
    for ifd in ifds {
        let mut mine = Vec::with_capacity(ifd.plane.block_count());
        for region in ifd.plane.blocks() {
            let b = ElementBox { source: ifd.plane.source, region, item, swap: item };
            mine.push(pos);
            pos += b.bytes();
            boxes.push(b);
        }
        offsets.push(mine);
    }
    let main_pages = spec.pages.len();
    let mut head = flavor.header(at.first().copied().unwrap_or(0));
    for (i, (ifd, block_offsets)) in ifds.iter().zip(offsets).enumerate() {
        let next = if i + 1 < main_pages { at[i + 1] } else { 0 };
        let subs = ifd.sub_ifds.iter().map(|&s| at[s]).collect();
        let entries = ifd_entries(spec.sample, ifd, block_offsets, subs);
        head.extend(ifd_bytes(flavor, at[i], &entries, next));
    }
    head.resize(data_start as usize, 0);
    let mut b = LayoutBuilder::new(ByteOrder::Little);
    b.bytes(head);
    for e in boxes {
        b.elements(e);
    }
    b.build()
}

/// The entries of one IFD whose blocks start at `block_offsets` and whose SubIFDs are at
/// `sub_ifds`.
fn ifd_entries(
    sample: Sample,
    ifd: &Ifd,
    block_offsets: Vec<u64>,
    sub_ifds: Vec<u64>,
) -> Vec<(u16, Value)> {
    let plane = ifd.plane;
    let long = |n: u64| Value::Long(vec![u32::try_from(n).unwrap_or(u32::MAX)]);
    let item = sample.bytes() as u64;
    let byte_counts: Vec<u64> =
        plane.blocks().map(|r| r.iter().map(|d| d.end - d.start).product::<u64>() * item).collect();
    let mut entries = vec![
        (tag::NEW_SUBFILE_TYPE, Value::Long(vec![u32::from(ifd.reduced)])),
        (tag::IMAGE_WIDTH, long(plane.width)),
        (tag::IMAGE_LENGTH, long(plane.height)),
        (tag::BITS_PER_SAMPLE, Value::Short(vec![sample.bits])),
        (tag::COMPRESSION, Value::Short(vec![1])),
        (tag::PHOTOMETRIC, Value::Short(vec![1])),
        (tag::SAMPLES_PER_PIXEL, Value::Short(vec![1])),
        (tag::PLANAR_CONFIG, Value::Short(vec![1])),
        (tag::SAMPLE_FORMAT, Value::Short(vec![sample.format])),
    ];
    if let Some(d) = ifd.description {
        entries.push((tag::IMAGE_DESCRIPTION, Value::Ascii(d.to_owned())));
    }
    match plane.blocks {
        Blocks::Tiles { length, width } => entries.extend([
            (tag::TILE_WIDTH, long(width)),
            (tag::TILE_LENGTH, long(length)),
            (tag::TILE_OFFSETS, Value::Offsets(block_offsets)),
            (tag::TILE_BYTE_COUNTS, Value::Offsets(byte_counts)),
        ]),
        Blocks::Strips { rows } => entries.extend([
            (tag::STRIP_OFFSETS, Value::Offsets(block_offsets)),
            (tag::ROWS_PER_STRIP, long(rows.min(plane.height.max(1)))),
            (tag::STRIP_BYTE_COUNTS, Value::Offsets(byte_counts)),
        ]),
    }
    if !sub_ifds.is_empty() {
        entries.push((tag::SUB_IFDS, Value::Ifds(sub_ifds)));
    }
    entries
}

/// Test support: the bytes of a layout whose sources are C-order little-endian arrays (the
/// overhang of a box reads as zeros).
#[cfg(test)]
pub(crate) fn materialize(layout: &Layout, sources: &[(&[u8], &[u64])]) -> Vec<u8> {
    use super::Content;
    let mut out = Vec::with_capacity(layout.size as usize);
    for part in layout.parts() {
        match &part.content {
            Content::Bytes(b) => out.extend(b.iter()),
            Content::Elements(e) => {
                let (data, shape) = sources[e.source];
                let item = e.item;
                for at in crate::views::shared::mapping::regions::GridBoxIter::new(e.region.clone())
                {
                    if at.iter().zip(shape).all(|(a, n)| a < n) {
                        let i = at.iter().zip(shape).fold(0, |acc, (a, n)| acc * n + a) as usize;
                        out.extend(&data[i * item..(i + 1) * item]);
                    } else {
                        out.extend(std::iter::repeat_n(0, item));
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::flat::mapping::layout::check;
    use crate::views::flat::mapping::Content;

    fn plane(index: Vec<u64>, height: u64, width: u64, blocks: Blocks) -> Plane {
        Plane { source: 0, index, height, width, blocks }
    }

    /// `count` pages of one plane each (planes 0, 1, ...), without descriptions or pyramids.
    fn plain_pages(count: u64, height: u64, width: u64, blocks: Blocks) -> Vec<Page> {
        let page = |z| Page {
            plane: plane(vec![z], height, width, blocks),
            description: None,
            reduced: vec![],
        };
        (0..count).map(page).collect()
    }

    fn u16_sample() -> Sample {
        Sample::of('u', 2).unwrap()
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }

    fn head(l: &Layout) -> &[u8] {
        match &l.parts()[0].content {
            Content::Bytes(b) => b,
            other => panic!("the file starts with {other:?}"),
        }
    }

    fn elements(l: &Layout, i: usize) -> &ElementBox {
        match &l.parts()[i].content {
            Content::Elements(e) => e,
            other => panic!("part {i} is {other:?}"),
        }
    }

    #[test]
    fn samples_of_image_types_only() {
        assert_eq!(Sample::of('i', 1), Some(Sample { bits: 8, format: 2 }));
        assert_eq!(Sample::of('u', 8), Some(Sample { bits: 64, format: 1 }));
        assert_eq!(Sample::of('f', 4), Some(Sample { bits: 32, format: 3 }));
        assert_eq!(Sample::of('f', 2), None);
        assert_eq!(Sample::of('b', 1), None);
        assert_eq!(Sample::of('c', 8), None);
        assert_eq!(Sample::of('M', 8), None);
    }

    #[test]
    fn tiles_need_sides_of_multiples_of_16() {
        assert_eq!(Blocks::for_chunk(32, 16), Blocks::Tiles { length: 32, width: 16 });
        assert_eq!(Blocks::for_chunk(32, 10), Blocks::Strips { rows: 32 });
        assert_eq!(Blocks::for_chunk(0, 16), Blocks::Strips { rows: 1 });
    }

    #[test]
    fn two_tiled_pages_then_their_tiles() {
        let tiles = Blocks::Tiles { length: 16, width: 16 };
        let pages = plain_pages(2, 20, 16, tiles);
        let l = layout(&TiffSpec { sample: u16_sample(), pages }, CLASSIC_LIMIT);
        let h = head(&l);
        assert_eq!(&h[..4], b"II\x2a\x00");
        let first = u32_at(h, 4) as usize;
        assert_eq!(first, 8);
        // 13 entries: NewSubfileType .. SampleFormat, tile width/length/offsets/counts.
        assert_eq!(u16::from_le_bytes([h[first], h[first + 1]]), 13);
        let next = u32_at(h, first + 2 + 13 * 12) as usize;
        assert!(next > first);
        assert_eq!(u32_at(h, next + 2 + 13 * 12), 0, "the second page ends the chain");
        // Two tiles per page (20 rows of 16-row tiles), the edge one overhanging the array.
        assert_eq!(l.parts().len(), 1 + 4);
        assert_eq!(elements(&l, 2).region, vec![0..1, 16..32, 0..16]);
        assert_eq!(l.size, h.len() as u64 + 4 * 16 * 16 * 2);
        // The first tile's offset (TileOffsets, the 12th entry: 4 bytes inline? no, 2 of them).
        assert_eq!(l.parts()[1].offset as usize, h.len());
    }

    /// Every chunk's last byte is claimed by the one tile or strip holding it, over pages
    /// in C order, for chunks spanning pages, tiles (edge tiles overhanging the array) and
    /// strips; with a reduced plane of a second array.
    #[test]
    fn each_chunk_ends_in_the_block_holding_its_last_corner() {
        let tiles = Blocks::Tiles { length: 16, width: 16 };
        let l = layout(&TiffSpec { sample: u16_sample(), pages: plain_pages(3, 20, 40, tiles) }, 0);
        for chunk in [vec![1, 16, 16], vec![2, 16, 16], vec![3, 16, 16]] {
            let (checked, claimed) = check::last_bytes(&l, &[(vec![3, 20, 40], chunk)]);
            assert_eq!(checked, claimed);
        }
        let strips = Blocks::Strips { rows: 6 };
        let mut pages = plain_pages(2, 15, 10, strips);
        for (z, page) in pages.iter_mut().enumerate() {
            let reduced = Plane { source: 1, ..plane(vec![z as u64], 7, 5, strips) };
            page.reduced.push(reduced);
        }
        let l = layout(&TiffSpec { sample: u16_sample(), pages }, CLASSIC_LIMIT);
        let arrays = [(vec![2, 15, 10], vec![1, 6, 4]), (vec![2, 7, 5], vec![2, 6, 5])];
        assert_eq!(check::last_bytes(&l, &arrays), (2 * 3 * 3 + 2, 2 * 3 * 3 + 2));
        // Pages out of C order (ImageJ's for an array of another order): none claimed.
        let mut pages = plain_pages(2, 15, 10, strips);
        pages.reverse();
        let l = layout(&TiffSpec { sample: u16_sample(), pages }, CLASSIC_LIMIT);
        assert_eq!(check::last_bytes(&l, &[(vec![2, 15, 10], vec![1, 6, 4])]).1, 0);
    }

    #[test]
    fn strips_cover_whole_rows_and_the_last_is_short() {
        let p = plane(vec![], 25, 30, Blocks::Strips { rows: 10 });
        let blocks: Vec<_> = p.blocks().collect();
        assert_eq!(blocks, vec![vec![0..10, 0..30], vec![10..20, 0..30], vec![20..25, 0..30]]);
    }

    #[test]
    fn big_tiff_when_the_file_exceeds_the_limit() {
        let page = Page {
            plane: plane(vec![], 32, 32, Blocks::Tiles { length: 16, width: 16 }),
            description: Some("x".into()),
            reduced: vec![],
        };
        let spec = TiffSpec { sample: u16_sample(), pages: vec![page] };
        let classic = layout(&spec, CLASSIC_LIMIT);
        let big = layout(&spec, 100);
        assert_eq!(&head(&classic)[..4], b"II\x2a\x00");
        assert_eq!(&head(&big)[..4], b"II\x2b\x00");
        assert_eq!(elements(&classic, 1), elements(&big, 1));
    }

    /// Walks a BigTIFF's IFD chain: every IFD's TileOffsets, in order.
    fn big_tile_offsets(h: &[u8]) -> Vec<u64> {
        let u64_at = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().unwrap());
        let mut out = Vec::new();
        let mut ifd = u64_at(8) as usize;
        while ifd != 0 {
            let n = u64_at(ifd) as usize;
            for e in 0..n {
                let entry = ifd + 8 + e * 20;
                if u16::from_le_bytes([h[entry], h[entry + 1]]) == tag::TILE_OFFSETS {
                    assert_eq!(u16::from_le_bytes([h[entry + 2], h[entry + 3]]), 16, "LONG8");
                    let count = u64_at(entry + 4) as usize;
                    let at = if count == 1 { entry + 12 } else { u64_at(entry + 12) as usize };
                    out.extend((0..count).map(|i| u64_at(at + 8 * i)));
                }
            }
            ifd = u64_at(ifd + 8 + n * 20) as usize;
        }
        out
    }

    #[test]
    fn big_tiff_offsets_point_at_the_tiles() {
        let tiles = Blocks::Tiles { length: 16, width: 32 };
        let pages = plain_pages(3, 40, 40, tiles);
        let l = layout(&TiffSpec { sample: u16_sample(), pages }, 0);
        let h = head(&l);
        assert_eq!(&h[..8], b"II\x2b\x00\x08\x00\x00\x00");
        let starts: Vec<u64> = l.parts()[1..].iter().map(|p| p.offset).collect();
        assert_eq!(starts.len(), 3 * 3 * 2);
        assert_eq!(big_tile_offsets(h), starts);
    }

    #[test]
    fn reduced_planes_are_sub_ifds_after_the_chain() {
        let tiles = Blocks::Tiles { length: 16, width: 16 };
        let mut reduced = plane(vec![0], 8, 8, tiles);
        reduced.source = 1;
        let page = Page {
            plane: plane(vec![0], 16, 16, tiles),
            description: None,
            reduced: vec![reduced],
        };
        let l = layout(&TiffSpec { sample: u16_sample(), pages: vec![page] }, CLASSIC_LIMIT);
        let h = head(&l);
        // 14 entries with SubIFDs (the 13th by tag, before SampleFormat): its offset is inline.
        let entries = 8 + 2;
        assert_eq!(u16::from_le_bytes([h[8], h[9]]), 14);
        let sub_ifds = entries + 12 * 12;
        assert_eq!(&h[sub_ifds..sub_ifds + 8], &[0x4a, 0x01, 13, 0, 1, 0, 0, 0]);
        let sub = u32_at(h, sub_ifds + 8) as usize;
        assert_eq!(u32_at(h, sub + 2 + 8), 1, "NewSubfileType says reduced");
        let e = elements(&l, 2);
        assert_eq!((e.source, &e.region), (1, &vec![0..1, 0..16, 0..16]));
    }
}
