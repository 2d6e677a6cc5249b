//! Reads of flat files (`views::flat::mapping`): a byte range maps to the layout's parts under it;
//! literal parts are copied, and the elements of an element part become a few boxes in C order
//! (`views::flat::mapping::layout::c_order_boxes`), each assembled from the decoded chunks under it
//! (`views::shared::regions`) into a buffer of the fill value. Only the chunks under the range are
//! read; a chunk that cannot be decoded fails the reads that touch it (EIO) and no other.
//!
//! Drop-behind: each read tells the decoded-chunk cache how many elements of each chunk under
//! it it read (counting an element in the read holding its last byte), of how many the file
//! holds (`Layout::elements_in_file`), and whether it covered the chunk's last byte in the file
//! (`Layout::last_byte_of`); the cache lets the chunk go once both are reached. A sequential
//! reader needs it no more (the page cache, or the HTTP client, has its bytes), so it holds
//! about one chunk row, not a cache full; a reader that never reaches a chunk's last byte
//! leaves it to the LRU.

use std::ops::Range;

use bytes::Bytes;
use futures::future::try_join_all;

use crate::ttl_cache::TtlCache;
use crate::views::flat::mapping::layout::{c_order_boxes, overlap};
use crate::views::flat::mapping::{ByteOrder, Content, ElementBox, FlatArray, FlatFile, Layout};
use crate::views::shared::error::{FsError, FsResult};
use crate::views::shared::mapping::node::{Node, SourceChunk};
use crate::views::shared::mapping::regions::{chunks_under, Placed, Region};
use crate::views::shared::regions::ChunkSource;

/// Reads flat files from the chunks of the view below.
pub struct FlatReader<'a> {
    pub source: ChunkSource<'a>,
    /// Chunk path below -> its node (`None`: absent), for the metadata TTL: a reader walking
    /// a file asks for the chunks of one chunk row many times (each read covers a few
    /// element rows across all of them), which must not cost a request each time.
    pub found: &'a TtlCache<Option<Node>>,
}

/// Reverse the bytes of every `unit` bytes of `buf`.
fn swap_units(buf: &mut [u8], unit: usize) {
    if unit > 1 {
        buf.chunks_exact_mut(unit).for_each(<[u8]>::reverse);
    }
}

impl FlatReader<'_> {
    /// Bytes `offset .. offset + size` of `file` (`path` names it in errors).
    pub async fn read_flat(
        &self,
        path: &str,
        file: &FlatFile,
        offset: u64,
        size: u32,
    ) -> FsResult<Bytes> {
        let layout = &file.layout;
        let pieces =
            layout.covering(offset..offset.saturating_add(size as u64)).map(|c| async move {
                match &c.part.content {
                    Content::Bytes(b) => FsResult::Ok((
                        b.slice(c.within.start as usize..c.within.end as usize),
                        Vec::new(),
                    )),
                    Content::Elements(eb) => {
                        let (dir, array) =
                            file.dirs.get(eb.source).zip(file.arrays.get(eb.source)).ok_or_else(
                                || FsError::Corrupt(format!("{path}: no array {}", eb.source)),
                            )?;
                        let at = Within { layout, eb, bytes: c.within.clone() };
                        let (mut out, read) = self.read_elements(dir, array, at).await?;
                        if layout.order == ByteOrder::Big {
                            swap_units(&mut out, eb.swap);
                        }
                        Ok((Bytes::from(out), read))
                    }
                }
            });
        let (parts, read): (Vec<Bytes>, Vec<Vec<ChunkRead>>) =
            try_join_all(pieces).await?.into_iter().unzip();
        // Only now: a chunk let go while another piece of this read still wanted it would
        // be decoded twice.
        for r in read.iter().flatten() {
            let key = ChunkSource::decoded_key(&r.chunk.below, &r.chunk.node);
            self.source.cache.note_read(&key, r.elements, r.in_file, r.last);
        }
        if let [one] = parts.as_slice() {
            return Ok(one.clone());
        }
        Ok(Bytes::from(parts.concat()))
    }

    /// Bytes `at.bytes` of the elements of `at.eb`, of `array` (in directory `dir` below),
    /// little-endian, and what the read covered of each chunk under it (for chunks whose
    /// elements the layout can count).
    async fn read_elements(
        &self,
        dir: &str,
        array: &FlatArray,
        at: Within<'_>,
    ) -> FsResult<(Vec<u8>, Vec<ChunkRead>)> {
        let (eb, within) = (at.eb, &at.bytes);
        let item = eb.item as u64;
        let elements = within.start / item..within.end.div_ceil(item);
        let boxes = c_order_boxes(&eb.region, elements.clone());
        let read = try_join_all(boxes.iter().map(|b| self.read_box(dir, array, b))).await?;
        let (buffers, sources): (Vec<Vec<u8>>, Vec<Vec<SourceChunk>>) = read.into_iter().unzip();
        // An element counts in the read that covers its last byte.
        let counted = c_order_boxes(&eb.region, within.start / item..within.end / item);
        let mut chunks: Vec<SourceChunk> = sources.into_iter().flatten().collect();
        chunks.sort_by(|a, b| a.below.cmp(&b.below));
        chunks.dedup_by(|a, b| a.below == b.below);
        let read = chunks.into_iter().filter_map(|chunk| {
            let cbox = ChunkSource::chunk_box(&chunk, &array.grid, &array.specs)?;
            let in_file = at.layout.elements_in_file(eb.source, &cbox)?;
            let elements = counted.iter().map(|b| overlap(&cbox, b)).sum();
            let last = at.layout.last_byte_of(eb, &cbox).is_some_and(|b| within.contains(&b));
            Some(ChunkRead { chunk, elements, in_file, last })
        });
        let read = read.collect();
        let mut out = if buffers.len() == 1 {
            buffers.into_iter().next().unwrap_or_default()
        } else {
            buffers.concat()
        };
        let skip = (within.start - elements.start * item) as usize;
        out.truncate(skip + (within.end - within.start) as usize);
        out.drain(..skip);
        Ok((out, read))
    }

    /// The elements of `region` (array coordinates; past the array: the fill value) in C order,
    /// and the stored chunks under it.
    async fn read_box(
        &self,
        dir: &str,
        array: &FlatArray,
        region: &Region,
    ) -> FsResult<(Vec<u8>, Vec<SourceChunk>)> {
        let shape: Vec<u64> = region.iter().map(|r| r.end - r.start).collect();
        let origin: Vec<u64> = region.iter().map(|r| r.start).collect();
        let elements: u64 = shape.iter().product();
        let mut out = array.fill.repeat(elements as usize);
        let bounds = chunks_under(&array.grid, region);
        let sources = self.source.lookup_chunks(dir, &array.keys, bounds, Some(self.found)).await?;
        let placed = Placed { origin: &origin, shape: &shape };
        let (grid, specs) = (&array.grid, &array.specs);
        self.source.assemble(&mut out, placed, &sources, grid, specs, array.item).await?;
        Ok((out, sources))
    }
}

/// What one read covered of one chunk: `elements` of the `in_file` the file holds of it, and
/// whether its last byte in the file (`last`).
struct ChunkRead {
    chunk: SourceChunk,
    elements: u64,
    in_file: u64,
    last: bool,
}

/// What a read covers of one element part of a file: bytes `bytes` (relative to the part's
/// first byte) of box `eb` of `layout`.
struct Within<'a> {
    layout: &'a Layout,
    eb: &'a ElementBox,
    bytes: Range<u64>,
}
