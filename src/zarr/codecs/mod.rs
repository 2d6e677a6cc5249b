//! Decoding of a v3 codec chain: turns one stored (encoded) chunk into its raw
//! elements, little-endian and in C order of the array's axes. Pure and synchronous:
//! the caller hands in the chunk's bytes, and every malformed input is a typed error.
//!
//! The chain is `array->array`* (`transpose`), exactly one `array->bytes` (`bytes`),
//! then `bytes->bytes`* (`crc32c`, `zstd`, `gzip`, `blosc`); decoding runs it
//! backwards. `sharding_indexed` is refused here: shards are unpacked a level above.

mod blosc;
mod bytes;
mod crc32c;
mod gzip;
mod transpose;
mod zstd;

use std::borrow::Cow;
use std::io::Read;

use serde_json::Value;
use thiserror::Error;

use crate::zarr::metadata::Codec;
use crate::zarr::sharding::SHARDING_CODEC;

/// The largest decoded chunk we will produce (2 GiB): anything bigger is refused
/// before allocating.
pub const MAX_DECODED_CHUNK_BYTES: u64 = 2 << 30;

/// Why a chunk could not be decoded. Every message is one line.
#[derive(Debug, Error)]
pub enum CodecError {
    #[error("unsupported data type {0}")]
    UnsupportedDataType(String),
    #[error("unsupported codec {0}")]
    Unsupported(String),
    #[error("invalid configuration for codec {codec}: {reason}")]
    InvalidConfiguration { codec: String, reason: String },
    #[error("invalid codec chain: {0}")]
    InvalidChain(String),
    #[error("crc32c checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch { stored: u32, computed: u32 },
    #[error("{codec}: expected {expected} bytes, got {actual}")]
    WrongSize {
        codec: &'static str,
        expected: u64,
        actual: u64,
    },
    #[error("size {size} exceeds the limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    #[error("{codec}: decoded output exceeds {limit} bytes")]
    OutputTooLong { codec: &'static str, limit: u64 },
    #[error("{codec}: corrupt input: {reason}")]
    Corrupt { codec: &'static str, reason: String },
}

/// A fixed-size v3 data type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataType {
    /// Bytes per element.
    pub itemsize: usize,
    /// The v3 name, e.g. `"int32"`.
    pub name: String,
}

impl DataType {
    /// Parse the `data_type` field of a v3 array document: a core type name, or
    /// `{"name": <core type>}` without configuration.
    pub fn from_json(v: &Value) -> Result<Self, CodecError> {
        let name = match v {
            Value::String(s) => s.as_str(),
            Value::Object(m)
                if m.get("configuration")
                    .is_none_or(|c| c.is_null() || c.as_object().is_some_and(|o| o.is_empty())) =>
            {
                m.get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| CodecError::UnsupportedDataType(v.to_string()))?
            }
            _ => return Err(CodecError::UnsupportedDataType(v.to_string())),
        };
        Self::from_name(name)
    }

    /// A core v3 data type by name.
    pub fn from_name(name: &str) -> Result<Self, CodecError> {
        let itemsize = match name {
            "bool" | "int8" | "uint8" => 1,
            "int16" | "uint16" | "float16" => 2,
            "int32" | "uint32" | "float32" => 4,
            "int64" | "uint64" | "float64" | "complex64" => 8,
            "complex128" => 16,
            _ => return Err(CodecError::UnsupportedDataType(name.to_string())),
        };
        Ok(DataType {
            itemsize,
            name: name.to_string(),
        })
    }

    /// The unit whose bytes an endianness change reverses: the whole item, except
    /// for complex types, whose real and imaginary parts are swapped separately.
    pub fn swap_size(&self) -> usize {
        match self.name.as_str() {
            "complex64" | "complex128" => self.itemsize / 2,
            _ => self.itemsize,
        }
    }
}

/// Number of elements in a chunk, or `TooLarge` on overflow.
fn element_count(chunk_shape: &[u64]) -> Result<u64, CodecError> {
    chunk_shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or(CodecError::TooLarge {
            size: u64::MAX,
            limit: MAX_DECODED_CHUNK_BYTES,
        })
}

