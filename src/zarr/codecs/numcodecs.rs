//! numcodecs' bytes->bytes codecs, as zarr-python 3 names them in v3 metadata
//! (`numcodecs.<id>`, configuration = numcodecs' own): `bz2`, `lz4`, `lzma`, the checksums
//! `adler32`, `crc32` and `crc32c` (checked and removed), and `shuffle`. Byte formats are
//! numcodecs': lz4 is a 4-byte little-endian decoded size, then one LZ4 block; lzma is an
//! `.xz` stream (`format` 1, the default) or an `.lzma` one (`format` 2); the checksums are
//! little-endian u32 at `location` `start` (adler32, crc32) or `end` (crc32c) by default.
//! `fletcher32` is HDF5's Fletcher-32, 4 trailing bytes: checked and removed (see
//! [`Numcodec::Fletcher32`]). Also here: the array->array transforms `delta`,
//! `fixedscaleoffset` and `packbits`.

use std::io::{self, Write};

use serde_json::{Map, Value};

use super::numeric::{Numeric, Scalar};
use super::{read_bounded, CodecError, SizeBound};
use crate::zarr::data_type::{DataType, CORE_TYPES};
use crate::zarr::metadata::Codec;

/// One configured numcodecs bytes->bytes codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Numcodec {
    Bz2,
    Lz4,
    /// `true` for `.lzma` (format 2), `false` for `.xz` (format 1).
    Lzma {
        alone: bool,
    },
    Checksum {
        kind: Checksum,
        at_start: bool,
    },
    Shuffle {
        elementsize: usize,
    },
    /// HDF5's Fletcher-32 as numcodecs writes it: the checksum (little-endian u32) trails the
    /// data; it is checked, then cut off. Computed by the `fletcher` crate over big-endian
    /// 16-bit words (see [`hdf5_fletcher32`]).
    Fletcher32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Checksum {
    Adler32,
    Crc32,
    Crc32c,
}

fn invalid(id: &str, reason: impl Into<String>) -> CodecError {
    CodecError::InvalidConfiguration { codec: format!("numcodecs.{id}"), reason: reason.into() }
}

