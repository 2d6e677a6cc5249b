//! Fill values: the JSON `fill_value` of a v3 `zarr.json` or a v2 `.zarray`, turned
//! into the bytes of one element (little-endian, as the decoder produces chunks),
//! and one element's bytes turned back into v2 JSON.
//!
//! v3 forms: integers; `true`/`false` (or 0/1) for `bool`; for floats a number,
//! `"NaN"`, `"Infinity"`, `"-Infinity"` or a `"0x…"` string holding the element's
//! bit pattern as an unsigned integer (e.g. float32 `"0x7fc00000"`); for complex
//! types a two-element array of float forms. v2 forms are the same without the hex
//! strings, plus `null` (the fill value is undefined; we use zero bytes). Python's bare
//! `NaN`, `Infinity` and `-Infinity` (see `python_json`) mean what the strings mean, in both.
//!
//! Numbers are converted as numpy converts a Python float: round to nearest even,
//! overflowing to infinity.

use half::f16;
use serde_json::{Number, Value};

use super::DataType;
use crate::python_json;
use crate::zarr::error::DataTypeError;

/// One element of `data_type`, little-endian, from a v3 `fill_value`.
pub fn fill_value_bytes(data_type: &DataType, v: &Value) -> Result<Vec<u8>, DataTypeError> {
    element_bytes(data_type, v, Flavor::V3)
}

/// One element of `data_type`, little-endian, from a v2 `.zarray` `fill_value`.
/// `null` gives zero bytes. The second argument is whether the array is stored
/// big-endian; it does not change the result, which is little-endian like the
/// decoder's chunks (a JSON fill value has no byte order of its own).
pub fn fill_value_bytes_v2(
    data_type: &DataType,
    _big_endian: bool,
    v: &Value,
) -> Result<Vec<u8>, DataTypeError> {
    let kind = Kind::of(data_type)?;
    if v.is_null() {
        return Ok(vec![0; kind.itemsize()]);
    }
    element_bytes(data_type, v, Flavor::V2)
}

