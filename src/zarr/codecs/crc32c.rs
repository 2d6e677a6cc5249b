//! The `crc32c` bytes->bytes codec: the payload followed by the little-endian
//! CRC-32C (Castagnoli) of the payload.

use super::CodecError;

/// Verify and strip the trailing checksum.
pub(super) fn decode(data: &[u8]) -> Result<&[u8], CodecError> {
    let Some(split) = data.len().checked_sub(4) else {
        return Err(CodecError::Corrupt {
            codec: "crc32c",
            reason: format!("{} bytes is shorter than the 4-byte checksum", data.len()),
        });
    };
    let (payload, tail) = data.split_at(split);
    let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let computed = ::crc32c::crc32c(payload);
    if stored != computed {
        return Err(CodecError::ChecksumMismatch { stored, computed });
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_and_strip() {
        // Known answer: CRC-32C("123456789") = 0xE3069283.
        let mut d = b"123456789".to_vec();
        d.extend_from_slice(&0xE306_9283u32.to_le_bytes());
        assert_eq!(decode(&d).unwrap(), b"123456789");
        // Empty payload.
        let empty = ::crc32c::crc32c(b"").to_le_bytes();
        assert_eq!(decode(&empty).unwrap(), b"");
    }

    #[test]
    fn mismatch_and_short() {
        let mut d = b"123456789".to_vec();
        d.extend_from_slice(&0xE306_9283u32.to_le_bytes());
        for i in 0..d.len() {
            let mut m = d.clone();
            m[i] ^= 0x80;
            assert!(matches!(decode(&m), Err(CodecError::ChecksumMismatch { .. })));
        }
        for n in 0..4 {
            assert!(matches!(decode(&d[..n]), Err(CodecError::Corrupt { .. })));
        }
    }
}