impl Numcodec {
    /// The codec for `numcodecs.<id>` with `config`; `None` for ids decoded elsewhere or
    /// not at all.
    pub(crate) fn parse(id: &str, config: &Map<String, Value>) -> Option<Result<Self, CodecError>> {
        let checksum = |kind, default_start: bool| {
            let at_start = match config.get("location") {
                None | Some(Value::Null) => Ok(default_start),
                Some(Value::String(s)) if s == "start" => Ok(true),
                Some(Value::String(s)) if s == "end" => Ok(false),
                Some(_) => Err(invalid(id, "`location` must be \"start\" or \"end\"")),
            };
            at_start.map(|at_start| Numcodec::Checksum { kind, at_start })
        };
        Some(match id {
            "bz2" => Ok(Numcodec::Bz2),
            "lz4" => Ok(Numcodec::Lz4),
            "lzma" => match config.get("format") {
                None | Some(Value::Null) => Ok(Numcodec::Lzma { alone: false }),
                Some(v) if v.as_i64() == Some(1) => Ok(Numcodec::Lzma { alone: false }),
                Some(v) if v.as_i64() == Some(2) => Ok(Numcodec::Lzma { alone: true }),
                Some(_) => Err(CodecError::Unsupported("numcodecs.lzma raw format".into())),
            },
            "adler32" => checksum(Checksum::Adler32, true),
            "crc32" => checksum(Checksum::Crc32, true),
            "crc32c" => checksum(Checksum::Crc32c, false),
            "shuffle" => match config.get("elementsize") {
                None | Some(Value::Null) => Ok(Numcodec::Shuffle { elementsize: 4 }),
                Some(v) => match v.as_u64() {
                    Some(n) if n <= 1 << 20 => Ok(Numcodec::Shuffle { elementsize: n as usize }),
                    _ => Err(invalid(id, "`elementsize` must be a small non-negative integer")),
                },
            },
            "fletcher32" => Ok(Numcodec::Fletcher32),
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Numcodec::Bz2 => "numcodecs.bz2",
            Numcodec::Lz4 => "numcodecs.lz4",
            Numcodec::Lzma { .. } => "numcodecs.lzma",
            Numcodec::Checksum { kind: Checksum::Adler32, .. } => "numcodecs.adler32",
            Numcodec::Checksum { kind: Checksum::Crc32, .. } => "numcodecs.crc32",
            Numcodec::Checksum { kind: Checksum::Crc32c, .. } => "numcodecs.crc32c",
            Numcodec::Shuffle { .. } => "numcodecs.shuffle",
            Numcodec::Fletcher32 => "numcodecs.fletcher32",
        }
    }

    /// Checksums give a borrowed slice of `data`; the others a new buffer.
    pub(crate) fn decode<'a>(
        self,
        data: &'a [u8],
        bound: SizeBound,
    ) -> Result<std::borrow::Cow<'a, [u8]>, CodecError> {
        use std::borrow::Cow;
        let name = self.name();
        let corrupt = |reason: String| CodecError::Corrupt { codec: name, reason };
        Ok(match self {
            Numcodec::Bz2 => {
                Cow::Owned(read_bounded(name, bzip2::read::MultiBzDecoder::new(data), bound)?)
            }
            Numcodec::Lz4 => {
                let (head, block) = data
                    .split_first_chunk::<4>()
                    .ok_or_else(|| corrupt("shorter than its 4-byte size header".into()))?;
                let size = i32::from_le_bytes(*head);
                let size = u64::try_from(size).map_err(|_| corrupt(format!("size {size}")))?;
                bound.check(name, size as usize)?;
                if size > bound.limit() {
                    return Err(CodecError::OutputTooLong { codec: name, limit: bound.limit() });
                }
                let out = lz4_flex::block::decompress(block, size as usize)
                    .map_err(|e| corrupt(e.to_string()))?;
                bound.check(name, out.len())?;
                Cow::Owned(out)
            }
            Numcodec::Lzma { alone } => {
                let mut out = Bounded { buf: Vec::new(), limit: bound.limit() };
                let mut input = data;
                let r = if alone {
                    lzma_rs::lzma_decompress(&mut input, &mut out)
                } else {
                    lzma_rs::xz_decompress(&mut input, &mut out)
                };
                r.map_err(|e| match e {
                    lzma_rs::error::Error::IoError(e) if e.kind() == io::ErrorKind::OutOfMemory => {
                        CodecError::OutputTooLong { codec: name, limit: bound.limit() }
                    }
                    e => corrupt(e.to_string()),
                })?;
                bound.check(name, out.buf.len())?;
                Cow::Owned(out.buf)
            }
            Numcodec::Checksum { kind, at_start } => {
                if data.len() < 4 {
                    return Err(corrupt("shorter than its 4-byte checksum".into()));
                }
                let (stored, payload) = if at_start {
                    let (s, p) = data.split_at(4);
                    (s, p)
                } else {
                    let (p, s) = data.split_at(data.len() - 4);
                    (s, p)
                };
                let stored = u32::from_le_bytes(stored.try_into().expect("4 bytes"));
                let computed = match kind {
                    Checksum::Adler32 => adler2::adler32_slice(payload),
                    Checksum::Crc32 => crc32fast::hash(payload),
                    Checksum::Crc32c => ::crc32c::crc32c(payload),
                };
                if stored != computed {
                    return Err(corrupt(format!(
                        "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
                    )));
                }
                bound.check(name, payload.len())?;
                Cow::Borrowed(payload)
            }
            Numcodec::Shuffle { elementsize } => {
                bound.check(name, data.len())?;
                if elementsize <= 1 {
                    return Ok(Cow::Borrowed(data));
                }
                if !data.len().is_multiple_of(elementsize) {
                    return Err(corrupt(format!(
                        "{} bytes is not a multiple of elementsize {elementsize}",
                        data.len()
                    )));
                }
                // Byte j of every element is stored together: plane j holds byte j of each.
                let count = data.len() / elementsize;
                let mut out = vec![0u8; data.len()];
                for (j, plane) in data.chunks_exact(count).enumerate() {
                    for (i, &b) in plane.iter().enumerate() {
                        out[i * elementsize + j] = b;
                    }
                }
                Cow::Owned(out)
            }
            Numcodec::Fletcher32 => {
                let split = data
                    .len()
                    .checked_sub(4)
                    .ok_or_else(|| corrupt("shorter than its 4-byte checksum".into()))?;
                let (payload, stored) = data.split_at(split);
                bound.check(name, payload.len())?;
                let stored = u32::from_le_bytes(stored.try_into().expect("4 bytes"));
                let computed = hdf5_fletcher32(payload);
                if !same_fletcher32(computed, stored) {
                    return Err(corrupt(format!(
                        "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
                    )));
                }
                Cow::Borrowed(payload)
            }
        })
    }
}