/// One element's little-endian bytes as a v2 `fill_value`: integers and finite
/// floats as numbers, non-finite floats as `"NaN"`, `"Infinity"`, `"-Infinity"`,
/// complex as `[re, im]`, bool as a bool. A NaN's payload is not kept.
pub fn element_to_v2_json(data_type: &DataType, bytes: &[u8]) -> Result<Value, DataTypeError> {
    let kind = Kind::of(data_type)?;
    if bytes.len() != kind.itemsize() {
        return Err(invalid(
            data_type,
            format!("{} bytes for a {}-byte element", bytes.len(), kind.itemsize()),
        ));
    }
    Ok(match kind {
        Kind::Bool => Value::Bool(bytes[0] != 0),
        Kind::Int { signed, .. } => {
            let mut wide = [0u8; 8];
            wide[..bytes.len()].copy_from_slice(bytes);
            let negative = signed && bytes[bytes.len() - 1] & 0x80 != 0;
            if negative {
                wide[bytes.len()..].fill(0xff);
                Value::from(i64::from_le_bytes(wide))
            } else {
                Value::from(u64::from_le_bytes(wide))
            }
        }
        Kind::Float(w) => float_json(w.to_f64(le_bits(bytes))),
        Kind::Complex(w) => {
            let (re, im) = bytes.split_at(bytes.len() / 2);
            Value::Array(vec![float_json(w.to_f64(le_bits(re))), float_json(w.to_f64(le_bits(im)))])
        }
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    /// v3: hex bit patterns allowed.
    V3,
    /// v2: no hex bit patterns.
    V2,
}

/// An IEEE binary float width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FloatWidth {
    F16,
    F32,
    F64,
}

impl FloatWidth {
    fn bytes(self) -> usize {
        match self {
            FloatWidth::F16 => 2,
            FloatWidth::F32 => 4,
            FloatWidth::F64 => 8,
        }
    }

    /// The bit pattern of the value nearest to `x` (numpy's conversion). NaN is
    /// the canonical quiet NaN numpy produces (`0x7e00`, `0x7fc00000`, ...).
    fn bits_of(self, x: f64) -> u64 {
        match self {
            FloatWidth::F16 if x.is_nan() => f16::NAN.to_bits().into(),
            FloatWidth::F16 => f64_to_f16_bits(x).into(),
            FloatWidth::F32 if x.is_nan() => f32::NAN.to_bits().into(),
            FloatWidth::F32 => (x as f32).to_bits().into(),
            FloatWidth::F64 if x.is_nan() => f64::NAN.to_bits(),
            FloatWidth::F64 => x.to_bits(),
        }
    }

    /// The value of a bit pattern, as the shortest decimal that reads back to the
    /// same element (so float32 0.1 stays 0.1, not 0.10000000149011612).
    fn to_f64(self, bits: u64) -> f64 {
        // Truncating casts: `bits` came from exactly `self.bytes()` bytes.
        let exact = match self {
            FloatWidth::F16 => f16::from_bits(bits as u16).to_f64(),
            FloatWidth::F32 => f32::from_bits(bits as u32).into(),
            FloatWidth::F64 => f64::from_bits(bits),
        };
        if !exact.is_finite() {
            return exact;
        }
        (0..17)
            .filter_map(|digits| format!("{exact:.digits$e}").parse::<f64>().ok())
            .find(|&y| self.bits_of(y) == bits)
            .unwrap_or(exact)
    }
}

/// The float16 nearest to `x` (ties to even), as numpy converts a float64. Not
/// `half::f16::from_f64`, which may round through float32 and so round twice
/// (1.0004882812500002 must become 0x3c01, not 0x3c00).
fn f64_to_f16_bits(x: f64) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 48) & 0x8000) as u16;
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let frac = bits & ((1 << 52) - 1);
    if exp == 0x7ff {
        return sign | if frac == 0 { 0x7c00 } else { f16::NAN.to_bits() };
    }
    if exp == 0 {
        // Zero or a float64 subnormal, far below half the smallest float16.
        return sign;
    }
    let e = exp - 1023;
    if e > 15 {
        return sign | 0x7c00;
    }
    // value = sig * 2^(e - 52); keep 10 fraction bits (fewer for subnormals, whose
    // unit is 2^-24).
    let sig = frac | (1 << 52);
    let shift = 42 + (-14 - e).max(0) as u32;
    if shift > 53 {
        return sign; // below half the smallest subnormal
    }
    let mut m = sig >> shift;
    let rem = sig & ((1 << shift) - 1);
    let half = 1 << (shift - 1);
    if rem > half || (rem == half && m & 1 == 1) {
        m += 1;
    }
    // Normal: the implicit bit in `m` (1024, or 2048 after a carry) adds one to
    // the biased exponent e + 14. Subnormal: `m` is the whole encoding (a carry to
    // 1024 is the smallest normal).
    let magnitude = if e >= -14 { (((e + 14) as u64) << 10) + m } else { m };
    sign | magnitude.min(0x7c00) as u16
}

/// The element kinds of the core v3 data types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    Int {
        bytes: usize,
        signed: bool,
    },
    Float(FloatWidth),
    /// Two floats of this width.
    Complex(FloatWidth),
}

impl Kind {
    /// The kind of a core type; its itemsize is checked against its name.
    fn of(data_type: &DataType) -> Result<Kind, DataTypeError> {
        let size = data_type.itemsize;
        let width = |bytes| match bytes {
            2 => Some(FloatWidth::F16),
            4 => Some(FloatWidth::F32),
            8 => Some(FloatWidth::F64),
            _ => None,
        };
        let kind = match data_type.numpy_kind() {
            Some('b') => Some(Kind::Bool),
            Some(k @ ('i' | 'u')) => Some(Kind::Int { bytes: size, signed: k == 'i' }),
            Some('f') => width(size).map(Kind::Float),
            Some('c') => width(size / 2).map(Kind::Complex),
            _ => None,
        };
        kind.ok_or_else(|| {
            DataTypeError::Unsupported(format!(
                "{} with itemsize {}",
                data_type.name, data_type.itemsize
            ))
        })
    }

