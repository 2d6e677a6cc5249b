//! The `blosc` bytes->bytes codec (c-blosc 1.x frames, as numcodecs writes them), on the
//! c-blosc that `blosc-src` builds into the binary.
//!
//! c-blosc trusts its 16-byte header, so the header is parsed and checked here
//! first: the claimed decoded size must fit the bound (it is what gets allocated)
//! and the claimed compressed size must lie inside the input, which is then cut to
//! exactly that length and run through `blosc_cbuffer_validate` before decoding.

use std::ffi::c_void;

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

/// c-blosc's own check of a whole frame: the decoded size it claims, or None.
fn validate(frame: &[u8]) -> Option<usize> {
    let mut nbytes = 0usize;
    // SAFETY: c-blosc reads at most `frame.len()` bytes of `frame` and writes one usize.
    let rc = unsafe {
        blosc_src::blosc_cbuffer_validate(frame.as_ptr().cast(), frame.len(), &mut nbytes)
    };
    (rc == 0).then_some(nbytes)
}

/// Decode a frame that `validate` accepted as `nbytes` long into a buffer of exactly that size.
fn decompress(frame: &[u8], nbytes: usize) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::<u8>::with_capacity(nbytes);
    // SAFETY: the frame passed blosc_cbuffer_validate, so c-blosc reads inside it; it writes
    // at most `nbytes` bytes (destsize) into the capacity reserved above. One internal thread:
    // the _ctx form takes no global lock and needs no blosc_init.
    let n = unsafe {
        blosc_src::blosc_decompress_ctx(
            frame.as_ptr().cast::<c_void>(),
            out.as_mut_ptr().cast::<c_void>(),
            nbytes,
            1,
        )
    };
    if n < 0 || n as usize != nbytes {
        return Err(corrupt(format!("decompression failed (c-blosc returned {n})")));
    }
    // SAFETY: c-blosc wrote all `nbytes` bytes (its return value).
    unsafe { out.set_len(nbytes) };
    Ok(out)
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
    match validate(data) {
        Some(n) if n as u64 == header.nbytes => {}
        _ => return Err(corrupt("header failed validation")),
    }
    if header.nbytes == 0 {
        return Ok(Vec::new());
    }
    let out = decompress(data, header.nbytes as usize)?;
    bound.check("blosc", out.len())?;
    Ok(out)
}

/// The shuffles of a blosc frame (numcodecs' `shuffle` 0, 1, 2).
#[cfg(test)]
#[derive(Debug, Clone, Copy)]
pub(crate) enum Shuffle {
    None = 0,
    Byte = 1,
    Bit = 2,
}

/// Every compressor the bundled c-blosc has, by the names numcodecs and zarr use.
#[cfg(test)]
pub(crate) const CNAMES: [&str; 6] = ["blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd"];

/// Encode `raw` as numcodecs does (level 5, automatic block size); tests make frames with it.
#[cfg(test)]
pub(crate) fn compress(raw: &[u8], cname: &str, shuffle: Shuffle, typesize: usize) -> Vec<u8> {
    let cname = std::ffi::CString::new(cname).expect("a compressor name");
    let cap = raw.len() + blosc_src::BLOSC_MAX_OVERHEAD as usize;
    let mut out = Vec::<u8>::with_capacity(cap);
    // SAFETY: c-blosc reads `raw.len()` bytes of `raw` and writes at most `cap` bytes into
    // the capacity reserved above.
    let n = unsafe {
        blosc_src::blosc_compress_ctx(
            5,
            shuffle as i32,
            typesize,
            raw.len(),
            raw.as_ptr().cast(),
            out.as_mut_ptr().cast(),
            cap,
            cname.as_ptr(),
            0,
            1,
        )
    };
    assert!(n > 0, "blosc_compress_ctx returned {n} for {cname:?}");
    // SAFETY: c-blosc wrote `n` <= `cap` bytes.
    unsafe { out.set_len(n as usize) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        (0..4_000u32).flat_map(|i| (i * 3).to_le_bytes()).collect()
    }

    #[test]
    fn roundtrip() {
        let raw = sample();
        let n = raw.len() as u64;
        for c in CNAMES {
            for s in [Shuffle::None, Shuffle::Byte, Shuffle::Bit] {
                let enc = compress(&raw, c, s, 4);
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
        for s in [Shuffle::None, Shuffle::Byte, Shuffle::Bit] {
            let enc = compress(&raw, "lz4", s, 4);
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
        let mut enc = compress(&raw, "lz4", Shuffle::Byte, 4);
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
