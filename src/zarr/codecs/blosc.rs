//! The `blosc` bytes->bytes codec (c-blosc 1.x frames, as numcodecs writes them).
//!
//! c-blosc trusts its 16-byte header, so the header is parsed and checked here
//! first: the claimed decoded size must fit the bound (it is what gets allocated)
//! and the claimed compressed size must lie inside the input, which is then cut to
//! exactly that length and run through `blosc_cbuffer_validate` before decoding.

use super::{CodecError, SizeBound};

/// Bytes in a blosc 1.x header.
const HEADER_LEN: usize = 16;

fn corrupt(reason: impl Into<String>) -> CodecError {
    CodecError::Corrupt { codec: "blosc", reason: reason.into() }
}

/// The header fields that matter before decoding.
#[derive(Debug, PartialEq, Eq)]
struct Header {
    nbytes: u64,
    cbytes: u64,
}

fn parse_header(data: &[u8]) -> Result<Header, CodecError> {
    let Some(h) = data.get(..HEADER_LEN) else {
        return Err(corrupt(format!("{} bytes is shorter than the header", data.len())));
    };
    let le = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]) as u64;
    Ok(Header { nbytes: le(4), cbytes: le(12) })
}

pub(super) fn decode(data: &[u8], bound: SizeBound) -> Result<Vec<u8>, CodecError> {
    let header = parse_header(data)?;
    if header.nbytes > bound.limit() {
        return Err(CodecError::TooLarge { size: header.nbytes, limit: bound.limit() });
    }
    bound.check("blosc", header.nbytes as usize)?;
    if header.cbytes < HEADER_LEN as u64 || header.cbytes > data.len() as u64 {
        return Err(corrupt(format!(
            "header claims {} compressed bytes, input has {}",
            header.cbytes,
            data.len()
        )));
    }
    let data = &data[..header.cbytes as usize];
    match ::blosc::validate(data) {
        Ok(n) if n as u64 == header.nbytes => {}
        _ => return Err(corrupt("header failed validation")),
    }
    if header.nbytes == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: u8 has no invalid bit patterns; the header was checked above so the
    // allocation is `nbytes` (within the bound) and c-blosc reads at most `cbytes`
    // (== data.len()) bytes of input.
    let out = unsafe { ::blosc::decompress_bytes::<u8>(data) }
        .map_err(|e| corrupt(format!("decompression failed: {e}")))?;
    bound.check("blosc", out.len())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::blosc::{Compressor, Context, ShuffleMode};

    fn sample() -> Vec<u8> {
        (0..4_000u32).flat_map(|i| (i * 3).to_le_bytes()).collect()
    }

    fn compress(raw: &[u8], c: Compressor, s: ShuffleMode) -> Vec<u8> {
        let ctx = Context::new().compressor(c).unwrap().shuffle(s).typesize(Some(4));
        ctx.compress(raw).into()
    }

    #[test]
    fn roundtrip() {
        let raw = sample();
        let n = raw.len() as u64;
        for c in [Compressor::LZ4, Compressor::BloscLZ, Compressor::Zstd] {
            for s in [ShuffleMode::None, ShuffleMode::Byte, ShuffleMode::Bit] {
                let enc = compress(&raw, c, s);
                assert_eq!(decode(&enc, SizeBound::Exact(n)).unwrap(), raw);
                assert_eq!(decode(&enc, SizeBound::AtMost(n + 10)).unwrap(), raw);
                assert!(matches!(
                    decode(&enc, SizeBound::Exact(n - 4)),
                    Err(CodecError::TooLarge { .. })
                ));
                assert!(matches!(
                    decode(&enc, SizeBound::Exact(n + 4)),
                    Err(CodecError::WrongSize { .. })
                ));
            }
        }
    }

    #[test]
    fn truncated_and_corrupt_are_errors() {
        let raw = sample();
        let n = raw.len() as u64;
        for s in [ShuffleMode::None, ShuffleMode::Byte, ShuffleMode::Bit] {
            let enc = compress(&raw, Compressor::LZ4, s);
            for cut in 0..enc.len() {
                assert!(decode(&enc[..cut], SizeBound::Exact(n)).is_err(), "cut {cut}");
            }
            // Flipped bytes: an error or the right length, never a crash.
            for i in 0..enc.len() {
                let mut m = enc.clone();
                m[i] ^= 0xff;
                if let Ok(out) = decode(&m, SizeBound::Exact(n)) {
                    assert_eq!(out.len() as u64, n);
                }
            }
        }
    }

    #[test]
    fn huge_claim_refused_before_allocating() {
        // A header claiming ~4 GiB decoded from a 16-byte input.
        let mut h = vec![2u8, 1, 0x01, 4];
        h.extend_from_slice(&u32::MAX.to_le_bytes()); // nbytes
        h.extend_from_slice(&0u32.to_le_bytes()); // blocksize
        h.extend_from_slice(&16u32.to_le_bytes()); // cbytes
        assert!(matches!(
            decode(&h, SizeBound::Exact(80)),
            Err(CodecError::TooLarge { size, .. }) if size == u32::MAX as u64
        ));
        assert!(matches!(decode(&h, SizeBound::AtMost(1 << 20)), Err(CodecError::TooLarge { .. })));
        // A claimed compressed size beyond the input.
        let raw = sample();
        let mut enc = compress(&raw, Compressor::LZ4, ShuffleMode::Byte);
        let big = (enc.len() as u32 + 100).to_le_bytes();
        enc[12..16].copy_from_slice(&big);
        assert!(matches!(
            decode(&enc, SizeBound::Exact(raw.len() as u64)),
            Err(CodecError::Corrupt { .. })
        ));
    }

    #[test]
    fn header_parse() {
        assert!(parse_header(&[0; 15]).is_err());
        let mut h = [0u8; 16];
        h[4..8].copy_from_slice(&80u32.to_le_bytes());
        h[12..16].copy_from_slice(&40u32.to_le_bytes());
        assert_eq!(parse_header(&h).unwrap(), Header { nbytes: 80, cbytes: 40 });
    }
}
