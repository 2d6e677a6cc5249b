//! The shard index: where it sits in a shard object, decoding and validating it
//! (length, CRC-32C, entry bounds), and encoding it back for the write path.

use std::ops::Range;

use thiserror::Error;

use crate::zarr::sharding::{IndexLocation, ShardLayout, MAX_INDEX_ENTRIES};

/// The `(offset, nbytes)` pair that marks an absent inner chunk.
const ABSENT: u64 = u64::MAX;

/// Where one present inner chunk lies in its shard object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkEntry {
    /// Absolute byte offset in the shard object (also when the index is at the start).
    pub offset: u64,
    pub nbytes: u64,
}

impl ChunkEntry {
    /// The byte range of the chunk; validated entries never overflow.
    pub fn range(&self) -> Range<u64> {
        self.offset..self.offset.saturating_add(self.nbytes)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IndexError {
    #[error("shard index is {actual} bytes, expected {expected}")]
    WrongLength { expected: u64, actual: u64 },
    #[error("shard index checksum mismatch: stored {expected:#010x}, computed {actual:#010x}")]
    ChecksumMismatch { expected: u32, actual: u32 },
    #[error("entry {index} ({offset}+{nbytes}) lies outside the {shard_size}-byte shard")]
    EntryOutOfBounds { index: u64, offset: u64, nbytes: u64, shard_size: u64 },
    #[error("entry {index} ({offset}+{nbytes}) overlaps the shard index")]
    EntryOverlapsIndex { index: u64, offset: u64, nbytes: u64 },
    #[error("shard of {shard_size} bytes is smaller than its {index_size}-byte index")]
    ShardTooSmall { shard_size: u64, index_size: u64 },
    #[error("shard index of {0} entries exceeds the limit")]
    TooManyEntries(u64),
    #[error("no entry {local} in an index of {len}")]
    NoSuchEntry { local: u64, len: u64 },
}

/// A decoded, validated shard index: one slot per inner chunk, C order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardIndex {
    /// Raw `(offset, nbytes)` pairs, `(ABSENT, ABSENT)` for absent chunks; kept raw
    /// so memory matches the encoded index (16 bytes per entry).
    entries: Vec<(u64, u64)>,
}

impl ShardIndex {
    /// Byte range of the index inside a shard object of `shard_size` bytes.
    pub fn index_byte_range(
        layout: &ShardLayout,
        shard_size: u64,
    ) -> Result<Range<u64>, IndexError> {
        let index_size = layout.index_size();
        if shard_size < index_size {
            return Err(IndexError::ShardTooSmall { shard_size, index_size });
        }
        Ok(match layout.index_location {
            IndexLocation::Start => 0..index_size,
            IndexLocation::End => shard_size - index_size..shard_size,
        })
    }

    /// Decode the index bytes of a shard object of `shard_size` bytes, rejecting
    /// anything that would make a later read go out of the shard.
    pub fn decode(
        layout: &ShardLayout,
        index_bytes: &[u8],
        shard_size: u64,
    ) -> Result<ShardIndex, IndexError> {
        let expected = layout.index_size();
        let actual = index_bytes.len() as u64;
        if actual != expected {
            return Err(IndexError::WrongLength { expected, actual });
        }
        let region = Self::index_byte_range(layout, shard_size)?;
        // `expected` is capped (see MAX_INDEX_ENTRIES) and equals the slice length,
        // so these conversions and slices are in range.
        let table_len = 16 * layout.n_entries as usize;
        let (table, tail) = index_bytes.split_at(table_len);
        if layout.index_has_crc32c {
            let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
            let computed = crc32c::crc32c(table);
            if stored != computed {
                return Err(IndexError::ChecksumMismatch { expected: stored, actual: computed });
            }
        }
        let mut entries = Vec::with_capacity(layout.n_entries as usize);
        for (i, pair) in table.chunks_exact(16).enumerate() {
            let index = i as u64;
            let offset = le_u64(&pair[..8]);
            let nbytes = le_u64(&pair[8..]);
            if !(offset == ABSENT && nbytes == ABSENT) {
                check_entry(index, offset, nbytes, shard_size, &region)?;
            }
            entries.push((offset, nbytes));
        }
        Ok(ShardIndex { entries })
    }

