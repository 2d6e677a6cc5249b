//! The `zstd` bytes->bytes codec (one or more Zstandard frames).

use super::{read_bounded, CodecError, SizeBound};

pub(super) fn decode(data: &[u8], bound: SizeBound) -> Result<Vec<u8>, CodecError> {
    let decoder = ::zstd::stream::read::Decoder::with_buffer(data)
        .map_err(|e| CodecError::Corrupt { codec: "zstd", reason: e.to_string() })?;
    read_bounded("zstd", decoder, bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        (0..10_000u32).flat_map(|i| (i / 7).to_le_bytes()).collect()
    }

    #[test]
    fn roundtrip_and_bounds() {
        let raw = sample();
        let enc = ::zstd::bulk::compress(&raw, 3).unwrap();
        crate::zarr::codecs::tests::check_bounds(decode, &enc, &raw);
    }

    #[test]
    fn truncated_or_garbage_is_an_error() {
        let raw = sample();
        let enc = ::zstd::bulk::compress(&raw, 3).unwrap();
        let n = raw.len() as u64;
        for cut in 0..enc.len() {
            assert!(decode(&enc[..cut], SizeBound::Exact(n)).is_err(), "cut {cut}");
        }
        assert!(decode(b"definitely not zstd", SizeBound::AtMost(1 << 20)).is_err());
        let mut trailing = enc.clone();
        trailing.extend_from_slice(b"junk");
        assert!(decode(&trailing, SizeBound::Exact(n)).is_err());
    }

    #[test]
    fn bomb_stops_at_the_bound() {
        // 64 MiB of zeros compresses to a few KiB; a 1 KiB bound stops it early.
        let enc = ::zstd::bulk::compress(&vec![0u8; 64 << 20], 1).unwrap();
        assert!(matches!(decode(&enc, SizeBound::Exact(1024)), Err(CodecError::WrongSize { .. })));
    }
}