/// A `Write` that refuses to grow past `limit` (a decompression bomb stops early).
struct Bounded {
    buf: Vec<u8>,
    limit: u64,
}

impl Write for Bounded {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        if (self.buf.len() + b.len()) as u64 > self.limit {
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, "decoded output too long"));
        }
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// numcodecs' `delta` array->array codec with `dtype` and `astype` both the array's data type:
/// stored are the first element and then each difference (C order of the chunk); decoding is
/// a running sum in that type, wrapping for integers as numpy's does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Delta {
    kind: char,
    size: usize,
}

impl Delta {
    pub(crate) fn new(c: &Codec, data_type: &DataType) -> Result<Self, CodecError> {
        let unsupported = || {
            CodecError::Unsupported(format!(
                "numcodecs.delta with dtype/astype other than the array's {}",
                data_type.name
            ))
        };
        let kind = data_type.numpy_kind().filter(|k| "iuf".contains(*k)).ok_or_else(unsupported)?;
        let size = data_type.itemsize;
        if kind == 'f' && size == 2 {
            return Err(unsupported());
        }
        // numpy type strings for this type in little-endian or native order.
        let ours = |s: &str| {
            let body = s.trim_start_matches(['<', '|', '=']);
            body.len() == s.len() - 1 && body == format!("{kind}{size}")
        };
        let dtype = c.configuration.get("dtype").and_then(Value::as_str);
        if !dtype.is_some_and(ours) {
            return Err(unsupported());
        }
        match c.configuration.get("astype") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if ours(s) => {}
            Some(_) => return Err(unsupported()),
        }
        Ok(Delta { kind, size })
    }

    /// Undo the differences in place (little-endian elements).
    pub(crate) fn decode(&self, data: &mut [u8]) {
        macro_rules! running_sum {
            ($t:ty, $add:expr) => {{
                let mut acc: Option<$t> = None;
                for chunk in data.chunks_exact_mut(std::mem::size_of::<$t>()) {
                    let x = <$t>::from_le_bytes(chunk.try_into().expect("element size"));
                    let v = match acc {
                        None => x,
                        Some(a) => $add(a, x),
                    };
                    chunk.copy_from_slice(&v.to_le_bytes());
                    acc = Some(v);
                }
            }};
        }
        match (self.kind, self.size) {
            ('i', 1) => running_sum!(i8, i8::wrapping_add),
            ('i', 2) => running_sum!(i16, i16::wrapping_add),
            ('i', 4) => running_sum!(i32, i32::wrapping_add),
            ('i', 8) => running_sum!(i64, i64::wrapping_add),
            ('u', 1) => running_sum!(u8, u8::wrapping_add),
            ('u', 2) => running_sum!(u16, u16::wrapping_add),
            ('u', 4) => running_sum!(u32, u32::wrapping_add),
            ('u', 8) => running_sum!(u64, u64::wrapping_add),
            ('f', 4) => running_sum!(f32, |a: f32, x: f32| a + x),
            ('f', 8) => running_sum!(f64, |a: f64, x: f64| a + x),
            _ => unreachable!("checked in new"),
        }
    }
}

/// A numpy type string in little-endian or native byte order (`<i4`, `|u1`, `=f8`, `f8`) or
/// a numpy type name (`int32`), as its v3 data type; `None` for anything else, big-endian
/// types included.
fn numpy_type(s: &str) -> Option<DataType> {
    if let Ok(t) = DataType::from_name(s) {
        return Some(t);
    }
    let body = s.strip_prefix(['<', '|', '=']).unwrap_or(s);
    let mut chars = body.chars();
    let kind = chars.next()?;
    let size: usize = chars.as_str().parse().ok()?;
    let &(name, _, _) = CORE_TYPES.iter().find(|&&(_, k, n)| k == kind && n == size)?;
    DataType::from_name(name).ok()
}

/// One element as float64, the way numpy converts it (int64 and uint64 round to nearest).
fn read_f64(t: Numeric, b: &[u8]) -> f64 {
    match t.read(b) {
        Scalar::Int(i) => i as f64,
        Scalar::Float(x) => x,
    }
}

