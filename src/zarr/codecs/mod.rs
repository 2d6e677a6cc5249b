//! Decoding of a v3 codec chain: turns one stored (encoded) chunk into its raw
//! elements, little-endian and in C order of the array's axes. Pure and synchronous:
//! the caller hands in the chunk's bytes, and every malformed input is a typed error.
//!
//! The chain is `array->array`* (`transpose`, `scale_offset`, `cast_value`; numcodecs'
//! `delta`, `fixedscaleoffset`, `packbits`, and `bitround`/`quantize`, which need no
//! decoding), exactly one `array->bytes` (`bytes` or `sharding_indexed`), then
//! `bytes->bytes`* (`crc32c`, `zstd`, `gzip`, `blosc`, `numcodecs.zlib` and the numcodecs
//! codecs of [`numcodecs`]); decoding runs it backwards. `cast_value`, `fixedscaleoffset`
//! and `packbits` change the data type (and `packbits` the shape) that the codecs after
//! them see. A [`ChunkSpec`] carries what a
//! chain needs besides its codecs: the data type, the chunk shape and the fill
//! value (absent inner chunks of a shard are filled with it). Sharding is decoded
//! like any other codec, so a transpose before it, bytes->bytes codecs after it
//! (wrapping whole shards) and nested sharding all work.

mod blosc;
mod bytes;
pub(crate) mod cast_value;
mod crc32c;
mod gzip;
mod numcodecs;
mod numeric;
pub(crate) mod scale_offset;
mod sharding;
mod to_fixedscaleoffset;
pub(crate) mod transpose;
mod zlib;
mod zstd;

use std::borrow::Cow;
use std::io::Read;

use serde_json::Value;
use thiserror::Error;

pub use to_fixedscaleoffset::{fixedscaleoffset_form, FixedScaleOffsetForm};

use crate::zarr::data_type::fill_value::fill_value_bytes;
use crate::zarr::data_type::{v2_dtype, DataType};
use crate::zarr::error::DataTypeError;
use crate::zarr::metadata::{ArrayMetadata, Codec};
use crate::zarr::sharding::SHARDING_CODEC;

/// The largest decoded chunk we will produce (2 GiB): anything bigger is refused
/// before allocating.
pub const MAX_DECODED_CHUNK_BYTES: u64 = 2 << 30;

