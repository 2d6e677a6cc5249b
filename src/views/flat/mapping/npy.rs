//! `NAME.npy`: the NumPy format (numpy's `lib.format`): the magic `\x93NUMPY`, a version, the
//! header length, a Python dict literal (`descr`, `fortran_order`, `shape`) padded with
//! spaces and a newline so the data starts at a multiple of 64 bytes, then the whole array in
//! C order. The header is written as `numpy.save` writes it, byte for byte (including the
//! spare spaces numpy leaves for the first axis to grow); version 1.0 unless the header needs
//! 2.0 (over 65535 bytes) or 3.0 (not latin-1).

use super::{ArrayFormat, ByteOrder, ElementBox, FlatArray, Layout, LayoutBuilder};

const MAGIC: &[u8] = b"\x93NUMPY";
/// The data starts at a multiple of this (numpy's `ARRAY_ALIGN`).
const ALIGN: usize = 64;
/// numpy pads the header so the first axis can grow to this many digits in place.
const GROWTH_AXIS_MAX_DIGITS: usize = 21;

pub struct Npy;

impl ArrayFormat for Npy {
    fn suffix(&self) -> &'static str {
        ".npy"
    }

    fn layout(&self, array: &FlatArray) -> Result<Option<Layout>, String> {
        let mut b = LayoutBuilder::new(ByteOrder::Little);
        b.bytes(header(&array.descr, &array.shape));
        let region = array.shape.iter().map(|&n| 0..n).collect();
        b.elements(ElementBox { source: 0, region, item: array.item, swap: array.swap });
        Ok(Some(b.build()))
    }
}

/// A shape as Python writes a tuple: `()`, `(5,)`, `(2, 3)`.
fn tuple(shape: &[u64]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => {
            let items: Vec<String> = shape.iter().map(u64::to_string).collect();
            format!("({})", items.join(", "))
        }
    }
}

/// The bytes before the data: magic, version, header length and the padded header.
pub fn header(descr: &str, shape: &[u64]) -> Vec<u8> {
    let mut dict =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {}, }}", tuple(shape));
    if let Some(first) = shape.first() {
        dict.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(first.to_string().len())));
    }
    let latin1 = dict.chars().all(|c| (c as u32) < 256);
    // Version 1.0 has a 2-byte length, 2.0 and 3.0 a 4-byte one; 3.0 is UTF-8.
    let hlen = dict.chars().count() + 1;
    let v1_fits = hlen + ALIGN - (MAGIC.len() + 4 + hlen) % ALIGN <= u16::MAX as usize;
    let (major, len_bytes) = match (latin1, v1_fits) {
        (false, _) => (3u8, 4),
        (true, true) => (1, 2),
        (true, false) => (2, 4),
    };
    let encoded: Vec<u8> = if major == 3 {
        dict.clone().into_bytes()
    } else {
        dict.chars().map(|c| c as u8).collect()
    };
    let hlen = encoded.len() + 1;
    let pad = ALIGN - (MAGIC.len() + 2 + len_bytes + hlen) % ALIGN;
    let mut out = Vec::with_capacity(MAGIC.len() + 2 + len_bytes + hlen + pad);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[major, 0]);
    let total = (hlen + pad) as u32;
    if len_bytes == 2 {
        out.extend_from_slice(&(total as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&total.to_le_bytes());
    }
    out.extend_from_slice(&encoded);
    out.extend(std::iter::repeat_n(b' ', pad));
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// The headers numpy writes (testdata/npy_headers.json, scripts/gen_npy_headers.py).
    #[test]
    fn headers_are_numpys_byte_for_byte() {
        let text = include_str!("testdata/npy_headers.json");
        let doc: Value = serde_json::from_str(text).unwrap();
        let vectors = doc["vectors"].as_array().unwrap();
        assert!(vectors.len() > 50);
        for v in vectors {
            let descr = v["descr"].as_str().unwrap();
            let shape: Vec<u64> =
                v["shape"].as_array().unwrap().iter().map(|n| n.as_u64().unwrap()).collect();
            let got = header(descr, &shape);
            assert_eq!(got, unhex(v["header"].as_str().unwrap()), "{descr} {shape:?}");
            assert_eq!(got.len() % ALIGN, 0);
        }
    }

    /// A header too long for version 1.0's 2-byte length is version 2.0 (4 bytes); one that
    /// is not latin-1 is 3.0 (UTF-8).
    #[test]
    fn long_or_unicode_headers_take_later_versions() {
        let long = "x".repeat(70_000);
        let h = header(&long, &[1]);
        assert_eq!(&h[6..8], [2, 0]);
        let len = u32::from_le_bytes(h[8..12].try_into().unwrap()) as usize;
        assert_eq!(12 + len, h.len());
        assert_eq!(h.len() % ALIGN, 0);
        let h = header("<U1\u{263a}", &[1]);
        assert_eq!(&h[6..8], [3, 0]);
        assert!(String::from_utf8(h[12..].to_vec()).unwrap().contains('\u{263a}'));
        assert_eq!(h.len() % ALIGN, 0);
    }

    #[test]
    fn layout_is_header_then_the_whole_array() {
        let (array, _) =
            crate::views::flat::mapping::array::tests::u16_array(&[20000, 20000], &[512, 512]);
        let layout = Npy.layout(&array).unwrap().unwrap();
        let h = header("<u2", &[20000, 20000]).len() as u64;
        assert_eq!(layout.size, h + 20000 * 20000 * 2);
        assert_eq!(layout.parts().len(), 2);
        let covered: Vec<_> = layout.covering(h - 2..h + 4).map(|c| c.within).collect();
        assert_eq!(covered, [h - 2..h, 0..4]);
    }
}