/// Append `x` cast to `t` as numpy's `astype` does: floats round to nearest, integers
/// truncate toward zero. (Out-of-range and NaN values are undefined in numpy; here they
/// saturate, NaN becoming 0.)
fn write_astype(t: Numeric, x: f64, out: &mut Vec<u8>) {
    match t {
        Numeric::I8 => out.extend_from_slice(&(x as i8).to_le_bytes()),
        Numeric::I16 => out.extend_from_slice(&(x as i16).to_le_bytes()),
        Numeric::I32 => out.extend_from_slice(&(x as i32).to_le_bytes()),
        Numeric::I64 => out.extend_from_slice(&(x as i64).to_le_bytes()),
        Numeric::U8 => out.extend_from_slice(&(x as u8).to_le_bytes()),
        Numeric::U16 => out.extend_from_slice(&(x as u16).to_le_bytes()),
        Numeric::U32 => out.extend_from_slice(&(x as u32).to_le_bytes()),
        Numeric::U64 => out.extend_from_slice(&(x as u64).to_le_bytes()),
        Numeric::F16 => out.extend_from_slice(&half::f16::from_f64(x).to_le_bytes()),
        Numeric::F32 => out.extend_from_slice(&(x as f32).to_le_bytes()),
        Numeric::F64 => out.extend_from_slice(&x.to_le_bytes()),
    }
}

/// numcodecs' `fixedscaleoffset` array->array codec: stored is `round((x - offset) * scale)`
/// as `astype`; decoding is numpy's `(enc / scale) + offset` cast to `dtype`. numpy computes
/// that in float64 for integer `astype`, and in the `astype`'s own precision for float16 and
/// float32 (the Python numbers `scale` and `offset` are first cast to it; float16 arithmetic
/// goes through float32 and rounds after each operation, as numpy's half loops do).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FixedScaleOffset {
    scale: f64,
    offset: f64,
    decoded: Numeric,
    encoded: Numeric,
    encoded_type: DataType,
}

impl FixedScaleOffset {
    /// The codec `c` on an array (or the stage of a chain) of `data_type`.
    pub(crate) fn new(c: &Codec, data_type: &DataType) -> Result<Self, CodecError> {
        const ID: &str = "fixedscaleoffset";
        let number = |key: &str| match c.configuration.get(key) {
            Some(v) => v.as_f64().ok_or_else(|| invalid(ID, format!("`{key}` must be a number"))),
            None => Err(invalid(ID, format!("`{key}` is required"))),
        };
        let (scale, offset) = (number("scale")?, number("offset")?);
        let dtype = |key: &str| match c.configuration.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => numpy_type(s)
                .map(Some)
                .ok_or_else(|| CodecError::Unsupported(format!("numcodecs.{ID} with {key} {s:?}"))),
            Some(_) => Err(invalid(ID, format!("`{key}` must be a numpy type string"))),
        };
        let decoded_type = dtype("dtype")?.unwrap_or_else(|| data_type.clone());
        if decoded_type != *data_type {
            return Err(CodecError::Unsupported(format!(
                "numcodecs.{ID} with dtype {} on {} data",
                decoded_type.name, data_type.name
            )));
        }
        let encoded_type = dtype("astype")?.unwrap_or_else(|| data_type.clone());
        let num = |t: &DataType| {
            Numeric::of(t).ok_or_else(|| {
                CodecError::Unsupported(format!("numcodecs.{ID} with type {}", t.name))
            })
        };
        Ok(FixedScaleOffset {
            scale,
            offset,
            decoded: num(data_type)?,
            encoded: num(&encoded_type)?,
            encoded_type,
        })
    }

    /// The data type the codec stores (`astype`).
    pub(crate) fn encoded_type(&self) -> &DataType {
        &self.encoded_type
    }

    /// Decode little-endian `astype` elements (a whole number of them: the caller checked
    /// the size) into little-endian `dtype` elements.
    pub(crate) fn decode(&self, data: &[u8]) -> Vec<u8> {
        let n = data.len() / self.encoded.size();
        let mut out = Vec::with_capacity(n * self.decoded.size());
        let elements = data.chunks_exact(self.encoded.size());
        match self.encoded {
            Numeric::F16 => {
                use half::f16;
                let scale = f16::from_f64(self.scale).to_f32();
                let offset = f16::from_f64(self.offset).to_f32();
                for e in elements {
                    let e = f16::from_le_bytes(e.try_into().expect("2 bytes")).to_f32();
                    let q = f16::from_f32(e / scale).to_f32();
                    write_astype(self.decoded, f16::from_f32(q + offset).to_f64(), &mut out);
                }
            }
            Numeric::F32 => {
                let (scale, offset) = (self.scale as f32, self.offset as f32);
                for e in elements {
                    let e = f32::from_le_bytes(e.try_into().expect("4 bytes"));
                    write_astype(self.decoded, (e / scale + offset) as f64, &mut out);
                }
            }
            enc => {
                for e in elements {
                    write_astype(
                        self.decoded,
                        read_f64(enc, e) / self.scale + self.offset,
                        &mut out,
                    );
                }
            }
        }
        out
    }
}