    fn itemsize(self) -> usize {
        match self {
            Kind::Bool => 1,
            Kind::Int { bytes, .. } => bytes,
            Kind::Float(w) => w.bytes(),
            Kind::Complex(w) => 2 * w.bytes(),
        }
    }
}

fn invalid(data_type: &DataType, reason: impl Into<String>) -> DataTypeError {
    DataTypeError::InvalidFillValue { data_type: data_type.name.clone(), reason: reason.into() }
}

/// A JSON value for an error message, cut short if an untrusted document made it
/// long.
pub(crate) fn shown(v: &Value) -> String {
    let s = python_json::to_string(v);
    match s.char_indices().nth(64) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s,
    }
}

fn element_bytes(
    data_type: &DataType,
    v: &Value,
    flavor: Flavor,
) -> Result<Vec<u8>, DataTypeError> {
    let kind = Kind::of(data_type)?;
    let bad = |what: &str| invalid(data_type, format!("{} is not {what}", shown(v)));
    match kind {
        Kind::Bool => match v {
            Value::Bool(b) => Ok(vec![u8::from(*b)]),
            Value::Number(n) if n.as_u64() == Some(0) => Ok(vec![0]),
            Value::Number(n) if n.as_u64() == Some(1) => Ok(vec![1]),
            _ => Err(bad("true, false, 0 or 1")),
        },
        Kind::Int { bytes, signed } => {
            let x = integer(v).ok_or_else(|| bad("an integer"))?;
            let bits = 8 * bytes as u32;
            let (min, max) = if signed {
                (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
            } else {
                (0, (1i128 << bits) - 1)
            };
            if !(min..=max).contains(&x) {
                return Err(bad("in range for the type"));
            }
            // In range, the low bytes of the two's complement are the element.
            Ok(x.to_le_bytes()[..bytes].to_vec())
        }
        Kind::Float(w) => {
            let bits = float_bits(w, v, flavor).ok_or_else(|| bad("a float fill value"))?;
            Ok(bits.to_le_bytes()[..w.bytes()].to_vec())
        }
        Kind::Complex(w) => {
            let parts = match v {
                Value::Array(parts) if parts.len() == 2 => parts,
                _ => return Err(bad("a two-element array [real, imaginary]")),
            };
            let mut out = Vec::with_capacity(kind.itemsize());
            for part in parts {
                let bits = float_bits(w, part, flavor)
                    .ok_or_else(|| bad("a pair of float fill values"))?;
                out.extend_from_slice(&bits.to_le_bytes()[..w.bytes()]);
            }
            Ok(out)
        }
    }
}

/// A JSON integer, or a float with an integral value that a double holds exactly
/// (some writers put `0.0` in an integer array's metadata).
fn integer(v: &Value) -> Option<i128> {
    let Value::Number(n) = v else { return None };
    if let Some(i) = n.as_i64() {
        return Some(i.into());
    }
    if let Some(u) = n.as_u64() {
        return Some(u.into());
    }
    let f = n.as_f64()?;
    const EXACT: f64 = (1u64 << 53) as f64;
    (f.fract() == 0.0 && f.abs() <= EXACT).then_some(f as i128)
}

/// The bit pattern (in the low `w.bytes()` bytes) of one float fill form.
fn float_bits(w: FloatWidth, v: &Value, flavor: Flavor) -> Option<u64> {
    if let Some(x) = python_json::non_finite(v) {
        return Some(w.bits_of(x)); // a bare NaN, as Python's json writes it: as "NaN"
    }
    match v {
        Value::Number(n) => Some(w.bits_of(n.as_f64()?)),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(w.bits_of(f64::NAN)),
            "Infinity" => Some(w.bits_of(f64::INFINITY)),
            "-Infinity" => Some(w.bits_of(f64::NEG_INFINITY)),
            _ if flavor == Flavor::V3 => hex_bits(s, w.bytes()),
            _ => None,
        },
        _ => None,
    }
}

