//! The `numcodecs.zlib` bytes->bytes codec (zarr-python 3's v3 name for numcodecs'
//! `Zlib`; v2 id `zlib`): one RFC 1950 zlib stream. As in Python's
//! `zlib.decompress`, bytes after the end of the stream are ignored and a stream
//! that stops early (including a missing Adler-32 trailer) is an error.

use std::io::{self, Read};

use flate2::{Decompress, FlushDecompress, Status};

use super::{read_bounded, CodecError, SizeBound};

pub(super) const NAME: &str = "numcodecs.zlib";

pub(super) fn decode(data: &[u8], bound: SizeBound) -> Result<Vec<u8>, CodecError> {
    let stream = Stream { z: Decompress::new(true), input: data, done: false };
    read_bounded(NAME, stream, bound)
}

/// A zlib stream as a reader that reports truncation (flate2's own readers end
/// quietly when the input runs out mid-stream).
struct Stream<'a> {
    z: Decompress,
    input: &'a [u8],
    done: bool,
}

impl Read for Stream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        loop {
            let (in_before, out_before) = (self.z.total_in(), self.z.total_out());
            let rest =
                usize::try_from(in_before).ok().and_then(|i| self.input.get(i..)).unwrap_or(&[]);
            let status = self
                .z
                .decompress(rest, buf, FlushDecompress::None)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            // At most buf.len() bytes were written.
            let n = (self.z.total_out() - out_before) as usize;
            if status == Status::StreamEnd {
                self.done = true;
                return Ok(n);
            }
            if n > 0 {
                return Ok(n);
            }
            if self.z.total_in() == in_before {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "truncated zlib stream"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::{write::GzEncoder, write::ZlibEncoder, Compression};
    use std::io::Write;

    fn zlib(raw: &[u8], level: u32) -> Vec<u8> {
        let mut e = ZlibEncoder::new(Vec::new(), Compression::new(level));
        e.write_all(raw).unwrap();
        e.finish().unwrap()
    }

    fn sample() -> Vec<u8> {
        (0..20_000u32).flat_map(|i| (i / 3).to_le_bytes()).collect()
    }

    #[test]
    fn roundtrip_levels_and_bounds() {
        let raw = sample();
        for level in [0, 1, 9] {
            crate::zarr::codecs::tests::check_bounds(decode, &zlib(&raw, level), &raw);
        }
        // Empty payload.
        assert_eq!(decode(&zlib(b"", 1), SizeBound::Exact(0)).unwrap(), b"".to_vec());
    }

    #[test]
    fn truncated_corrupt_and_trailing() {
        let raw = sample();
        let n = raw.len() as u64;
        let enc = zlib(&raw, 6);
        // Every truncation fails, even with a loose bound (so the stream end, not
        // the size check, is what catches it): the Adler-32 trailer is required.
        for cut in 0..enc.len() {
            assert!(decode(&enc[..cut], SizeBound::AtMost(n * 2)).is_err(), "cut {cut}");
        }
        let mut bad = enc.clone();
        let l = bad.len();
        bad[l - 1] ^= 1; // Adler-32
        assert!(decode(&bad, SizeBound::Exact(n)).is_err());
        // gzip is not zlib.
        let mut g = GzEncoder::new(Vec::new(), Compression::default());
        g.write_all(&raw).unwrap();
        assert!(decode(&g.finish().unwrap(), SizeBound::Exact(n)).is_err());
        // Bytes after the stream are ignored, as Python's zlib.decompress does.
        let mut trailing = enc.clone();
        trailing.extend_from_slice(b"junk");
        assert_eq!(decode(&trailing, SizeBound::Exact(n)).unwrap(), raw);
    }

    #[test]
    fn bomb_stops_at_the_bound() {
        let enc = zlib(&vec![0u8; 64 << 20], 9);
        assert!(matches!(decode(&enc, SizeBound::Exact(1024)), Err(CodecError::WrongSize { .. })));
    }
}