/// The size of a decoded chunk (`prod(chunk_shape) * itemsize`), refused above
/// [`MAX_DECODED_CHUNK_BYTES`].
pub fn decoded_size(data_type: &DataType, chunk_shape: &[u64]) -> Result<u64, CodecError> {
    let size = element_count(chunk_shape)?
        .checked_mul(data_type.itemsize as u64)
        .unwrap_or(u64::MAX);
    if size > MAX_DECODED_CHUNK_BYTES {
        return Err(CodecError::TooLarge {
            size,
            limit: MAX_DECODED_CHUNK_BYTES,
        });
    }
    Ok(size)
}

/// How long a bytes->bytes codec's decoded output may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SizeBound {
    /// Exactly this long (the codec feeds the array->bytes codec).
    Exact(u64),
    /// At most this long (an intermediate stage whose size is not known).
    AtMost(u64),
}

impl SizeBound {
    pub(crate) fn limit(self) -> u64 {
        match self {
            SizeBound::Exact(n) | SizeBound::AtMost(n) => n,
        }
    }

    /// Check a finished output's length against the bound.
    pub(crate) fn check(self, codec: &'static str, actual: usize) -> Result<(), CodecError> {
        let actual = actual as u64;
        match self {
            SizeBound::Exact(expected) if actual != expected => Err(CodecError::WrongSize {
                codec,
                expected,
                actual,
            }),
            SizeBound::AtMost(limit) if actual > limit => {
                Err(CodecError::OutputTooLong { codec, limit })
            }
            _ => Ok(()),
        }
    }
}

/// Read a decompressing stream to its end, but never past `bound.limit()` bytes.
pub(crate) fn read_bounded(
    codec: &'static str,
    mut reader: impl Read,
    bound: SizeBound,
) -> Result<Vec<u8>, CodecError> {
    let limit = bound.limit();
    // Grow as the data actually arrives instead of trusting the bound up front.
    let mut out = Vec::with_capacity(limit.min(16 << 20) as usize);
    (&mut reader)
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| CodecError::Corrupt {
            codec,
            reason: e.to_string(),
        })?;
    if out.len() as u64 > limit {
        return Err(match bound {
            SizeBound::Exact(expected) => CodecError::WrongSize {
                codec,
                expected,
                actual: out.len() as u64,
            },
            SizeBound::AtMost(limit) => CodecError::OutputTooLong { codec, limit },
        });
    }
    bound.check(codec, out.len())?;
    Ok(out)
}

/// One array->array codec, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ArrayToArray {
    /// `order[i]` is the array axis that becomes encoded axis `i`.
    Transpose { order: Vec<usize> },
}

/// One bytes->bytes codec, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BytesToBytes {
    Crc32c,
    Zstd,
    Gzip,
    Blosc,
}

/// A codec chain, split into its three parts and checked for shape.
struct Chain {
    array_to_array: Vec<ArrayToArray>,
    /// The `bytes` codec's endianness: `true` for big-endian.
    big_endian: bool,
    bytes_to_bytes: Vec<BytesToBytes>,
}

fn parse_chain(codecs: &[Codec], data_type: &DataType) -> Result<Chain, CodecError> {
    let mut array_to_array = Vec::new();
    let mut big_endian = None;
    let mut bytes_to_bytes = Vec::new();
    for c in codecs {
        match c.name.as_str() {
            "transpose" => {
                if big_endian.is_some() {
                    return Err(CodecError::InvalidChain(
                        "transpose after the array->bytes codec".into(),
                    ));
                }
                array_to_array.push(ArrayToArray::Transpose {
                    order: transpose::parse_order(c)?,
                });
            }
            "bytes" => {
                if big_endian.is_some() {
                    return Err(CodecError::InvalidChain(
                        "more than one array->bytes codec".into(),
                    ));
                }
                big_endian = Some(bytes::parse_big_endian(c, data_type)?);
            }
            "crc32c" | "zstd" | "gzip" | "blosc" => {
                if big_endian.is_none() {
                    return Err(CodecError::InvalidChain(format!(
                        "{} before the array->bytes codec",
                        c.name
                    )));
                }
                bytes_to_bytes.push(match c.name.as_str() {
                    "crc32c" => BytesToBytes::Crc32c,
                    "zstd" => BytesToBytes::Zstd,
                    "gzip" => BytesToBytes::Gzip,
                    _ => BytesToBytes::Blosc,
                });
            }
            SHARDING_CODEC => return Err(CodecError::Unsupported(SHARDING_CODEC.into())),
            other => return Err(CodecError::Unsupported(other.to_string())),
        }
    }
    let big_endian =
        big_endian.ok_or_else(|| CodecError::InvalidChain("no array->bytes codec".into()))?;
    Ok(Chain {
        array_to_array,
        big_endian,
        bytes_to_bytes,
    })
}

