//! Assembling a complete shard object from encoded inner chunks (for the write
//! path): chunk bytes back to back, plus the index at the start or end.

use thiserror::Error;

use crate::zarr::sharding::index::{ChunkEntry, IndexError, ShardIndex};
use crate::zarr::sharding::{IndexLocation, ShardLayout};

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BuildError {
    #[error("inner chunk {local} is outside a shard of {n_entries} chunks")]
    LocalOutOfRange { local: u64, n_entries: u64 },
    #[error("inner chunk {0} given twice")]
    Duplicate(u64),
    #[error("shard would exceed the addressable size")]
    TooLarge,
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error("a new shard would need an index of {entries} entries (limit for a new shard {MAX_NEW_SHARD_ENTRIES})")]
    NewIndexTooLarge { entries: u64 },
}

/// Most inner chunks a shard created by a write may have (a 16 MiB index). Reading a shard
/// allocates its index only once the store holds that many bytes; creating one would
/// allocate it (and twice more while encoding) from the metadata alone, so an absurd shape
/// is refused here instead. Rewriting an existing shard is bounded by the shard read.
pub const MAX_NEW_SHARD_ENTRIES: u64 = 1 << 20;

/// Refuse to create a shard of `layout` when its index alone would be unreasonably large.
pub fn check_new_shard(layout: &ShardLayout) -> Result<(), BuildError> {
    if layout.n_entries > MAX_NEW_SHARD_ENTRIES {
        return Err(BuildError::NewIndexTooLarge { entries: layout.n_entries });
    }
    Ok(())
}

/// Build the shard holding `chunks` (`(local index, encoded bytes)`), stored in the
/// order given. Returns `None` when there are no chunks: an all-fill shard is
/// deleted, not stored, as zarr-python, zarrs and tensorstore do.
pub fn build_shard(
    layout: &ShardLayout,
    chunks: &[(u64, &[u8])],
) -> Result<Option<Vec<u8>>, BuildError> {
    if chunks.is_empty() {
        return Ok(None);
    }
    let mut index = ShardIndex::new_empty(layout)?;
    let index_size = layout.index_size();
    // Offsets are absolute, so data starts after a leading index.
    let data_start = match layout.index_location {
        IndexLocation::Start => index_size,
        IndexLocation::End => 0,
    };
    let mut offset = data_start;
    for &(local, bytes) in chunks {
        if local >= layout.n_entries {
            return Err(BuildError::LocalOutOfRange { local, n_entries: layout.n_entries });
        }
        if index.entry(local).is_some() {
            return Err(BuildError::Duplicate(local));
        }
        let nbytes = bytes.len() as u64;
        index.set(local, Some(ChunkEntry { offset, nbytes }))?;
        offset = offset.checked_add(nbytes).ok_or(BuildError::TooLarge)?;
    }
    let total = offset.checked_add(index_size).ok_or(BuildError::TooLarge)?;
    let total = usize::try_from(total).map_err(|_| BuildError::TooLarge)?;

    let mut out = Vec::with_capacity(total);
    let encoded_index = index.encode(layout);
    if layout.index_location == IndexLocation::Start {
        out.extend_from_slice(&encoded_index);
    }
    for &(_, bytes) in chunks {
        out.extend_from_slice(bytes);
    }
    if layout.index_location == IndexLocation::End {
        out.extend_from_slice(&encoded_index);
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::sharding::index::tests::layout;
    use proptest::prelude::*;

    fn decode_all(l: &ShardLayout, shard: &[u8]) -> ShardIndex {
        let size = shard.len() as u64;
        let r = ShardIndex::index_byte_range(l, size).unwrap();
        ShardIndex::decode(l, &shard[r.start as usize..r.end as usize], size).unwrap()
    }

    #[test]
    fn empty_is_none() {
        let l = layout(4, IndexLocation::End, true);
        assert_eq!(build_shard(&l, &[]), Ok(None));
    }

    /// The bound is checked from the layout, before anything is allocated: a layout of 2^40
    /// entries (possible only hand-built, `shard_layout` refuses it) and one at the read cap
    /// are refused; one at the write limit is fine.
    #[test]
    fn new_shard_index_is_bounded() {
        let mut huge = layout(1, IndexLocation::End, true);
        huge.n_entries = 1 << 40;
        assert_eq!(check_new_shard(&huge), Err(BuildError::NewIndexTooLarge { entries: 1 << 40 }));
        let at_read_cap =
            layout(crate::zarr::sharding::MAX_INDEX_ENTRIES, IndexLocation::End, true);
        assert!(check_new_shard(&at_read_cap).is_err());
        assert_eq!(
            check_new_shard(&layout(MAX_NEW_SHARD_ENTRIES, IndexLocation::End, true)),
            Ok(())
        );
        assert!(check_new_shard(&layout(MAX_NEW_SHARD_ENTRIES + 1, IndexLocation::Start, true))
            .is_err());
    }

    #[test]
    fn errors() {
        let l = layout(4, IndexLocation::End, true);
        assert_eq!(
            build_shard(&l, &[(4, b"x")]),
            Err(BuildError::LocalOutOfRange { local: 4, n_entries: 4 })
        );
        assert_eq!(build_shard(&l, &[(1, b"x"), (1, b"y")]), Err(BuildError::Duplicate(1)));
    }

    #[test]
    fn exact_bytes_end() {
        let l = layout(2, IndexLocation::End, false);
        let s = build_shard(&l, &[(1, b"ab"), (0, b"c")]).unwrap().unwrap();
        let mut want = b"abc".to_vec();
        for v in [2u64, 1, 0, 2] {
            want.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(s, want);
    }

    #[test]
    fn exact_bytes_start() {
        let l = layout(1, IndexLocation::Start, true);
        let s = build_shard(&l, &[(0, b"xyz")]).unwrap().unwrap();
        let mut table = Vec::new();
        table.extend_from_slice(&20u64.to_le_bytes());
        table.extend_from_slice(&3u64.to_le_bytes());
        let mut want = table.clone();
        want.extend_from_slice(&crc32c::crc32c(&table).to_le_bytes());
        want.extend_from_slice(b"xyz");
        assert_eq!(s, want);
    }

    proptest! {
        #[test]
        fn roundtrip(
            n in 1u64..40,
            start in any::<bool>(),
            crc in any::<bool>(),
            picks in proptest::collection::btree_map(0u64..40, proptest::collection::vec(any::<u8>(), 0..20), 0..20),
        ) {
            let loc = if start { IndexLocation::Start } else { IndexLocation::End };
            let l = layout(n, loc, crc);
            let chunks: Vec<(u64, Vec<u8>)> = picks.into_iter().filter(|(k, _)| *k < n).collect();
            let refs: Vec<(u64, &[u8])> = chunks.iter().map(|(k, v)| (*k, v.as_slice())).collect();
            let built = build_shard(&l, &refs).unwrap();
            let Some(shard) = built else {
                prop_assert!(chunks.is_empty());
                return Ok(());
            };
            let idx = decode_all(&l, &shard);
            prop_assert_eq!(idx.present().count(), chunks.len());
            for (k, v) in &chunks {
                let e = idx.entry(*k).unwrap();
                prop_assert_eq!(&shard[e.offset as usize..(e.offset + e.nbytes) as usize], v.as_slice());
            }
        }
    }
}