/// `"0x…"`: hex digits of an unsigned integer that fits in `bytes` bytes.
fn hex_bits(s: &str, bytes: usize) -> Option<u64> {
    let digits = s.strip_prefix("0x")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let bits = u64::from_str_radix(digits, 16).ok()?;
    let fits = bytes >= 8 || bits < 1u64 << (8 * bytes);
    fits.then_some(bits)
}

fn le_bits(bytes: &[u8]) -> u64 {
    let mut wide = [0u8; 8];
    let n = bytes.len().min(8);
    wide[..n].copy_from_slice(&bytes[..n]);
    u64::from_le_bytes(wide)
}

fn float_json(x: f64) -> Value {
    if x.is_nan() {
        Value::from("NaN")
    } else if x == f64::INFINITY {
        Value::from("Infinity")
    } else if x == f64::NEG_INFINITY {
        Value::from("-Infinity")
    } else {
        // Finite, so `from_f64` succeeds; the fallback is unreachable.
        Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dt(name: &str) -> DataType {
        DataType::from_name(name).unwrap()
    }

    fn v3(name: &str, v: Value) -> Vec<u8> {
        fill_value_bytes(&dt(name), &v).unwrap_or_else(|e| panic!("{name} {v}: {e}"))
    }

    /// Expected bytes were produced with numpy 2.4 (float16 conversion was also
    /// checked against numpy on 80,000 random values and rounding midpoints), e.g.
    /// `.venv/bin/python -c "import numpy as np; print(list(np.float16(0.1).tobytes()))"`
    /// (for NaN/Infinity forms: `np.float32('nan')`, for overflow:
    /// `np.array(1e300).astype(np.float32)`, for complex: `np.complex64(complex(1.5, nan))`).
    #[test]
    fn v3_against_numpy_bytes() {
        let cases: &[(&str, Value, &[u8])] = &[
            ("bool", json!(true), &[1]),
            ("bool", json!(false), &[0]),
            ("bool", json!(1), &[1]),
            ("int8", json!(-128), &[128]),
            ("uint8", json!(255), &[255]),
            ("int16", json!(-2), &[254, 255]),
            ("uint16", json!(258), &[2, 1]),
            ("int32", json!(-1), &[255, 255, 255, 255]),
            ("int64", json!(i64::MIN), &[0, 0, 0, 0, 0, 0, 0, 128]),
            ("uint64", json!(u64::MAX), &[255, 255, 255, 255, 255, 255, 255, 255]),
            ("int32", json!(7.0), &[7, 0, 0, 0]),
            ("float16", json!(0.1), &[102, 46]),
            ("float16", json!(65520.0), &[0, 124]), // rounds up to infinity
            ("float16", json!(1.0 / 3.0), &[85, 53]),
            ("float16", json!("NaN"), &[0, 126]),
            ("float16", json!("-Infinity"), &[0, 252]),
            // Exactly halfway between 1.0 and the next float16: ties to even.
            ("float16", json!(1.00048828125), &[0, 60]),
            // Just above halfway: rounds up (a detour through float32 would not).
            ("float16", json!(1.0004882812500002), &[1, 60]),
            ("float16", json!("0x3c00"), &[0, 60]),
            ("float16", json!(65504.0), &[255, 123]),
            ("float16", json!(65519.99), &[255, 123]),
            // Subnormals: half the smallest ties to 0, 1.5 times it ties to 2.
            ("float16", json!(2.9802322387695312e-08), &[0, 0]),
            ("float16", json!(8.940696716308594e-08), &[2, 0]),
            ("float16", json!(6.1035156249999e-05), &[0, 4]), // rounds up to the smallest normal
            ("float16", json!(1e-5), &[168, 0]),
            ("float16", json!(-1e-30), &[0, 128]),
            ("float32", json!(0.1), &[205, 204, 204, 61]),
            ("float32", json!("NaN"), &[0, 0, 192, 127]),
            ("float32", json!(-0.0), &[0, 0, 0, 128]),
            ("float32", json!(1e300), &[0, 0, 128, 127]), // overflow -> inf
            ("float32", json!("0x7fc00000"), &[0, 0, 192, 127]),
            ("float32", json!("0x7fc00001"), &[1, 0, 192, 127]), // payload kept
            ("float32", json!(3), &[0, 0, 64, 64]),
            ("float64", json!(0.1), &[154, 153, 153, 153, 153, 153, 185, 63]),
            ("float64", json!("NaN"), &[0, 0, 0, 0, 0, 0, 248, 127]),
            ("float64", json!("Infinity"), &[0, 0, 0, 0, 0, 0, 240, 127]),
            ("float64", json!("0x7FF8000000000000"), &[0, 0, 0, 0, 0, 0, 248, 127]),
            ("complex64", json!([1.5, "NaN"]), &[0, 0, 192, 63, 0, 0, 192, 127]),
            (
                "complex128",
                json!(["-Infinity", 0.25]),
                &[0, 0, 0, 0, 0, 0, 240, 255, 0, 0, 0, 0, 0, 0, 208, 63],
            ),
            ("complex64", json!(["0x3f800000", 0]), &[0, 0, 128, 63, 0, 0, 0, 0]),
        ];
        for (name, v, want) in cases {
            assert_eq!(v3(name, v.clone()), *want, "{name} {v}");
        }
    }

    #[test]
    fn v3_rejects() {
        let cases: &[(&str, Value)] = &[
            ("bool", json!(2)),
            ("bool", json!("true")),
            ("bool", json!(null)),
            ("int8", json!(128)),
            ("int8", json!(-129)),
            ("uint8", json!(-1)),
            ("uint16", json!(65536)),
            ("int64", json!(u64::MAX)),
            ("int32", json!(1.5)),
            ("int32", json!(1e300)),
            ("int32", json!("0x01")),
            ("int32", json!(true)),
            ("int32", json!(null)),
            ("float32", json!("nan")),
            ("float32", json!("inf")),
            ("float32", json!("0x")),
            ("float32", json!("0x1ffffffff")),
            ("float32", json!("0x+1")),
            ("float32", json!("0xg")),
            ("float32", json!("0X7fc00000")),
            ("float16", json!("0x10000")),
            ("float64", json!("0x1ffffffffffffffff")),
            ("float64", json!(null)),
            ("float64", json!([1.0])),
            ("float64", json!(true)),
            ("complex64", json!(1.0)),
            ("complex64", json!([1.0])),
            ("complex64", json!([1.0, 2.0, 3.0])),
            ("complex64", json!([1.0, "x"])),
            ("complex128", json!({"re": 1})),
        ];
        for (name, v) in cases {
            assert!(
                matches!(
                    fill_value_bytes(&dt(name), v),
                    Err(DataTypeError::InvalidFillValue { .. })
                ),
                "{name} {v}"
            );
        }
        // Unknown and inconsistent data types.
        let odd = DataType { itemsize: 3, name: "int32".into() };
        assert!(matches!(fill_value_bytes(&odd, &json!(0)), Err(DataTypeError::Unsupported(_))));
        let string = DataType { itemsize: 8, name: "string".into() };
        assert!(matches!(
            fill_value_bytes_v2(&string, false, &json!(null)),
            Err(DataTypeError::Unsupported(_))
        ));
        // Long values are cut short in the message.
        let long = json!("x".repeat(10_000));
        let msg = fill_value_bytes(&dt("float32"), &long).unwrap_err().to_string();
        assert!(msg.len() < 300, "{msg}");
    }

    #[test]
    fn v2_forms() {
        let v2 = |name: &str, big: bool, v: Value| fill_value_bytes_v2(&dt(name), big, &v);
        assert_eq!(v2("int32", false, json!(null)).unwrap(), [0; 4]);
        assert_eq!(v2("complex128", true, json!(null)).unwrap(), [0; 16]);
        // Little-endian whatever the stored order.
        assert_eq!(v2("int16", true, json!(-2)).unwrap(), [254, 255]);
        assert_eq!(v2("float32", true, json!("NaN")).unwrap(), [0, 0, 192, 127]);
        assert_eq!(v2("float64", false, json!("-Infinity")).unwrap(), [0, 0, 0, 0, 0, 0, 240, 255]);
        assert_eq!(v2("bool", false, json!(true)).unwrap(), [1]);
        // zarr-python 2 writes complex as [re, im] with the float forms.
        assert_eq!(
            v2("complex64", false, json!(["NaN", "-Infinity"])).unwrap(),
            [0, 0, 192, 127, 0, 0, 128, 255]
        );
        assert_eq!(
            v2("complex128", false, json!([1.0, 2.0])).unwrap(),
            [0, 0, 0, 0, 0, 0, 240, 63, 0, 0, 0, 0, 0, 0, 0, 64]
        );
        // No hex bit patterns in v2.
        assert!(v2("float32", false, json!("0x7fc00000")).is_err());
        assert!(v2("int8", false, json!(300)).is_err());
    }

    /// A bare `NaN`, `Infinity` or `-Infinity` (Python's json) is the fill value its string
    /// form names, in v3 and in v2, also as a complex part.
    #[test]
    fn bare_tokens_are_the_string_forms() {
        let bare = python_json::parse(b"[NaN, Infinity, -Infinity, [NaN, -Infinity]]").unwrap();
        let strings = json!(["NaN", "Infinity", "-Infinity", ["NaN", "-Infinity"]]);
        for (i, name) in [(0, "float16"), (1, "float32"), (2, "float64"), (3, "complex64")] {
            let (b, s) = (&bare[i], &strings[i]);
            assert_eq!(v3(name, b.clone()), v3(name, s.clone()), "{name}");
            let v2 = |v| fill_value_bytes_v2(&dt(name), false, v).unwrap();
            assert_eq!(v2(b), v2(s), "{name}");
        }
        let msg = fill_value_bytes(&dt("int8"), &bare[0]).unwrap_err().to_string();
        assert!(msg.ends_with("NaN is not an integer"), "{msg}");
    }

    #[test]
    fn element_json() {
        let back = |name: &str, v: Value| {
            let d = dt(name);
            element_to_v2_json(&d, &fill_value_bytes(&d, &v).unwrap()).unwrap()
        };
        assert_eq!(back("int8", json!(-5)), json!(-5));
        assert_eq!(back("int64", json!(i64::MIN)), json!(i64::MIN));
        assert_eq!(back("uint64", json!(u64::MAX)), json!(u64::MAX));
        assert_eq!(back("uint32", json!(4_000_000_000u32)), json!(4_000_000_000u32));
        assert_eq!(back("bool", json!(1)), json!(true));
        assert_eq!(back("float32", json!(0.1)), json!(0.1));
        assert_eq!(back("float16", json!(0.1)), json!(0.1));
        assert_eq!(back("float16", json!(0.0999755859375)), json!(0.1));
        assert_eq!(back("float64", json!(0.1)), json!(0.1));
        assert_eq!(back("float32", json!(-0.0)), json!(-0.0));
        assert_eq!(back("float64", json!(1e-310)), json!(1e-310));
        assert_eq!(back("float64", json!(-2.5)), json!(-2.5));
        assert_eq!(back("float32", json!("0x7fc00001")), json!("NaN"));
        assert_eq!(back("float32", json!("0x3f800000")), json!(1.0));
        assert_eq!(back("float16", json!("0xfc00")), json!("-Infinity"));
        assert_eq!(back("float64", json!("Infinity")), json!("Infinity"));
        assert_eq!(back("complex64", json!(["NaN", 2.5])), json!(["NaN", 2.5]));
        assert!(element_to_v2_json(&dt("int32"), &[0, 0]).is_err());
    }
}