/// Decode one stored chunk through `codecs` (a v3 array's `codecs`), returning
/// exactly `decoded_size(data_type, chunk_shape)` bytes: the chunk's elements,
/// little-endian, in C order of the array's axes.
pub fn decode_chunk(
    codecs: &[Codec],
    data_type: &DataType,
    chunk_shape: &[u64],
    encoded: &[u8],
) -> Result<Vec<u8>, CodecError> {
    let expected = decoded_size(data_type, chunk_shape)?;
    let chain = parse_chain(codecs, data_type)?;

    // Shapes seen by each array->array codec, outermost first; the last is the
    // shape the bytes codec serialised.
    let mut shapes = vec![chunk_shape.to_vec()];
    for a in &chain.array_to_array {
        let ArrayToArray::Transpose { order } = a;
        let next = transpose::encoded_shape(shapes.last().expect("non-empty"), order)?;
        shapes.push(next);
    }

    // bytes->bytes, innermost (last) first. Only the codec next to the bytes codec
    // knows its exact output size; earlier stages get a generous bound (compressors
    // and checksums may add a little) so a decompression bomb still stops early.
    let intermediate = expected
        .saturating_mul(2)
        .saturating_add(1 << 20)
        .min(MAX_DECODED_CHUNK_BYTES + (1 << 20));
    let mut buf: Cow<[u8]> = Cow::Borrowed(encoded);
    for (i, codec) in chain.bytes_to_bytes.iter().enumerate().rev() {
        let bound = if i == 0 {
            SizeBound::Exact(expected)
        } else {
            SizeBound::AtMost(intermediate)
        };
        buf = match codec {
            BytesToBytes::Crc32c => {
                let inner = crc32c::decode(&buf)?;
                bound.check("crc32c", inner.len())?;
                Cow::Owned(inner.to_vec())
            }
            BytesToBytes::Zstd => Cow::Owned(zstd::decode(&buf, bound)?),
            BytesToBytes::Gzip => Cow::Owned(gzip::decode(&buf, bound)?),
            BytesToBytes::Blosc => Cow::Owned(blosc::decode(&buf, bound)?),
        };
    }

    // array->bytes.
    if buf.len() as u64 != expected {
        return Err(CodecError::WrongSize {
            codec: "bytes",
            expected,
            actual: buf.len() as u64,
        });
    }
    let mut data = buf.into_owned();
    if chain.big_endian {
        bytes::swap_in_place(&mut data, data_type.swap_size());
    }

    // array->array, innermost first.
    for (k, a) in chain.array_to_array.iter().enumerate().rev() {
        let ArrayToArray::Transpose { order } = a;
        data = transpose::decode(&data, data_type.itemsize, &shapes[k], order)?;
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};
    use serde_json::json;
    use std::path::PathBuf;

    fn testdata(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("src/zarr/codecs/testdata")
            .join(name)
    }

    /// Decode a zarr-python vector and compare with numpy's bytes.
    fn check_vector(name: &str) {
        let dir = testdata(name);
        let doc = std::fs::read(dir.join("zarr.json")).unwrap();
        let NodeMetadata::Array(meta) = parse_zarr_json(&doc).unwrap() else {
            panic!("{name}: not an array")
        };
        let dt = DataType::from_json(&meta.data_type).unwrap();
        let cs = meta.chunk_shape.clone().unwrap();
        let chunk = std::fs::read(dir.join("chunk")).unwrap();
        let expected = std::fs::read(dir.join("expected")).unwrap();
        assert_eq!(
            decoded_size(&dt, &cs).unwrap(),
            expected.len() as u64,
            "{name}"
        );
        let got =
            decode_chunk(&meta.codecs, &dt, &cs, &chunk).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got == expected, "{name}: decoded bytes differ");
    }

    #[test]
    fn zarr_python_vectors() {
        for name in [
            "int16_big",
            "float32_blosc_lz4_shuffle",
            "uint16_blosc_zstd_bitshuffle",
            "int32_zstd",
            "float64_gzip",
            "int32_crc32c",
            "uint16_transpose",
            "int32_transpose_3d",
            "float64_big_zstd_crc32c",
            "bool",
            "complex64_big",
        ] {
            check_vector(name);
        }
    }

    /// Every vector, truncated or with a flipped byte, errors or decodes to the
    /// right size, and never panics.
    #[test]
    fn mutated_vectors_never_panic() {
        for entry in std::fs::read_dir(testdata("")).unwrap() {
            let dir = entry.unwrap().path();
            if !dir.is_dir() {
                continue;
            }
            let doc = std::fs::read(dir.join("zarr.json")).unwrap();
            let NodeMetadata::Array(meta) = parse_zarr_json(&doc).unwrap() else {
                panic!()
            };
            let dt = DataType::from_json(&meta.data_type).unwrap();
            let cs = meta.chunk_shape.clone().unwrap();
            let size = decoded_size(&dt, &cs).unwrap() as usize;
            let chunk = std::fs::read(dir.join("chunk")).unwrap();
            let mut inputs: Vec<Vec<u8>> = (0..chunk.len()).map(|n| chunk[..n].to_vec()).collect();
            for i in 0..chunk.len() {
                let mut c = chunk.clone();
                c[i] ^= 0x5a;
                inputs.push(c);
            }
            for input in inputs {
                if let Ok(out) = decode_chunk(&meta.codecs, &dt, &cs, &input) {
                    assert_eq!(out.len(), size, "{}", dir.display());
                }
            }
        }
    }

    fn codecs(v: Value) -> Vec<Codec> {
        crate::zarr::metadata::parse_codecs(&v, "codecs").unwrap()
    }

    #[test]
    fn data_types() {
        for (name, size) in [
            ("bool", 1),
            ("int8", 1),
            ("uint8", 1),
            ("int16", 2),
            ("uint16", 2),
            ("float16", 2),
            ("int32", 4),
            ("uint32", 4),
            ("float32", 4),
            ("int64", 8),
            ("uint64", 8),
            ("float64", 8),
            ("complex64", 8),
            ("complex128", 16),
        ] {
            assert_eq!(DataType::from_json(&json!(name)).unwrap().itemsize, size);
        }
        assert_eq!(
            DataType::from_json(&json!({"name": "int32"}))
                .unwrap()
                .itemsize,
            4
        );
        assert_eq!(DataType::from_name("complex128").unwrap().swap_size(), 8);
        assert_eq!(DataType::from_name("complex64").unwrap().swap_size(), 4);
        for bad in [
            json!("string"),
            json!("r16"),
            json!(3),
            json!({"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 1}}),
            json!({"configuration": {}}),
        ] {
            assert!(matches!(
                DataType::from_json(&bad),
                Err(CodecError::UnsupportedDataType(_))
            ));
        }
    }

    #[test]
    fn sizes() {
        let i4 = DataType::from_name("int32").unwrap();
        assert_eq!(decoded_size(&i4, &[4, 5]).unwrap(), 80);
        assert_eq!(decoded_size(&i4, &[]).unwrap(), 4);
        assert!(matches!(
            decoded_size(&i4, &[1 << 20, 1 << 20]),
            Err(CodecError::TooLarge { .. })
        ));
        assert!(matches!(
            decoded_size(&i4, &[u64::MAX, 2]),
            Err(CodecError::TooLarge { .. })
        ));
        // Refused before looking at (or allocating for) the data.
        let c = codecs(json!([{"name": "bytes", "configuration": {"endian": "little"}}]));
        assert!(matches!(
            decode_chunk(&c, &i4, &[1 << 16, 1 << 16], b""),
            Err(CodecError::TooLarge { .. })
        ));
    }

    #[test]
    fn chain_errors() {
        let u1 = DataType::from_name("uint8").unwrap();
        let cases = [
            (
                json!([{"name": "sharding_indexed", "configuration": {}}]),
                "sharding_indexed",
            ),
            (json!(["bytes", "lz4"]), "lz4"),
            (json!(["bytes", "zlib"]), "zlib"),
        ];
        for (v, name) in cases {
            match decode_chunk(&codecs(v), &u1, &[2], &[1, 2]) {
                Err(CodecError::Unsupported(n)) => assert_eq!(n, name),
                other => panic!("{other:?}"),
            }
        }
        for v in [
            json!([]),
            json!(["zstd", "bytes"]),
            json!(["bytes", "bytes"]),
            json!(["bytes", {"name": "transpose", "configuration": {"order": [0]}}]),
        ] {
            assert!(
                matches!(
                    decode_chunk(&codecs(v.clone()), &u1, &[2], &[1, 2]),
                    Err(CodecError::InvalidChain(_))
                ),
                "{v}"
            );
        }
        // Itemsize 1 needs no endian; a wrong-sized payload is WrongSize.
        assert_eq!(
            decode_chunk(&codecs(json!(["bytes"])), &u1, &[2], &[1, 2]).unwrap(),
            [1, 2]
        );
        assert!(matches!(
            decode_chunk(&codecs(json!(["bytes"])), &u1, &[2], &[1, 2, 3]),
            Err(CodecError::WrongSize {
                expected: 2,
                actual: 3,
                ..
            })
        ));
    }

    #[test]
    fn crc_chain_mismatch_detected() {
        let i2 = DataType::from_name("int16").unwrap();
        let c = codecs(json!([{"name": "bytes", "configuration": {"endian": "little"}}, "crc32c"]));
        let mut enc = vec![1u8, 0, 2, 0];
        enc.extend_from_slice(&::crc32c::crc32c(&enc).to_le_bytes());
        assert_eq!(decode_chunk(&c, &i2, &[2], &enc).unwrap(), [1, 0, 2, 0]);
        enc[0] ^= 1;
        assert!(matches!(
            decode_chunk(&c, &i2, &[2], &enc),
            Err(CodecError::ChecksumMismatch { .. })
        ));
    }

    #[test]
    fn big_endian_transpose_chain() {
        // uint16 (2,3) array [[1,2,3],[4,5,6]] stored transposed ([1,0]) big-endian:
        // the encoded (3,2) array is [[1,4],[2,5],[3,6]].
        let u2 = DataType::from_name("uint16").unwrap();
        let c = codecs(json!([
            {"name": "transpose", "configuration": {"order": [1, 0]}},
            {"name": "bytes", "configuration": {"endian": "big"}}
        ]));
        let enc: Vec<u8> = [1u16, 4, 2, 5, 3, 6]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        let want: Vec<u8> = [1u16, 2, 3, 4, 5, 6]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(decode_chunk(&c, &u2, &[2, 3], &enc).unwrap(), want);
    }

    #[test]
    fn two_transposes_compose() {
        // [1,2,0] then [1,2,0] again equals a single [2,0,1].
        let u1 = DataType::from_name("uint8").unwrap();
        let shape = [2u64, 3, 4];
        let data: Vec<u8> = (0..24).collect();
        let single = codecs(json!([
            {"name": "transpose", "configuration": {"order": [2, 0, 1]}}, "bytes"
        ]));
        let double = codecs(json!([
            {"name": "transpose", "configuration": {"order": [1, 2, 0]}},
            {"name": "transpose", "configuration": {"order": [1, 2, 0]}}, "bytes"
        ]));
        // Encode by hand with order [2,0,1]: encoded axes (z, y, x) with shape (4,2,3).
        let mut enc = Vec::new();
        for z in 0..4 {
            for y in 0..2 {
                for x in 0..3 {
                    enc.push(data[y * 12 + x * 4 + z]);
                }
            }
        }
        assert_eq!(decode_chunk(&single, &u1, &shape, &enc).unwrap(), data);
        assert_eq!(decode_chunk(&double, &u1, &shape, &enc).unwrap(), data);
    }
}