    /// The index of a whole shard object held in memory.
    pub fn of_shard(layout: &ShardLayout, shard: &[u8]) -> Result<ShardIndex, IndexError> {
        let size = shard.len() as u64;
        let r = Self::index_byte_range(layout, size)?;
        Self::decode(layout, &shard[r.start as usize..r.end as usize], size)
    }

    /// An index with every chunk absent, sized for `layout`. Refuses a hand-built
    /// layout past [`MAX_INDEX_ENTRIES`] rather than allocating for it.
    pub fn new_empty(layout: &ShardLayout) -> Result<ShardIndex, IndexError> {
        let n = layout.n_entries;
        if n > MAX_INDEX_ENTRIES {
            return Err(IndexError::TooManyEntries(n));
        }
        Ok(ShardIndex { entries: vec![(ABSENT, ABSENT); n as usize] })
    }

    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The chunk at C-order position `local`; `None` if absent (or out of range).
    pub fn entry(&self, local: u64) -> Option<ChunkEntry> {
        let &(offset, nbytes) = self.entries.get(usize::try_from(local).ok()?)?;
        if offset == ABSENT && nbytes == ABSENT {
            None
        } else {
            Some(ChunkEntry { offset, nbytes })
        }
    }

    /// Present chunks as `(local index, entry)`, in index order.
    pub fn present(&self) -> impl Iterator<Item = (u64, ChunkEntry)> + '_ {
        (0..self.len()).filter_map(|i| self.entry(i).map(|e| (i, e)))
    }

    /// True if no chunk is present (the shard would be deleted, not stored).
    pub fn all_absent(&self) -> bool {
        self.present().next().is_none()
    }

    /// Set or clear one slot. Entries set here are not bounds-checked against a
    /// shard; [`encode`](Self::encode) writes them as given.
    pub fn set(&mut self, local: u64, entry: Option<ChunkEntry>) -> Result<(), IndexError> {
        let len = self.len();
        let slot = usize::try_from(local)
            .ok()
            .and_then(|i| self.entries.get_mut(i))
            .ok_or(IndexError::NoSuchEntry { local, len })?;
        *slot = entry.map_or((ABSENT, ABSENT), |e| (e.offset, e.nbytes));
        Ok(())
    }

    /// The index bytes: little-endian pairs, then the CRC-32C if the layout has one.
    pub fn encode(&self, layout: &ShardLayout) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * 16 + 4);
        for &(offset, nbytes) in &self.entries {
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&nbytes.to_le_bytes());
        }
        if layout.index_has_crc32c {
            let crc = crc32c::crc32c(&out);
            out.extend_from_slice(&crc.to_le_bytes());
        }
        out
    }
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(b);
    u64::from_le_bytes(a)
}