/// Why a chunk could not be decoded. Every message is one line.
#[derive(Debug, Error)]
pub enum CodecError {
    #[error("unsupported codec {0}")]
    Unsupported(String),
    #[error("invalid configuration for codec {codec}: {reason}")]
    InvalidConfiguration { codec: String, reason: String },
    #[error("invalid codec chain: {0}")]
    InvalidChain(String),
    #[error("crc32c checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ChecksumMismatch { stored: u32, computed: u32 },
    #[error("{codec}: expected {expected} bytes, got {actual}")]
    WrongSize { codec: &'static str, expected: u64, actual: u64 },
    #[error("size {size} exceeds the limit of {limit} bytes")]
    TooLarge { size: u64, limit: u64 },
    #[error("{codec}: decoded output exceeds {limit} bytes")]
    OutputTooLong { codec: &'static str, limit: u64 },
    #[error("{codec}: corrupt input: {reason}")]
    Corrupt { codec: &'static str, reason: String },
    /// An unsupported data type or an invalid fill value.
    #[error(transparent)]
    DataType(#[from] DataTypeError),
}

/// Number of elements in a chunk, or `TooLarge` on overflow.
fn element_count(chunk_shape: &[u64]) -> Result<u64, CodecError> {
    chunk_shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or(CodecError::TooLarge { size: u64::MAX, limit: MAX_DECODED_CHUNK_BYTES })
}

/// The size of a decoded chunk (`prod(chunk_shape) * itemsize`), refused above
/// [`MAX_DECODED_CHUNK_BYTES`].
pub fn decoded_size(data_type: &DataType, chunk_shape: &[u64]) -> Result<u64, CodecError> {
    let size = element_count(chunk_shape)?.saturating_mul(data_type.itemsize as u64);
    if size > MAX_DECODED_CHUNK_BYTES {
        return Err(CodecError::TooLarge { size, limit: MAX_DECODED_CHUNK_BYTES });
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
            SizeBound::Exact(expected) if actual != expected => {
                Err(CodecError::WrongSize { codec, expected, actual })
            }
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
        .map_err(|e| CodecError::Corrupt { codec, reason: e.to_string() })?;
    if out.len() as u64 > limit {
        return Err(match bound {
            SizeBound::Exact(expected) => {
                CodecError::WrongSize { codec, expected, actual: out.len() as u64 }
            }
            SizeBound::AtMost(limit) => CodecError::OutputTooLong { codec, limit },
        });
    }
    bound.check(codec, out.len())?;
    Ok(out)
}

/// The array->bytes codec, parsed.
#[derive(Debug)]
enum ArrayToBytes {
    /// `bytes`; `true` for big-endian.
    Bytes {
        big_endian: bool,
    },
    Sharding(sharding::ShardCodec),
}

/// One bytes->bytes codec, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BytesToBytes {
    Crc32c,
    Zstd,
    Gzip,
    Blosc,
    Zlib,
    Numcodec(numcodecs::Numcodec),
}

impl BytesToBytes {
    /// The bytes->bytes codec `c` names, checked; `None` when it is not one decoded here.
    fn from_codec(c: &Codec) -> Option<Result<Self, CodecError>> {
        Some(Ok(match c.name.as_str() {
            "crc32c" => BytesToBytes::Crc32c,
            // numcodecs' zstd and gzip write the same bytes as the v3 codecs.
            "zstd" | "numcodecs.zstd" => BytesToBytes::Zstd,
            "gzip" | "numcodecs.gzip" => BytesToBytes::Gzip,
            "blosc" => BytesToBytes::Blosc,
            // zarr-python 3's name for numcodecs' Zlib, and the plain alias.
            zlib::NAME | "zlib" => BytesToBytes::Zlib,
            name => {
                let id = name.strip_prefix("numcodecs.")?;
                return Some(numcodecs::Numcodec::parse(id, &c.configuration)?.map(Self::Numcodec));
            }
        }))
    }

    fn decode<'a>(self, data: &'a [u8], bound: SizeBound) -> Result<Cow<'a, [u8]>, CodecError> {
        Ok(match self {
            BytesToBytes::Crc32c => {
                let inner = crc32c::decode(data)?;
                bound.check("crc32c", inner.len())?;
                Cow::Borrowed(inner)
            }
            BytesToBytes::Zstd => Cow::Owned(zstd::decode(data, bound)?),
            BytesToBytes::Gzip => Cow::Owned(gzip::decode(data, bound)?),
            BytesToBytes::Blosc => Cow::Owned(blosc::decode(data, bound)?),
            BytesToBytes::Zlib => Cow::Owned(zlib::decode(data, bound)?),
            BytesToBytes::Numcodec(n) => n.decode(data, bound)?,
        })
    }
}

/// numcodecs' lossy array->array filters whose decoding changes nothing: `bitround` (it only
/// zeroes mantissa bits) and `quantize` when it keeps the array's data type. An error for
/// such a codec whose data types do not match the array's.
fn lossy_no_op(c: &Codec, data_type: &DataType) -> Result<bool, CodecError> {
    match c.name.as_str() {
        "numcodecs.bitround" => Ok(matches!(data_type.name.as_str(), "float32" | "float64")),
        "numcodecs.quantize" => {
            let own = v2_dtype(data_type, false);
            let same = |key| match c.configuration.get(key) {
                None | Some(Value::Null) => true,
                Some(Value::String(s)) => Some(s) == own.as_ref(),
                Some(_) => false,
            };
            Ok(same("dtype") && same("astype"))
        }
        _ => Ok(false),
    }
}

/// Everything needed to decode chunks of one array (or one level of a shard).
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkSpec {
    /// The v3 codec chain.
    pub codecs: Vec<Codec>,
    pub data_type: DataType,
    /// The shape of one chunk (a whole shard, when the chain shards).
    pub chunk_shape: Vec<u64>,
    /// One element of the fill value, little-endian.
    pub fill_value: Vec<u8>,
}

impl ChunkSpec {
    /// The spec of a v3 array's chunks: its data type, regular-grid chunk shape
    /// (an error for any other grid), fill value and codecs, checked.
    pub fn from_v3(meta: &ArrayMetadata) -> Result<ChunkSpec, CodecError> {
        let data_type = DataType::from_json(&meta.data_type)?;
        let chunk_shape = meta.chunk_shape().ok_or_else(|| {
            CodecError::Unsupported(format!("chunk grid {}", meta.chunk_grid.name()))
        })?;
        let fill = meta.json.get("fill_value").ok_or_else(|| DataTypeError::InvalidFillValue {
            data_type: data_type.name.clone(),
            reason: "`fill_value` is missing".into(),
        })?;
        let spec = ChunkSpec {
            fill_value: fill_value_bytes(&data_type, fill)?,
            codecs: meta.codecs.clone(),
            data_type,
            chunk_shape,
        };
        spec.check()?;
        Ok(spec)
    }

    /// Check, without any data, that chunks can be decoded: every codec is known
    /// and configured correctly, in a valid order, for this shape and data type
    /// (nested sharding checked recursively), and the sizes are within bounds.
    pub fn check(&self) -> Result<(), CodecError> {
        Plan::new(self, 0).map(|_| ())
    }

    /// Bytes of one decoded chunk: `prod(chunk_shape) * itemsize`, refused above
    /// [`MAX_DECODED_CHUNK_BYTES`].
    pub fn decoded_size(&self) -> Result<u64, CodecError> {
        decoded_size(&self.data_type, &self.chunk_shape)
    }

    /// Decode one stored chunk into exactly [`decoded_size`](Self::decoded_size)
    /// bytes: little-endian elements in C order of the array's axes.
    pub fn decode(&self, encoded: &[u8]) -> Result<Vec<u8>, CodecError> {
        Plan::new(self, 0)?.decode(encoded)
    }

    /// A whole chunk of the fill value (what a missing chunk reads as).
    pub fn fill_chunk(&self) -> Result<Vec<u8>, CodecError> {
        check_fill(self)?;
        let size = usize::try_from(self.decoded_size()?)
            .map_err(|_| CodecError::TooLarge { size: u64::MAX, limit: MAX_DECODED_CHUNK_BYTES })?;
        Ok(sharding::repeat_fill(&self.fill_value, size))
    }
}

fn check_fill(spec: &ChunkSpec) -> Result<(), CodecError> {
    if spec.fill_value.len() != spec.data_type.itemsize {
        return Err(DataTypeError::InvalidFillValue {
            data_type: spec.data_type.name.clone(),
            reason: format!(
                "{} bytes for a {}-byte element",
                spec.fill_value.len(),
                spec.data_type.itemsize
            ),
        }
        .into());
    }
    Ok(())
}

/// One array->array codec, parsed.
#[derive(Debug)]
enum ArrayStep {
    /// A `transpose` as its `order` (`order[i]` is the axis that becomes encoded axis `i`),
    /// the shape it sees and the size of its elements.
    Transpose(Vec<usize>, Vec<u64>, usize),
    /// numcodecs' `delta` (same data type in and out).
    Delta(numcodecs::Delta),
    /// numcodecs' `fixedscaleoffset` (stores its `astype`).
    FixedScaleOffset(numcodecs::FixedScaleOffset),
    /// numcodecs' `packbits` of this many bools (stores bytes).
    PackBits(u64),
    ScaleOffset(scale_offset::ScaleOffset),
    /// `cast_value` (stores its `data_type`).
    CastValue(cast_value::CastValue),
}

/// A checked chain for chunks of one shape, ready to decode.
#[derive(Debug)]
struct Plan {
    /// Decoded chunk size in bytes.
    size: u64,
    /// The array->array codecs that change bytes (`transpose`, numcodecs' `delta`,
    /// `fixedscaleoffset`, `packbits`), outermost first.
    array_to_array: Vec<ArrayStep>,
    /// What the array->bytes codec sees: the data type (the array's, unless a
    /// `fixedscaleoffset` or `packbits` changed it) and the size in bytes.
    encoded_type: DataType,
    encoded_size: u64,
    array_to_bytes: ArrayToBytes,
    bytes_to_bytes: Vec<BytesToBytes>,
}

impl Plan {
    /// Parse and check `spec`'s chain; `depth` counts enclosing shard levels.
    fn new(spec: &ChunkSpec, depth: usize) -> Result<Plan, CodecError> {
        let size = spec.decoded_size()?;
        check_fill(spec)?;
        let data_type = &spec.data_type;
        let mut array_to_array = Vec::new();
        let mut shape = spec.chunk_shape.clone();
        // The data type the next codec sees: array->array codecs may change it.
        let mut seen_type = data_type.clone();
        // Whether a codec so far changes the fill value the next codec sees.
        let mut fill_changed = false;
        let mut array_to_bytes = None;
        let mut bytes_to_bytes = Vec::new();
        for c in &spec.codecs {
            let name = c.name.as_str();
            if let Some(b) = BytesToBytes::from_codec(c) {
                let b = b?;
                if array_to_bytes.is_none() {
                    return Err(CodecError::InvalidChain(format!(
                        "{name} before the array->bytes codec"
                    )));
                }
                bytes_to_bytes.push(b);
                continue;
            }
            if array_to_bytes.is_none() && lossy_no_op(c, &seen_type)? {
                continue; // nothing to undo when decoding
            }
            if array_to_bytes.is_none() {
                match name {
                    "numcodecs.delta" => {
                        array_to_array
                            .push(ArrayStep::Delta(numcodecs::Delta::new(c, &seen_type)?));
                        continue;
                    }
                    "numcodecs.fixedscaleoffset" => {
                        let f = numcodecs::FixedScaleOffset::new(c, &seen_type)?;
                        seen_type = f.encoded_type().clone();
                        array_to_array.push(ArrayStep::FixedScaleOffset(f));
                        continue;
                    }
                    scale_offset::NAME => {
                        let s = scale_offset::ScaleOffset::new(c, &seen_type)?;
                        fill_changed = true;
                        array_to_array.push(ArrayStep::ScaleOffset(s));
                        continue;
                    }
                    cast_value::NAME => {
                        let cast = cast_value::CastValue::new(c, &seen_type)?;
                        seen_type = cast.encoded_type().clone();
                        array_to_array.push(ArrayStep::CastValue(cast));
                        continue;
                    }
                    "numcodecs.packbits" => {
                        if !c.configuration.is_empty() {
                            return Err(CodecError::InvalidConfiguration {
                                codec: name.into(),
                                reason: "takes no configuration".into(),
                            });
                        }
                        if seen_type.numpy_kind() != Some('b') {
                            return Err(CodecError::InvalidChain(format!(
                                "{name} on {} data (it packs bools)",
                                seen_type.name
                            )));
                        }
                        let count = element_count(&shape)?;
                        // It flattens the chunk into bytes.
                        shape = vec![numcodecs::packbits_encoded_len(count)];
                        seen_type = DataType::from_name("uint8").expect("core type");
                        array_to_array.push(ArrayStep::PackBits(count));
                        continue;
                    }
                    _ => {}
                }
            }
            if !matches!(name, "transpose" | "bytes" | SHARDING_CODEC) {
                return Err(CodecError::Unsupported(name.to_string()));
            }
            if array_to_bytes.is_some() {
                return Err(CodecError::InvalidChain(match name {
                    "transpose" => "transpose after the array->bytes codec".into(),
                    _ => "more than one array->bytes codec".into(),
                }));
            }
            match name {
                "transpose" => {
                    let order = transpose::parse_order(c)?;
                    let next = transpose::encoded_shape(&shape, &order)?;
                    let seen = std::mem::replace(&mut shape, next);
                    array_to_array.push(ArrayStep::Transpose(order, seen, seen_type.itemsize));
                }
                "bytes" => {
                    let big_endian = bytes::parse_big_endian(c, &seen_type)?;
                    if big_endian
                        && array_to_array
                            .iter()
                            .any(|s| matches!(s, ArrayStep::FixedScaleOffset(_)))
                    {
                        // zarr-python writes such chunks big-endian but reads them back as
                        // little-endian `astype` (numcodecs views the bytes): no reader agrees.
                        return Err(CodecError::Unsupported(
                            "numcodecs.fixedscaleoffset before a big-endian bytes codec".into(),
                        ));
                    }
                    array_to_bytes = Some(ArrayToBytes::Bytes { big_endian });
                }
                _ if seen_type != *data_type || fill_changed => {
                    // The inner chunks' fill value and type would be the converted ones.
                    return Err(CodecError::Unsupported(format!(
                        "{name} after a codec that changes the data type or the fill value"
                    )));
                }
                _ => {
                    array_to_bytes = Some(ArrayToBytes::Sharding(sharding::ShardCodec::new(
                        c, &shape, spec, depth,
                    )?));
                }
            }
        }
        let array_to_bytes = array_to_bytes
            .ok_or_else(|| CodecError::InvalidChain("no array->bytes codec".into()))?;
        let encoded_size = decoded_size(&seen_type, &shape)?;
        Ok(Plan {
            size,
            array_to_array,
            encoded_type: seen_type,
            encoded_size,
            array_to_bytes,
            bytes_to_bytes,
        })
    }

    fn decode(&self, encoded: &[u8]) -> Result<Vec<u8>, CodecError> {
        // bytes->bytes, innermost (last) first. Only the codec next to the `bytes`
        // codec knows its exact output size; other stages get a generous bound
        // (compressors and checksums may add a little, a shard adds its index) so
        // a decompression bomb still stops early.
        let index_size = match &self.array_to_bytes {
            ArrayToBytes::Bytes { .. } => 0,
            ArrayToBytes::Sharding(s) => s.index_size(),
        };
        let generous = self
            .size
            .max(self.encoded_size)
            .saturating_mul(2)
            .saturating_add(1 << 20)
            .min(MAX_DECODED_CHUNK_BYTES + (1 << 20))
            .saturating_add(index_size);
        let mut buf: Cow<[u8]> = Cow::Borrowed(encoded);
        for (i, codec) in self.bytes_to_bytes.iter().enumerate().rev() {
            let bound = match self.array_to_bytes {
                ArrayToBytes::Bytes { .. } if i == 0 => SizeBound::Exact(self.encoded_size),
                _ => SizeBound::AtMost(generous),
            };
            buf = Cow::Owned(codec.decode(&buf, bound)?.into_owned());
        }

        let mut data = match &self.array_to_bytes {
            ArrayToBytes::Bytes { big_endian } => {
                if buf.len() as u64 != self.encoded_size {
                    return Err(CodecError::WrongSize {
                        codec: "bytes",
                        expected: self.encoded_size,
                        actual: buf.len() as u64,
                    });
                }
                let mut data = buf.into_owned();
                if *big_endian {
                    bytes::swap_in_place(&mut data, self.encoded_type.swap_size());
                }
                data
            }
            ArrayToBytes::Sharding(s) => s.decode(&buf)?,
        };

        // array->array, innermost first.
        for step in self.array_to_array.iter().rev() {
            match step {
                ArrayStep::Transpose(order, shape, itemsize) => {
                    data = transpose::decode(&data, *itemsize, shape, order)?;
                }
                ArrayStep::Delta(delta) => delta.decode(&mut data),
                ArrayStep::FixedScaleOffset(f) => data = f.decode(&data),
                ArrayStep::PackBits(count) => data = numcodecs::packbits_decode(&data, *count)?,
                ArrayStep::ScaleOffset(s) => s.decode(&mut data)?,
                ArrayStep::CastValue(cast) => data = cast.decode(&data)?,
            }
        }
        debug_assert_eq!(data.len() as u64, self.size);
        Ok(data)
    }
}

/// A chain of bytes->bytes codecs on its own: what follows the array->bytes codec when the
/// views serve chunks still in that codec's byte form (a trailing `crc32c` cut off in the
/// v2 view; the compressors after `vlen-utf8` undone in the v2-decoded view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BytesChain(Vec<BytesToBytes>);

impl BytesChain {
    /// The chain of `codecs`, each a bytes->bytes codec this module decodes.
    pub fn new(codecs: &[Codec]) -> Result<Self, CodecError> {
        codecs
            .iter()
            .map(|c| {
                BytesToBytes::from_codec(c)
                    .unwrap_or_else(|| Err(CodecError::Unsupported(c.name.clone())))
            })
            .collect::<Result<_, _>>()
            .map(BytesChain)
    }

    /// How much shorter the output always is when the chain only checks checksums
    /// (`Some(4 * n)` for n crc32c), `None` when its size depends on the data.
    pub fn fixed_overhead(&self) -> Option<u64> {
        self.0.iter().all(|b| *b == BytesToBytes::Crc32c).then_some(4 * self.0.len() as u64)
    }

    /// Decode, innermost first. Checksums only: a slice of `data`, no copy.
    pub fn decode(&self, data: ::bytes::Bytes) -> Result<::bytes::Bytes, CodecError> {
        let bound = SizeBound::AtMost(MAX_DECODED_CHUNK_BYTES);
        let mut buf = data;
        for codec in self.0.iter().rev() {
            buf = match codec.decode(&buf, bound)? {
                Cow::Borrowed(inner) => buf.slice_ref(inner),
                Cow::Owned(v) => ::bytes::Bytes::from(v),
            };
        }
        Ok(buf)
    }
}

/// Check a chunk that ends in a crc32c checksum and return it without the checksum.
pub fn strip_crc32c(data: &[u8]) -> Result<&[u8], CodecError> {
    crc32c::decode(data)
}

/// Decode one stored chunk through `codecs` (a v3 array's `codecs`), returning
/// exactly `decoded_size(data_type, chunk_shape)` bytes: the chunk's elements,
/// little-endian, in C order of the array's axes. Sharding needs the fill value
/// and is refused here: use [`ChunkSpec::decode`].
pub fn decode_chunk(
    codecs: &[Codec],
    data_type: &DataType,
    chunk_shape: &[u64],
    encoded: &[u8],
) -> Result<Vec<u8>, CodecError> {
    if codecs.iter().any(|c| c.name == SHARDING_CODEC) {
        return Err(CodecError::Unsupported(SHARDING_CODEC.into()));
    }
    ChunkSpec {
        codecs: codecs.to_vec(),
        data_type: data_type.clone(),
        chunk_shape: chunk_shape.to_vec(),
        // Never used without sharding.
        fill_value: vec![0; data_type.itemsize],
    }
    .decode(encoded)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};
    use serde_json::json;
    use std::path::PathBuf;

    /// A file or directory under `src/zarr/codecs/testdata`.
    pub(crate) fn testdata(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/zarr/codecs/testdata").join(name)
    }

    /// The size checks of a codec decoded through [`read_bounded`], for `enc`
    /// encoding `raw` (more than one byte).
    pub(crate) fn check_bounds(
        decode: fn(&[u8], SizeBound) -> Result<Vec<u8>, CodecError>,
        enc: &[u8],
        raw: &[u8],
    ) {
        let n = raw.len() as u64;
        assert_eq!(decode(enc, SizeBound::Exact(n)).unwrap(), raw);
        assert_eq!(decode(enc, SizeBound::AtMost(n)).unwrap(), raw);
        for wrong in [n - 1, n + 1] {
            assert!(matches!(
                decode(enc, SizeBound::Exact(wrong)),
                Err(CodecError::WrongSize { .. })
            ));
        }
        for small in [n - 1, 10] {
            assert!(matches!(
                decode(enc, SizeBound::AtMost(small)),
                Err(CodecError::OutputTooLong { .. })
            ));
        }
    }

    /// The array document of a v3 vector.
    pub(crate) fn vector_meta(name: &str) -> ArrayMetadata {
        let doc = std::fs::read(testdata(name).join("zarr.json")).unwrap();
        match parse_zarr_json(&doc).unwrap() {
            NodeMetadata::Array(meta) => meta,
            NodeMetadata::Group(_) => panic!("{name}: not an array"),
        }
    }

    /// The v3 vectors: directories of testdata holding a `zarr.json`.
    pub(crate) fn v3_vectors() -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(testdata(""))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("zarr.json").is_file())
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Every chunk of a vector decodes to numpy's bytes.
    fn check_vector(name: &str) {
        let dir = testdata(name);
        let meta = vector_meta(name);
        let spec = ChunkSpec::from_v3(&meta).unwrap_or_else(|e| panic!("{name}: {e}"));
        let chunk = std::fs::read(dir.join("chunk")).unwrap();
        let expected = std::fs::read(dir.join("expected")).unwrap();
        assert_eq!(spec.decoded_size().unwrap(), expected.len() as u64, "{name}");
        let got = spec.decode(&chunk).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(got == expected, "{name}: decoded bytes differ");
        // The old entry point agrees wherever it applies.
        if !meta.codecs.iter().any(|c| c.name == SHARDING_CODEC) {
            let dt = DataType::from_json(&meta.data_type).unwrap();
            let old = decode_chunk(&meta.codecs, &dt, &spec.chunk_shape, &chunk).unwrap();
            assert!(old == expected, "{name}: decode_chunk differs");
        }
    }

