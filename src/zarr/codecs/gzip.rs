//! The `gzip` bytes->bytes codec: RFC 1952 gzip (not zlib), possibly several
//! members, as Python's `gzip` module reads it.

use flate2::read::MultiGzDecoder;

use super::{read_bounded, CodecError, SizeBound};

pub(super) fn decode(data: &[u8], bound: SizeBound) -> Result<Vec<u8>, CodecError> {
    read_bounded("gzip", MultiGzDecoder::new(data), bound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{write::GzEncoder, write::ZlibEncoder, Compression};
    use std::io::Write;

    fn gz(raw: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::new(5));
        e.write_all(raw).unwrap();
        e.finish().unwrap()
    }

    fn sample() -> Vec<u8> {
        (0..5_000u32).flat_map(|i| (i % 251).to_be_bytes()).collect()
    }

    #[test]
    fn roundtrip_and_multimember() {
        let raw = sample();
        let n = raw.len() as u64;
        crate::zarr::codecs::tests::check_bounds(decode, &gz(&raw), &raw);
        let mut two = gz(&raw[..1000]);
        two.extend(gz(&raw[1000..]));
        assert_eq!(decode(&two, SizeBound::Exact(n)).unwrap(), raw);
    }

    #[test]
    fn truncated_zlib_and_corrupt_are_errors() {
        let raw = sample();
        let n = raw.len() as u64;
        let enc = gz(&raw);
        for cut in 0..enc.len() {
            assert!(decode(&enc[..cut], SizeBound::Exact(n)).is_err(), "cut {cut}");
        }
        // A zlib stream is not gzip.
        let mut z = ZlibEncoder::new(Vec::new(), Compression::default());
        z.write_all(&raw).unwrap();
        assert!(decode(&z.finish().unwrap(), SizeBound::Exact(n)).is_err());
        // The gzip trailer's CRC-32 is checked.
        let mut bad = enc.clone();
        let l = bad.len();
        bad[l - 8] ^= 1;
        assert!(decode(&bad, SizeBound::Exact(n)).is_err());
    }
}