/// A present entry must lie within the shard and outside the index itself.
fn check_entry(
    index: u64,
    offset: u64,
    nbytes: u64,
    shard_size: u64,
    region: &Range<u64>,
) -> Result<(), IndexError> {
    let end = offset
        .checked_add(nbytes)
        .filter(|&end| end <= shard_size)
        .ok_or(IndexError::EntryOutOfBounds { index, offset, nbytes, shard_size })?;
    // Empty ranges overlap nothing; otherwise the usual half-open test.
    if nbytes > 0 && offset < region.end && end > region.start {
        return Err(IndexError::EntryOverlapsIndex { index, offset, nbytes });
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::zarr::sharding::shard_layout;
    use crate::zarr::sharding::tests::meta_with;
    use serde_json::json;

    /// A 1-d layout with `n` entries.
    pub(crate) fn layout(n: u64, location: IndexLocation, crc: bool) -> ShardLayout {
        let m = meta_with(|v| {
            v["shape"] = json!([1000]);
            v["chunk_grid"]["configuration"]["chunk_shape"] = json!([n]);
            let c = v["codecs"][0]["configuration"].as_object_mut().unwrap();
            c.insert("chunk_shape".into(), json!([1]));
            let loc = if location == IndexLocation::Start { "start" } else { "end" };
            c.insert("index_location".into(), json!(loc));
            let ic = if crc { json!(["bytes", "crc32c"]) } else { json!(["bytes"]) };
            c.insert("index_codecs".into(), ic);
        });
        shard_layout(&m).unwrap()
    }

    /// The encoded bytes of an index of `(offset, nbytes)` pairs (little endian, with a crc32c).
    pub(crate) fn raw_index(pairs: &[(u64, u64)], crc: bool) -> Vec<u8> {
        let mut b = Vec::new();
        for (o, n) in pairs {
            b.extend_from_slice(&o.to_le_bytes());
            b.extend_from_slice(&n.to_le_bytes());
        }
        if crc {
            let c = crc32c::crc32c(&b);
            b.extend_from_slice(&c.to_le_bytes());
        }
        b
    }

    #[test]
    fn byte_range_start_end_and_too_small() {
        let l = layout(3, IndexLocation::End, true);
        assert_eq!(ShardIndex::index_byte_range(&l, 100).unwrap(), 48..100);
        assert_eq!(ShardIndex::index_byte_range(&l, 52).unwrap(), 0..52);
        assert_eq!(
            ShardIndex::index_byte_range(&l, 51),
            Err(IndexError::ShardTooSmall { shard_size: 51, index_size: 52 })
        );
        let l = layout(3, IndexLocation::Start, false);
        assert_eq!(ShardIndex::index_byte_range(&l, 100).unwrap(), 0..48);
    }

    #[test]
    fn decode_end_with_crc() {
        let l = layout(3, IndexLocation::End, true);
        // Chunks stored out of order, with a gap; chunk 1 absent.
        let bytes = raw_index(&[(10, 5), (u64::MAX, u64::MAX), (0, 7)], true);
        let idx = ShardIndex::decode(&l, &bytes, 15 + 52).unwrap();
        assert_eq!(idx.len(), 3);
        assert_eq!(idx.entry(0), Some(ChunkEntry { offset: 10, nbytes: 5 }));
        assert_eq!(idx.entry(1), None);
        assert_eq!(idx.entry(2), Some(ChunkEntry { offset: 0, nbytes: 7 }));
        assert_eq!(idx.entry(3), None);
        let present: Vec<_> = idx.present().map(|(i, _)| i).collect();
        assert_eq!(present, [0, 2]);
        assert_eq!(idx.entry(0).unwrap().range(), 10..15);
    }

    #[test]
    fn decode_start_offsets_are_absolute() {
        let l = layout(2, IndexLocation::Start, false);
        let bytes = raw_index(&[(32, 4), (36, 4)], false);
        let idx = ShardIndex::decode(&l, &bytes, 40).unwrap();
        assert_eq!(idx.entry(1), Some(ChunkEntry { offset: 36, nbytes: 4 }));
        // An entry pointing into the index at the start is corrupt.
        let bytes = raw_index(&[(0, 4), (36, 4)], false);
        assert_eq!(
            ShardIndex::decode(&l, &bytes, 40),
            Err(IndexError::EntryOverlapsIndex { index: 0, offset: 0, nbytes: 4 })
        );
    }

    #[test]
    fn overlap_with_index_at_end() {
        let l = layout(1, IndexLocation::End, true);
        // Shard is 30 bytes, index occupies 10..30.
        let bytes = raw_index(&[(5, 6)], true);
        assert!(matches!(
            ShardIndex::decode(&l, &bytes, 30),
            Err(IndexError::EntryOverlapsIndex { index: 0, .. })
        ));
        let bytes = raw_index(&[(5, 5)], true);
        assert!(ShardIndex::decode(&l, &bytes, 30).is_ok());
    }

    #[test]
    fn crc_mismatch() {
        let l = layout(2, IndexLocation::End, true);
        let mut bytes = raw_index(&[(0, 1), (1, 1)], true);
        bytes[3] ^= 1;
        assert!(matches!(
            ShardIndex::decode(&l, &bytes, 100),
            Err(IndexError::ChecksumMismatch { .. })
        ));
        // The checksum itself corrupted.
        let mut bytes = raw_index(&[(0, 1), (1, 1)], true);
        let last = bytes.len() - 1;
        bytes[last] ^= 0x80;
        assert!(matches!(
            ShardIndex::decode(&l, &bytes, 100),
            Err(IndexError::ChecksumMismatch { .. })
        ));
    }

    #[test]
    fn crc_is_castagnoli_little_endian() {
        // Known CRC-32C check value of "123456789".
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        let l = layout(1, IndexLocation::End, true);
        let idx = {
            let mut i = ShardIndex::new_empty(&l).unwrap();
            i.set(0, Some(ChunkEntry { offset: 0, nbytes: 0 })).unwrap();
            i
        };
        let enc = idx.encode(&l);
        assert_eq!(&enc[16..], &crc32c::crc32c(&[0u8; 16]).to_le_bytes());
    }

    #[test]
    fn out_of_bounds_entries() {
        let l = layout(2, IndexLocation::End, false);
        let cases = [
            ((0, 100), 1),          // past the end
            ((u64::MAX, 1), 0),     // half an absent marker
            ((1, u64::MAX), 0),     // the other half
            ((u64::MAX - 1, 5), 0), // overflow
            ((u64::MAX, 0), 0),
        ];
        for ((o, n), slot) in cases {
            let mut pairs = [(0, 1), (1, 1)];
            pairs[slot] = (o, n);
            let bytes = raw_index(&pairs, false);
            assert!(
                matches!(
                    ShardIndex::decode(&l, &bytes, 64),
                    Err(IndexError::EntryOutOfBounds { index, .. }) if index == slot as u64
                ),
                "{o} {n}"
            );
        }
    }

    #[test]
    fn wrong_length_and_small_shard() {
        let l = layout(2, IndexLocation::End, true);
        let bytes = raw_index(&[(0, 1), (1, 1)], true);
        assert_eq!(
            ShardIndex::decode(&l, &bytes[..35], 100),
            Err(IndexError::WrongLength { expected: 36, actual: 35 })
        );
        let mut long = bytes.clone();
        long.push(0);
        assert!(matches!(ShardIndex::decode(&l, &long, 100), Err(IndexError::WrongLength { .. })));
        assert!(matches!(ShardIndex::decode(&l, &[], 100), Err(IndexError::WrongLength { .. })));
        assert!(matches!(
            ShardIndex::decode(&l, &bytes, 35),
            Err(IndexError::ShardTooSmall { .. })
        ));
    }

    #[test]
    fn huge_index_refused_before_allocating() {
        // A layout can never claim more than the cap, and a hand-built one that
        // does is refused by length before any allocation.
        let mut l = layout(1, IndexLocation::End, false);
        l.n_entries = 1 << 60;
        assert!(matches!(
            ShardIndex::decode(&l, &[0; 16], u64::MAX),
            Err(IndexError::WrongLength { .. })
        ));
        assert_eq!(ShardIndex::new_empty(&l), Err(IndexError::TooManyEntries(1 << 60)));
    }

    #[test]
    fn set_encode_decode() {
        let l = layout(4, IndexLocation::End, true);
        let mut idx = ShardIndex::new_empty(&l).unwrap();
        assert!(idx.all_absent());
        idx.set(2, Some(ChunkEntry { offset: 3, nbytes: 4 })).unwrap();
        assert_eq!(idx.set(4, None), Err(IndexError::NoSuchEntry { local: 4, len: 4 }));
        assert!(!idx.all_absent());
        let enc = idx.encode(&l);
        assert_eq!(enc.len() as u64, l.index_size());
        assert_eq!(ShardIndex::decode(&l, &enc, 7 + l.index_size()).unwrap(), idx);
        idx.set(2, None).unwrap();
        assert!(idx.all_absent());
    }

    proptest::proptest! {
        /// Arbitrary index bytes never panic, and an accepted index only points
        /// inside the shard and outside the index.
        #[test]
        fn decode_untrusted(
            n in 1u64..6,
            start in proptest::prelude::any::<bool>(),
            crc in proptest::prelude::any::<bool>(),
            words in proptest::collection::vec(
                proptest::prop_oneof![0u64..200, proptest::prelude::Just(u64::MAX), proptest::prelude::any::<u64>()],
                0..14,
            ),
            shard_size in 0u64..300,
        ) {
            let l = layout(n, if start { IndexLocation::Start } else { IndexLocation::End }, crc);
            let pairs: Vec<(u64, u64)> = words.chunks_exact(2).map(|w| (w[0], w[1])).collect();
            let bytes = raw_index(&pairs, crc);
            if let Ok(idx) = ShardIndex::decode(&l, &bytes, shard_size) {
                let region = ShardIndex::index_byte_range(&l, shard_size).unwrap();
                for (_, e) in idx.present() {
                    proptest::prop_assert!(e.offset.checked_add(e.nbytes).unwrap() <= shard_size);
                    proptest::prop_assert!(e.nbytes == 0 || e.range().end <= region.start || e.offset >= region.end);
                }
            }
        }
    }
}
