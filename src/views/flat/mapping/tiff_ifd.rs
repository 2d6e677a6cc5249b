//! TIFF image file directories as bytes: little-endian, classic (32-bit offsets) or BigTIFF
//! (64-bit offsets). An IFD is written with the values that do not fit in an entry right after
//! it, so its size follows from its entries' counts alone and a layout can place every IFD
//! before it knows the offsets the entries hold.

/// TIFF tags this crate writes, by number.
pub mod tag {
    pub const NEW_SUBFILE_TYPE: u16 = 254;
    pub const IMAGE_WIDTH: u16 = 256;
    pub const IMAGE_LENGTH: u16 = 257;
    pub const BITS_PER_SAMPLE: u16 = 258;
    pub const COMPRESSION: u16 = 259;
    pub const PHOTOMETRIC: u16 = 262;
    pub const IMAGE_DESCRIPTION: u16 = 270;
    pub const STRIP_OFFSETS: u16 = 273;
    pub const SAMPLES_PER_PIXEL: u16 = 277;
    pub const ROWS_PER_STRIP: u16 = 278;
    pub const STRIP_BYTE_COUNTS: u16 = 279;
    pub const PLANAR_CONFIG: u16 = 284;
    pub const TILE_WIDTH: u16 = 322;
    pub const TILE_LENGTH: u16 = 323;
    pub const TILE_OFFSETS: u16 = 324;
    pub const TILE_BYTE_COUNTS: u16 = 325;
    pub const SUB_IFDS: u16 = 330;
    pub const SAMPLE_FORMAT: u16 = 339;
}

/// Classic TIFF or BigTIFF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Classic,
    Big,
}

impl Flavor {
    /// Bytes of the file header.
    pub fn header_len(self) -> u64 {
        match self {
            Flavor::Classic => 8,
            Flavor::Big => 16,
        }
    }

    /// The file header pointing at the first IFD.
    pub fn header(self, first_ifd: u64) -> Vec<u8> {
        let mut out = b"II".to_vec();
        match self {
            Flavor::Classic => {
                out.extend(42u16.to_le_bytes());
                out.extend(narrow(first_ifd).to_le_bytes());
            }
            Flavor::Big => {
                out.extend(43u16.to_le_bytes());
                out.extend(8u16.to_le_bytes());
                out.extend(0u16.to_le_bytes());
                out.extend(first_ifd.to_le_bytes());
            }
        }
        out
    }

    /// Bytes an offset takes (in the header, an entry, a next-IFD pointer).
    fn word(self) -> u64 {
        match self {
            Flavor::Classic => 4,
            Flavor::Big => 8,
        }
    }

    fn entry_len(self) -> u64 {
        match self {
            Flavor::Classic => 12,
            Flavor::Big => 20,
        }
    }

    /// Bytes of the entry count at the start of an IFD.
    fn count_len(self) -> u64 {
        match self {
            Flavor::Classic => 2,
            Flavor::Big => 8,
        }
    }
}

/// The value of one entry. Offsets and IFD pointers are written as LONG / IFD in classic
/// TIFF and as LONG8 / IFD8 in BigTIFF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Short(Vec<u16>),
    Long(Vec<u32>),
    /// NUL-terminated by the writer.
    Ascii(String),
    Offsets(Vec<u64>),
    Ifds(Vec<u64>),
}

impl Value {
    fn count(&self) -> u64 {
        match self {
            Value::Short(v) => v.len() as u64,
            Value::Long(v) => v.len() as u64,
            Value::Ascii(s) => s.len() as u64 + 1,
            Value::Offsets(v) | Value::Ifds(v) => v.len() as u64,
        }
    }

    /// The TIFF field type and the bytes of one item.
    fn field_type(&self, flavor: Flavor) -> (u16, u64) {
        match (self, flavor) {
            (Value::Short(_), _) => (3, 2),
            (Value::Long(_), _) => (4, 4),
            (Value::Ascii(_), _) => (2, 1),
            (Value::Offsets(_), Flavor::Classic) => (4, 4),
            (Value::Offsets(_), Flavor::Big) => (16, 8),
            (Value::Ifds(_), Flavor::Classic) => (13, 4),
            (Value::Ifds(_), Flavor::Big) => (18, 8),
        }
    }

    fn byte_len(&self, flavor: Flavor) -> u64 {
        self.count() * self.field_type(flavor).1
    }