/// The bytes numcodecs' `packbits` stores for `count` bools: one byte giving the number of
/// padding bits, then the bits, 8 per byte, the first element in the most significant bit.
pub(crate) fn packbits_encoded_len(count: u64) -> u64 {
    1 + count.div_ceil(8)
}

/// Undo numcodecs' `packbits`: `count` bools (bytes 0 or 1).
pub(crate) fn packbits_decode(data: &[u8], count: u64) -> Result<Vec<u8>, CodecError> {
    let corrupt = |reason: String| CodecError::Corrupt { codec: "numcodecs.packbits", reason };
    let (&padding, bits) = data.split_first().ok_or_else(|| corrupt("no padding byte".into()))?;
    let held = (bits.len() as u64 * 8).checked_sub(u64::from(padding));
    if held != Some(count) {
        return Err(corrupt(format!(
            "{} bytes with {padding} padding bits do not hold {count} elements",
            bits.len()
        )));
    }
    Ok((0..count as usize).map(|i| (bits[i / 8] >> (7 - i % 8)) & 1).collect())
}

/// HDF5's Fletcher-32 (numcodecs' `fletcher32`): the sums run over big-endian 16-bit words,
/// an odd last byte being the high byte of a final word. The arithmetic is the `fletcher`
/// crate's; only the word order is HDF5's.
fn hdf5_fletcher32(data: &[u8]) -> u32 {
    let words: Vec<u16> = data
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], w.get(1).copied().unwrap_or(0)]))
        .collect();
    let mut sum = fletcher::Fletcher32::new();
    sum.update(&words);
    sum.value()
}