    /// numcodecs' codecs (testdata/numcodecs, written by zarr-python 3 with numcodecs; see
    /// make_numcodecs_vectors.py): each chunk decodes to numpy's bytes, and a flipped byte in
    /// a checksummed chunk is an error.
    #[test]
    fn numcodecs_vectors() {
        let mut names: Vec<String> = std::fs::read_dir(testdata("numcodecs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".py"))
            .collect();
        names.sort();
        assert_eq!(names.len(), 26);
        for name in &names {
            check_vector(&format!("numcodecs/{name}"));
        }
        for name in ["adler32", "adler32_end_zstd", "crc32", "crc32c"] {
            let spec = ChunkSpec::from_v3(&vector_meta(&format!("numcodecs/{name}"))).unwrap();
            let mut chunk = std::fs::read(testdata(&format!("numcodecs/{name}/chunk"))).unwrap();
            let mid = chunk.len() / 2;
            chunk[mid] ^= 1;
            assert!(spec.decode(&chunk).is_err(), "{name}: corruption not detected");
        }
        // Bombs stop at the bound; truncations are errors.
        let spec = ChunkSpec::from_v3(&vector_meta("numcodecs/lz4")).unwrap();
        let mut chunk = std::fs::read(testdata("numcodecs/lz4/chunk")).unwrap();
        chunk[..4].copy_from_slice(&(1i32 << 30).to_le_bytes());
        assert!(spec.decode(&chunk).is_err());
        for name in ["bz2", "lzma_xz", "lzma_alone"] {
            let spec = ChunkSpec::from_v3(&vector_meta(&format!("numcodecs/{name}"))).unwrap();
            let chunk = std::fs::read(testdata(&format!("numcodecs/{name}/chunk"))).unwrap();
            assert!(spec.decode(&chunk[..chunk.len() - 3]).is_err(), "{name}");
        }
    }

    /// The vectors in one directory of testdata (`numcodecs`, `cast_value`), sorted.
    pub(crate) fn vectors_in(dir: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(testdata(dir))
            .unwrap()
            .map(|e| format!("{dir}/{}", e.unwrap().file_name().to_string_lossy()))
            .collect();
        names.sort();
        names
    }

    /// scale_offset and cast_value as zarr-python 3.4 wrote them (every rounding mode, clamp,
    /// wrap, NaN and infinity sentinels, sharded with an absent inner chunk) decode to what
    /// zarr-python reads.
    #[test]
    fn cast_value_vectors() {
        let names = vectors_in("cast_value");
        assert_eq!(names.len(), 19);
        for name in &names {
            check_vector(name);
        }
    }

    #[test]
    fn numcodecs_configurations() {
        let f8 = DataType::from_name("float64").unwrap();
        let i4 = DataType::from_name("int32").unwrap();
        let raw: Vec<u8> = (0..16u8).collect();
        let le = json!({"name": "bytes", "configuration": {"endian": "little"}});
        // Shuffle: byte j of each element is stored in plane j.
        let shuffled: Vec<u8> = (0..8).flat_map(|j| [j, j + 8]).collect();
        let c =
            codecs(json!([le, {"name": "numcodecs.shuffle", "configuration": {"elementsize": 8}}]));
        assert_eq!(decode_chunk(&c, &f8, &[2], &shuffled).unwrap(), raw);
        for bad in [
            json!({"name": "numcodecs.lzma", "configuration": {"format": 3}}),
            json!({"name": "numcodecs.adler32", "configuration": {"location": "middle"}}),
            json!({"name": "numcodecs.shuffle", "configuration": {"elementsize": -1}}),
            json!({"name": "numcodecs.jenkins_lookup3", "configuration": {}}),
            json!({"name": "numcodecs.packbits", "configuration": {}}), // int32 data
            json!({"name": "numcodecs.fixedscaleoffset", "configuration": {"scale": 1}}),
            json!({"name": "numcodecs.delta", "configuration": {"dtype": "<i2"}}),
            json!({"name": "numcodecs.delta", "configuration": {"dtype": "<i4", "astype": "<i2"}}),
        ] {
            let c = codecs(json!([bad.clone(), le]));
            let c2 = codecs(json!([le, bad.clone()]));
            assert!(decode_chunk(&c, &i4, &[4], &raw).is_err(), "{bad}");
            assert!(decode_chunk(&c2, &i4, &[4], &raw).is_err(), "{bad}");
        }
        // bitround and quantize decode to what is stored, when their dtype is the array's.
        let q = |dtype: &str| {
            codecs(
                json!([{"name": "numcodecs.quantize", "configuration": {"digits": 2, "dtype": dtype}}, le]),
            )
        };
        assert_eq!(decode_chunk(&q("<f8"), &f8, &[2], &raw).unwrap(), raw);
        assert!(decode_chunk(&q("<f4"), &f8, &[2], &raw).is_err());
        let b =
            codecs(json!([{"name": "numcodecs.bitround", "configuration": {"keepbits": 3}}, le]));
        assert_eq!(decode_chunk(&b, &f8, &[2], &raw).unwrap(), raw);
        assert!(decode_chunk(&b, &i4, &[4], &raw).is_err());
    }

    /// fixedscaleoffset and packbits change what the codecs after them see: the type (and
    /// with it the size and the byte swap of `bytes`) and, for packbits, the shape.
    #[test]
    fn type_changing_chains() {
        let f8 = DataType::from_name("float64").unwrap();
        let b1 = DataType::from_name("bool").unwrap();
        let fso = json!({"name": "numcodecs.fixedscaleoffset",
            "configuration": {"scale": 10, "offset": 1, "dtype": "<f8", "astype": "<i2"}});
        let le = json!({"name": "bytes", "configuration": {"endian": "little"}});
        // [0, 10, -10] as int16 -> [1, 2, 0].
        let enc: Vec<u8> = [0i16, 10, -10].iter().flat_map(|v| v.to_le_bytes()).collect();
        let want: Vec<u8> = [1.0f64, 2.0, 0.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let c = codecs(json!([fso, le]));
        assert_eq!(decode_chunk(&c, &f8, &[3], &enc).unwrap(), want);
        // zarr-python reads a big-endian one back wrongly: refused.
        let big = json!({"name": "bytes", "configuration": {"endian": "big"}});
        assert!(matches!(
            decode_chunk(&codecs(json!([fso, big])), &f8, &[3], &enc),
            Err(CodecError::Unsupported(_))
        ));
        // The stored size is that of int16 elements, compressed or not.
        assert!(matches!(
            decode_chunk(&c, &f8, &[3], &want),
            Err(CodecError::WrongSize { expected: 6, actual: 24, .. })
        ));
        let z = codecs(json!([fso, le, "zstd"]));
        let zenc = ::zstd::bulk::compress(&enc, 1).unwrap();
        assert_eq!(decode_chunk(&z, &f8, &[3], &zenc).unwrap(), want);
        // A transpose after the codec moves int16 elements.
        let t = json!({"name": "transpose", "configuration": {"order": [1, 0]}});
        let c = codecs(json!([fso, t, le]));
        let enc: Vec<u8> = [0i16, 20, 10, 30].iter().flat_map(|v| v.to_le_bytes()).collect();
        let want: Vec<u8> = [1.0f64, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(decode_chunk(&c, &f8, &[2, 2], &enc).unwrap(), want);

        // packbits: 2x5 bools are 1 padding byte + 2 bytes; a 1-d transpose after it is fine.
        let pb = json!({"name": "numcodecs.packbits", "configuration": {}});
        let bits = [1u8, 0, 0, 1, 1, 0, 1, 0, 1, 1];
        let packed = [6u8, 0b1001_1010, 0b1100_0000];
        for c in [
            json!([pb, "bytes"]),
            json!([pb, {"name": "transpose",
            "configuration": {"order": [0]}}, "bytes", "gzip"]),
        ] {
            let input = if c.to_string().contains("gzip") {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                std::io::Write::write_all(&mut e, &packed).unwrap();
                e.finish().unwrap()
            } else {
                packed.to_vec()
            };
            assert_eq!(
                decode_chunk(&codecs(c.clone()), &b1, &[2, 5], &input).unwrap(),
                bits,
                "{c}"
            );
        }
        let pbc = codecs(json!([pb, "bytes"]));
        assert!(decode_chunk(&pbc, &b1, &[2, 5], &packed[..2]).is_err());
        assert!(decode_chunk(&pbc, &b1, &[2, 4], &packed).is_err());
        let bad_cfg = json!({"name": "numcodecs.packbits", "configuration": {"x": 1}});
        assert!(matches!(
            decode_chunk(&codecs(json!([bad_cfg, "bytes"])), &b1, &[2], &[6, 0]),
            Err(CodecError::InvalidConfiguration { .. })
        ));
        // A 2-d transpose after packbits no longer fits its 1-d output.
        let t2 = json!([pb, {"name": "transpose", "configuration": {"order": [1, 0]}}, "bytes"]);
        assert!(decode_chunk(&codecs(t2), &b1, &[2, 5], &packed).is_err());

        // Sharding after a type change is refused (its fill value would be the converted one).
        let shard = json!({"name": "sharding_indexed", "configuration": {"chunk_shape": [2],
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "index_codecs": ["bytes", "crc32c"]}});
        assert!(matches!(
            spec(json!([fso, shard]), "float64", &[4]).check(),
            Err(CodecError::Unsupported(_))
        ));
        // Inside the shard, it is an ordinary inner chain.
        let inner = json!({"name": "sharding_indexed", "configuration": {"chunk_shape": [2],
            "codecs": [fso, {"name": "bytes", "configuration": {"endian": "little"}}],
            "index_codecs": ["bytes", "crc32c"]}});
        spec(json!([inner]), "float64", &[4]).check().unwrap();
        // scale_offset changes the fill value the shard would fill with, not the type.
        let so = json!({"name": "scale_offset", "configuration": {"offset": 1}});
        let cast = json!({"name": "cast_value", "configuration": {"data_type": "int16"}});
        for outer in [json!([so, shard]), json!([so, cast, shard]), json!([cast, shard])] {
            assert!(
                matches!(
                    spec(outer.clone(), "float64", &[4]).check(),
                    Err(CodecError::Unsupported(_))
                ),
                "{outer}"
            );
        }
    }

    const SHARDED_VECTORS: [&str; 5] = [
        "sharded_int32_end",
        "sharded_uint16_start",
        "transpose_sharded_float32",
        "sharded_gzip_after",
        "nested_sharded_float64",
    ];

    #[test]
    fn zarr_python_vectors() {
        let names = [
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
            "int32_numcodecs_zlib",
        ];
        for name in names.iter().chain(&SHARDED_VECTORS) {
            check_vector(name);
        }
        // Nothing in testdata is left unchecked.
        assert_eq!(v3_vectors().len(), names.len() + SHARDED_VECTORS.len());
    }

    /// Each sharded vector has an absent inner chunk: decoding with another fill
    /// value changes exactly the bytes that are not stored.
    #[test]
    fn sharded_vectors_use_the_fill_value() {
        for name in SHARDED_VECTORS {
            let mut spec = ChunkSpec::from_v3(&vector_meta(name)).unwrap();
            let chunk = std::fs::read(testdata(name).join("chunk")).unwrap();
            let with_fill = spec.decode(&chunk).unwrap();
            let fill = spec.fill_value.clone();
            spec.fill_value = fill.iter().map(|b| !b).collect();
            let other = spec.decode(&chunk).unwrap();
            let itemsize = fill.len();
            let changed: Vec<usize> = (0..with_fill.len() / itemsize)
                .filter(|&i| {
                    with_fill[i * itemsize..][..itemsize] != other[i * itemsize..][..itemsize]
                })
                .collect();
            assert!(!changed.is_empty(), "{name}: no absent inner chunk");
            for i in changed {
                assert_eq!(with_fill[i * itemsize..][..itemsize], fill[..], "{name}");
            }
        }
    }

    /// One vector's chunk, truncated at every length, with each byte flipped, or with
    /// bytes appended, errors or decodes to the right size, and never panics.
    pub(crate) fn check_mutations(name: &str, spec: &ChunkSpec) {
        let size = spec.decoded_size().unwrap() as usize;
        let chunk = std::fs::read(testdata(name).join("chunk")).unwrap();
        let mut inputs: Vec<Vec<u8>> = (0..chunk.len()).map(|n| chunk[..n].to_vec()).collect();
        for i in 0..chunk.len() {
            let mut c = chunk.clone();
            c[i] ^= 0x5a;
            inputs.push(c);
        }
        let mut longer = chunk.clone();
        longer.extend_from_slice(&[0xff; 20]);
        inputs.push(longer);
        for input in inputs {
            if let Ok(out) = spec.decode(&input) {
                assert_eq!(out.len(), size, "{name}");
            }
        }
    }

    /// Every v3, numcodecs and cast_value vector, mutated (the v2 vectors: in `zarr::v2`'s tests,
    /// which build their chunk specs).
    #[test]
    fn mutated_vectors_never_panic() {
        let mut specs: Vec<(String, ChunkSpec)> = v3_vectors()
            .into_iter()
            .map(|name| {
                let spec = ChunkSpec::from_v3(&vector_meta(&name)).unwrap();
                (name, spec)
            })
            .collect();
        for name in vectors_in("numcodecs").into_iter().chain(vectors_in("cast_value")) {
            specs.push((name.clone(), ChunkSpec::from_v3(&vector_meta(&name)).unwrap()));
        }
        assert!(specs.len() > 50);
        for (name, spec) in specs {
            check_mutations(&name, &spec);
        }
    }

    #[test]
    fn from_v3_and_fill_chunk() {
        let meta = vector_meta("sharded_int32_end");
        let spec = ChunkSpec::from_v3(&meta).unwrap();
        assert_eq!(spec.chunk_shape, [8, 6]);
        assert_eq!(spec.fill_value, 7i32.to_le_bytes());
        assert_eq!(spec.decoded_size().unwrap(), 8 * 6 * 4);
        let fill = spec.fill_chunk().unwrap();
        assert_eq!(fill.len(), 192);
        assert!(fill.chunks(4).all(|e| e == 7i32.to_le_bytes()));
        let nan = ChunkSpec::from_v3(&vector_meta("transpose_sharded_float32")).unwrap();
        assert_eq!(nan.fill_value, f32::NAN.to_le_bytes());

        let mut irregular = meta.clone();
        irregular.chunk_grid = crate::zarr::chunk_grid::ChunkGrid::parse(
            &json!({"name": "rectilinear", "configuration": {"kind": "inline",
                "chunk_shapes": [[8, 4, 8], [6, 6, 3]]}}),
            &irregular.shape,
        )
        .unwrap();
        assert!(matches!(
            ChunkSpec::from_v3(&irregular),
            Err(CodecError::Unsupported(n)) if n == "chunk grid rectilinear"
        ));
        let mut no_fill = meta.clone();
        no_fill.json.remove("fill_value");
        assert!(matches!(
            ChunkSpec::from_v3(&no_fill),
            Err(CodecError::DataType(DataTypeError::InvalidFillValue { .. }))
        ));
        let mut bad_fill = meta.clone();
        bad_fill.json.insert("fill_value".into(), json!("NaN"));
        assert!(matches!(
            ChunkSpec::from_v3(&bad_fill),
            Err(CodecError::DataType(DataTypeError::InvalidFillValue { .. }))
        ));
        let mut bad_type = meta.clone();
        bad_type.data_type = json!("string");
        assert!(matches!(
            ChunkSpec::from_v3(&bad_type),
            Err(CodecError::DataType(DataTypeError::Unsupported(_)))
        ));
        // from_v3 checks the chain.
        let mut bad_inner = meta.clone();
        bad_inner.codecs[0].configuration.insert("chunk_shape".into(), json!([3, 3]));
        assert!(matches!(
            ChunkSpec::from_v3(&bad_inner),
            Err(CodecError::InvalidConfiguration { .. })
        ));
        // A fill value of the wrong width is refused everywhere.
        let mut wrong = spec.clone();
        wrong.fill_value = vec![0; 3];
        assert!(matches!(
            wrong.check(),
            Err(CodecError::DataType(DataTypeError::InvalidFillValue { .. }))
        ));
        assert!(matches!(
            wrong.fill_chunk(),
            Err(CodecError::DataType(DataTypeError::InvalidFillValue { .. }))
        ));
        assert!(matches!(
            wrong.decode(&[]),
            Err(CodecError::DataType(DataTypeError::InvalidFillValue { .. }))
        ));
        // A huge chunk is refused before allocating.
        let mut huge = spec.clone();
        huge.chunk_shape = vec![1 << 20, 1 << 20];
        assert!(matches!(huge.fill_chunk(), Err(CodecError::TooLarge { .. })));
    }

    fn spec(codecs_json: Value, dtype: &str, shape: &[u64]) -> ChunkSpec {
        let data_type = DataType::from_name(dtype).unwrap();
        ChunkSpec {
            codecs: codecs(codecs_json),
            fill_value: vec![0; data_type.itemsize],
            data_type,
            chunk_shape: shape.to_vec(),
        }
    }

    #[test]
    fn check_sharded_chains() {
        let shard = |inner: Value, codecs: Value| {
            json!({"name": "sharding_indexed", "configuration": {"chunk_shape": inner,
                "codecs": codecs, "index_codecs": ["bytes", "crc32c"]}})
        };
        let le = json!({"name": "bytes", "configuration": {"endian": "little"}});
        let ok = [
            json!([shard(json!([2, 3]), json!([le]))]),
            json!([shard(json!([2, 3]), json!([le, "zstd"])), "gzip", "crc32c"]),
            // Transposed (4, 6) -> (6, 4): (3, 2) divides only the transposed shape.
            json!([{"name": "transpose", "configuration": {"order": [1, 0]}},
                   shard(json!([3, 2]), json!([le]))]),
            json!([shard(json!([2, 6]), json!([shard(json!([1, 3]), json!([le]))]))]),
        ];
        for c in ok {
            spec(c.clone(), "int32", &[4, 6]).check().unwrap_or_else(|e| panic!("{c}: {e}"));
        }
        let bad = [
            // Inner shape must divide the shape the codec sees.
            json!([shard(json!([3, 2]), json!([le]))]),
            json!([{"name": "transpose", "configuration": {"order": [1, 0]}},
                   shard(json!([2, 3]), json!([le]))]),
            // Bad inner chains, also nested.
            json!([shard(json!([2, 3]), json!(["zstd"]))]),
            json!([shard(json!([2, 3]), json!([le, "lz4"]))]),
            json!([shard(json!([2, 3]), json!(["bytes"]))]), // int32 needs an endian
            json!([shard(json!([2, 6]), json!([shard(json!([4, 3]), json!([le]))]))]),
            // Sharding twice, or transpose after it.
            json!([shard(json!([2, 3]), json!([le])), shard(json!([2, 3]), json!([le]))]),
            json!([shard(json!([2, 3]), json!([le])), {"name": "transpose", "configuration": {"order": [1, 0]}}]),
            json!(["sharding_indexed"]),
        ];
        for c in bad {
            assert!(spec(c.clone(), "int32", &[4, 6]).check().is_err(), "{c}");
        }
        // Sizes are refused from the configuration alone: a shard over the decoded
        // limit, an index over the entry limit (2^27 inner chunks of one element).
        let one = json!([shard(json!([1, 1]), json!(["bytes"]))]);
        assert!(matches!(
            spec(one.clone(), "uint8", &[1 << 16, 1 << 16]).check(),
            Err(CodecError::TooLarge { .. })
        ));
        assert!(matches!(
            spec(one.clone(), "uint8", &[1 << 14, 1 << 13]).check(),
            Err(CodecError::InvalidConfiguration { .. })
        ));
        spec(one, "uint8", &[1 << 13, 1 << 13]).check().unwrap();
    }

    fn codecs(v: Value) -> Vec<Codec> {
        crate::zarr::metadata::parse_codecs(&v, "codecs").unwrap()
    }

    #[test]
    fn sizes() {
        let i4 = DataType::from_name("int32").unwrap();
        assert_eq!(decoded_size(&i4, &[4, 5]).unwrap(), 80);
        assert_eq!(decoded_size(&i4, &[]).unwrap(), 4);
        assert!(matches!(decoded_size(&i4, &[1 << 20, 1 << 20]), Err(CodecError::TooLarge { .. })));
        assert!(matches!(decoded_size(&i4, &[u64::MAX, 2]), Err(CodecError::TooLarge { .. })));
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
            (json!([{"name": "sharding_indexed", "configuration": {}}]), "sharding_indexed"),
            (json!(["bytes", "lz4"]), "lz4"),
            (json!(["bytes", "bz2"]), "bz2"),
            (json!(["bytes", "numcodecs.jenkins_lookup3"]), "numcodecs.jenkins_lookup3"),
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
        assert_eq!(decode_chunk(&codecs(json!(["bytes"])), &u1, &[2], &[1, 2]).unwrap(), [1, 2]);
        assert!(matches!(
            decode_chunk(&codecs(json!(["bytes"])), &u1, &[2], &[1, 2, 3]),
            Err(CodecError::WrongSize { expected: 2, actual: 3, .. })
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
        let enc: Vec<u8> = [1u16, 4, 2, 5, 3, 6].iter().flat_map(|v| v.to_be_bytes()).collect();
        let want: Vec<u8> = [1u16, 2, 3, 4, 5, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
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