    fn bytes(&self, flavor: Flavor) -> Vec<u8> {
        let wide = |v: &[u64]| -> Vec<u8> {
            match flavor {
                Flavor::Classic => v.iter().flat_map(|&x| narrow(x).to_le_bytes()).collect(),
                Flavor::Big => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            }
        };
        match self {
            Value::Short(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Value::Long(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Value::Ascii(s) => s.bytes().chain([0]).collect(),
            Value::Offsets(v) | Value::Ifds(v) => wide(v),
        }
    }
}

/// A classic TIFF offset. Layouts choose BigTIFF whenever an offset would not fit, so a value
/// above `u32::MAX` here is a layout bug; it is clamped rather than wrapped.
fn narrow(x: u64) -> u32 {
    debug_assert!(x <= u64::from(u32::MAX), "classic TIFF offset {x} does not fit");
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// Out-of-line values start on 8-byte boundaries (TIFF asks for word alignment).
fn padded(len: u64) -> u64 {
    len.div_ceil(8) * 8
}

/// Bytes of an IFD with these entries, its out-of-line values included.
pub fn ifd_len(flavor: Flavor, entries: &[(u16, Value)]) -> u64 {
    let own = flavor.count_len() + entries.len() as u64 * flavor.entry_len() + flavor.word();
    let outside: u64 = entries
        .iter()
        .map(|(_, v)| v.byte_len(flavor))
        .filter(|&n| n > flavor.word())
        .map(padded)
        .sum();
    padded(own) + outside
}

/// The bytes of an IFD placed at `at`, its entries sorted by tag (as TIFF requires), followed
/// by the values that do not fit in an entry; `next` is the offset of the next IFD (0: none).
/// Exactly [`ifd_len`] bytes long.
pub fn ifd_bytes(flavor: Flavor, at: u64, entries: &[(u16, Value)], next: u64) -> Vec<u8> {
    let mut sorted: Vec<&(u16, Value)> = entries.iter().collect();
    sorted.sort_by_key(|(t, _)| *t);
    let word = flavor.word() as usize;
    let own = flavor.count_len() + entries.len() as u64 * flavor.entry_len() + flavor.word();
    let mut out = Vec::with_capacity(ifd_len(flavor, entries) as usize);
    let mut outside = Vec::new();
    let mut outside_at = at + padded(own);
    match flavor {
        Flavor::Classic => out.extend((entries.len() as u16).to_le_bytes()),
        Flavor::Big => out.extend((entries.len() as u64).to_le_bytes()),
    }
    for (t, v) in sorted {
        let (field_type, _) = v.field_type(flavor);
        out.extend(t.to_le_bytes());
        out.extend(field_type.to_le_bytes());
        match flavor {
            Flavor::Classic => out.extend(narrow(v.count()).to_le_bytes()),
            Flavor::Big => out.extend(v.count().to_le_bytes()),
        }
        let mut bytes = v.bytes(flavor);
        if bytes.len() <= word {
            bytes.resize(word, 0);
            out.extend(bytes);
        } else {
            out.extend(&Value::Offsets(vec![outside_at]).bytes(flavor));
            outside_at += padded(bytes.len() as u64);
            bytes.resize(padded(bytes.len() as u64) as usize, 0);
            outside.extend(bytes);
        }
    }
    out.extend(&Value::Offsets(vec![next]).bytes(flavor));
    out.resize(padded(own) as usize, 0);
    out.extend(outside);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        assert_eq!(Flavor::Classic.header(8), b"II\x2a\x00\x08\x00\x00\x00");
        assert_eq!(
            Flavor::Big.header(16),
            b"II\x2b\x00\x08\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00"
        );
    }

    #[test]
    fn classic_ifd_sorts_entries_and_puts_long_values_after_it() {
        let entries = vec![
            (tag::IMAGE_LENGTH, Value::Long(vec![5])),
            (tag::IMAGE_WIDTH, Value::Short(vec![7])),
            (tag::STRIP_OFFSETS, Value::Offsets(vec![100, 200])),
        ];
        let bytes = ifd_bytes(Flavor::Classic, 8, &entries, 0);
        assert_eq!(bytes.len() as u64, ifd_len(Flavor::Classic, &entries));
        // 2 + 3 * 12 + 4 = 42, padded to 48: the offsets follow at 8 + 48.
        assert_eq!(bytes.len(), 48 + 8);
        let expected_entries: Vec<u8> = [
            &3u16.to_le_bytes()[..],
            &[0x00, 0x01, 3, 0, 1, 0, 0, 0, 7, 0, 0, 0],
            &[0x01, 0x01, 4, 0, 1, 0, 0, 0, 5, 0, 0, 0],
            &[0x11, 0x01, 4, 0, 2, 0, 0, 0, 56, 0, 0, 0],
            &[0, 0, 0, 0],
        ]
        .concat();
        assert_eq!(&bytes[..42], &expected_entries[..]);
        assert_eq!(&bytes[48..], &[100, 0, 0, 0, 200, 0, 0, 0]);
    }

    #[test]
    fn big_ifd_holds_two_longs_inline_and_ascii_outside() {
        let entries = vec![
            (tag::TILE_OFFSETS, Value::Offsets(vec![1 << 33])),
            (tag::IMAGE_DESCRIPTION, Value::Ascii("ImageJ=1.11a".into())),
            (tag::SUB_IFDS, Value::Ifds(vec![64])),
        ];
        let bytes = ifd_bytes(Flavor::Big, 16, &entries, 4096);
        // 8 + 3 * 20 + 8 = 76, padded to 80; the 13 description bytes padded to 16.
        assert_eq!(bytes.len(), 96);
        assert_eq!(bytes.len() as u64, ifd_len(Flavor::Big, &entries));
        assert_eq!(&bytes[..8], &3u64.to_le_bytes());
        let description = &bytes[8..28];
        assert_eq!(&description[..4], &[0x0e, 0x01, 2, 0]);
        assert_eq!(&description[4..12], &13u64.to_le_bytes());
        assert_eq!(&description[12..], &(16u64 + 80).to_le_bytes());
        let offsets = &bytes[28..48];
        assert_eq!(&offsets[..4], &[0x44, 0x01, 16, 0]);
        assert_eq!(&offsets[12..], &(1u64 << 33).to_le_bytes());
        let sub_ifds = &bytes[48..68];
        assert_eq!(&sub_ifds[..4], &[0x4a, 0x01, 18, 0]);
        assert_eq!(&bytes[68..76], &4096u64.to_le_bytes());
        assert_eq!(&bytes[80..93], b"ImageJ=1.11a\0");
    }
}