/// Fletcher sums are ones'-complement (mod 65535) numbers, which have two spellings of zero:
/// 0x0000 and 0xffff. HDF5 leaves a sum of 65535 as 0xffff (all-0xff data), the crate folds
/// it to 0; both are the same checksum, so each 16-bit half is compared mod 65535.
fn same_fletcher32(a: u32, b: u32) -> bool {
    let halves = |v: u32| [(v & 0xffff) % 0xffff, (v >> 16) % 0xffff];
    halves(a) == halves(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::codecs::tests::testdata;
    use serde_json::json;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// numcodecs' own encodings (make_numcodecs_vectors.py).
    fn transforms(kind: &str) -> Vec<Value> {
        let doc: Value =
            serde_json::from_slice(&std::fs::read(testdata("numcodecs_transforms.json")).unwrap())
                .unwrap();
        doc[kind].as_array().unwrap().clone()
    }

    /// Fletcher-32 is checked and cut off exactly: every length (odd ones, more than 360 words,
    /// all-0xff data) decodes to the data numcodecs checksummed, and any flipped bit in data or
    /// checksum is refused.
    #[test]
    fn fletcher32_strips_numcodecs_checksum() {
        let cases = transforms("fletcher32");
        assert!(cases.len() > 70);
        for case in cases {
            let data = match case.get("decoded") {
                Some(d) => hex(d.as_str().unwrap()),
                None => {
                    let n = case["len"].as_u64().unwrap() as usize;
                    match case["fill"].as_u64() {
                        Some(b) => vec![b as u8; n],
                        None => (0..n).map(|i| ((7 * i + 3) % 256) as u8).collect(),
                    }
                }
            };
            let mut enc = data.clone();
            enc.extend(hex(case["checksum"].as_str().unwrap()));
            let n = data.len() as u64;
            let got = Numcodec::Fletcher32.decode(&enc, SizeBound::Exact(n)).unwrap();
            assert_eq!(got.as_ref(), data.as_slice(), "{case}");
            assert!(Numcodec::Fletcher32.decode(&enc, SizeBound::Exact(n + 1)).is_err());
            for bit in [0, 7, 8 * enc.len() - 1] {
                let mut bad = enc.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                let err = Numcodec::Fletcher32.decode(&bad, SizeBound::Exact(n));
                assert!(err.is_err(), "bit {bit} flipped was accepted: {case}");
            }
        }
        assert!(Numcodec::Fletcher32.decode(&[1, 2, 3], SizeBound::AtMost(10)).is_err());
    }

    /// Every padding, and chunks of 0 to 65 bools, decode to what numcodecs packed.
    #[test]
    fn packbits_matches_numcodecs() {
        let cases = transforms("packbits");
        assert_eq!(cases.len(), 21);
        for case in cases {
            let count = case["count"].as_u64().unwrap();
            let enc = hex(case["encoded"].as_str().unwrap());
            assert_eq!(enc.len() as u64, packbits_encoded_len(count), "{case}");
            let got = packbits_decode(&enc, count).unwrap();
            assert_eq!(got, hex(case["decoded"].as_str().unwrap()), "{case}");
            // A padding byte that does not fit the element count is an error.
            for pad in [enc[0].wrapping_add(1), enc[0].wrapping_add(8), 255] {
                let mut bad = enc.clone();
                bad[0] = pad;
                assert!(packbits_decode(&bad, count).is_err(), "{case} with padding {pad}");
            }
        }
        assert!(packbits_decode(&[], 0).is_err());
        assert_eq!(packbits_decode(&[0], 0).unwrap(), Vec::<u8>::new());
        assert_eq!(packbits_decode(&[5, 0b1010_0000], 3).unwrap(), [1, 0, 1]);
    }

    /// fixedscaleoffset decodes bit for bit as numcodecs (numpy) does, for every numeric
    /// astype, float64/32/16 and integer dtypes, NaN, infinities and subnormals included.
    #[test]
    fn fixedscaleoffset_matches_numcodecs() {
        let cases = transforms("fixedscaleoffset");
        assert_eq!(cases.len(), 40);
        for case in cases {
            let cfg = case["configuration"].as_object().unwrap().clone();
            let dtype = numpy_type(cfg["dtype"].as_str().unwrap()).unwrap();
            let c = Codec { name: "numcodecs.fixedscaleoffset".into(), configuration: cfg };
            let f = FixedScaleOffset::new(&c, &dtype).unwrap_or_else(|e| panic!("{case}: {e}"));
            let enc = hex(case["encoded"].as_str().unwrap());
            let want = hex(case["decoded"].as_str().unwrap());
            let got = f.decode(&enc);
            assert_eq!(got.len(), want.len(), "{case}");
            // NaN payloads: numpy's arithmetic keeps the first operand's NaN, as does the
            // CPU; compare bit for bit all the same.
            assert!(got == want, "{}: got {got:02x?}", case["configuration"]);
        }
    }

    #[test]
    fn fixedscaleoffset_configurations() {
        let f8 = DataType::from_name("float64").unwrap();
        let make = |cfg: Value| {
            let c = Codec {
                name: "numcodecs.fixedscaleoffset".into(),
                configuration: cfg.as_object().unwrap().clone(),
            };
            FixedScaleOffset::new(&c, &f8)
        };
        // dtype defaults to the array's, astype to dtype; numpy names and `|`/`=` orders.
        let f = make(json!({"scale": 2, "offset": 1})).unwrap();
        assert_eq!(f.encoded_type().name, "float64");
        let enc: Vec<u8> = [4.0f64, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let dec: Vec<u8> = [3.0f64, 0.0].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(f.decode(&enc), dec);
        for astype in ["int16", "<i2", "=i2", "i2"] {
            let f = make(json!({"scale": 2, "offset": 1, "dtype": "float64", "astype": astype}));
            assert_eq!(f.unwrap().encoded_type().name, "int16", "{astype}");
        }
        assert_eq!(
            make(json!({"scale": 1, "offset": 0, "astype": "|u1"})).unwrap().encoded_type().name,
            "uint8"
        );
        for bad in [
            json!({"offset": 0}),
            json!({"scale": 1}),
            json!({"scale": "1", "offset": 0}),
            json!({"scale": 1, "offset": 0, "astype": 4}),
        ] {
            assert!(
                matches!(make(bad.clone()), Err(CodecError::InvalidConfiguration { .. })),
                "{bad}"
            );
        }
        for bad in [
            json!({"scale": 1, "offset": 0, "dtype": "<f4"}),
            json!({"scale": 1, "offset": 0, "dtype": ">f8"}),
            json!({"scale": 1, "offset": 0, "astype": ">i4"}),
            json!({"scale": 1, "offset": 0, "astype": "<c16"}),
            json!({"scale": 1, "offset": 0, "astype": "|b1"}),
            json!({"scale": 1, "offset": 0, "astype": "<M8[s]"}),
        ] {
            assert!(matches!(make(bad.clone()), Err(CodecError::Unsupported(_))), "{bad}");
        }
    }
}
