//! numcodecs' bytes->bytes codecs, as zarr-python 3 names them in v3 metadata
//! (`numcodecs.<id>`, configuration = numcodecs' own): `bz2`, `lz4`, `lzma`, the checksums
//! `adler32`, `crc32` and `crc32c` (checked and removed), and `shuffle`. Byte formats are
//! numcodecs': lz4 is a 4-byte little-endian decoded size, then one LZ4 block; lzma is an
//! `.xz` stream (`format` 1, the default) or an `.lzma` one (`format` 2); the checksums are
//! little-endian u32 at `location` `start` (adler32, crc32) or `end` (crc32c) by default.

use std::io::{self, Write};

use serde_json::{Map, Value};

use super::{read_bounded, CodecError, DataType, SizeBound};
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
