//! numcodecs' bytes->bytes codecs, as zarr-python 3 names them in v3 metadata
//! (`numcodecs.<id>`, configuration = numcodecs' own): `bz2`, `lz4`, `lzma`, the checksums
//! `adler32`, `crc32` and `crc32c` (checked and removed), and `shuffle`. Byte formats are
//! numcodecs': lz4 is a 4-byte little-endian decoded size, then one LZ4 block; lzma is an
//! `.xz` stream (`format` 1, the default) or an `.lzma` one (`format` 2); the checksums are
//! little-endian u32 at `location` `start` (adler32, crc32) or `end` (crc32c) by default.

use std::io::{self, Write};

use serde_json::{Map, Value};

use super::{read_bounded, CodecError, SizeBound};

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
