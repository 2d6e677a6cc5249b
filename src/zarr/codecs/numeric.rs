//! The numeric element types of the value-converting codecs (`scale_offset`, `cast_value`):
//! one little-endian element read as its exact value, and written back. Integers widen to
//! `i128` and floats to `f64`, which hold every value of every type exactly. Conversions
//! between float widths use the same primitives as zarr-python's `cast-value-rs` backend
//! (Rust's `as` and the `half` crate), so NaN payloads come out alike.

use half::f16;

use crate::zarr::data_type::DataType;

/// A numeric core data type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Numeric {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    F32,
    F64,
}

/// The exact value of one element.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Scalar {
    Int(i128),
    Float(f64),
}

impl Numeric {
    /// The numeric type `t` is, or `None` (bool, complex).
    pub(super) fn of(t: &DataType) -> Option<Numeric> {
        Some(match (t.numpy_kind()?, t.itemsize) {
            ('i', 1) => Numeric::I8,
            ('i', 2) => Numeric::I16,
            ('i', 4) => Numeric::I32,
            ('i', 8) => Numeric::I64,
            ('u', 1) => Numeric::U8,
            ('u', 2) => Numeric::U16,
            ('u', 4) => Numeric::U32,
            ('u', 8) => Numeric::U64,
            ('f', 2) => Numeric::F16,
            ('f', 4) => Numeric::F32,
            ('f', 8) => Numeric::F64,
            _ => return None,
        })
    }

    pub(super) fn size(self) -> usize {
        match self {
            Numeric::I8 | Numeric::U8 => 1,
            Numeric::I16 | Numeric::U16 | Numeric::F16 => 2,
            Numeric::I32 | Numeric::U32 | Numeric::F32 => 4,
            Numeric::I64 | Numeric::U64 | Numeric::F64 => 8,
        }
    }

    pub(super) fn is_float(self) -> bool {
        matches!(self, Numeric::F16 | Numeric::F32 | Numeric::F64)
    }

    /// The inclusive range of an integer type; `None` for floats.
    pub(super) fn int_range(self) -> Option<(i128, i128)> {
        let bits = 8 * self.size() as u32;
        match self {
            Numeric::I8 | Numeric::I16 | Numeric::I32 | Numeric::I64 => {
                Some((-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1))
            }
            Numeric::U8 | Numeric::U16 | Numeric::U32 | Numeric::U64 => {
                Some((0, (1i128 << bits) - 1))
            }
            _ => None,
        }
    }

    /// Significand bits of a float type, the implicit one included; `None` for integers.
    pub(super) fn precision(self) -> Option<u32> {
        match self {
            Numeric::F16 => Some(11),
            Numeric::F32 => Some(24),
            Numeric::F64 => Some(53),
            _ => None,
        }
    }

    /// The largest finite value of a float type.
    pub(super) fn float_max(self) -> f64 {
        match self {
            Numeric::F16 => f16::MAX.to_f64(),
            Numeric::F32 => f32::MAX.into(),
            _ => f64::MAX,
        }
    }

    /// The smallest positive normal value of a float type.
    pub(super) fn float_min_normal(self) -> f64 {
        match self {
            Numeric::F16 => f16::MIN_POSITIVE.to_f64(),
            Numeric::F32 => f32::MIN_POSITIVE.into(),
            _ => f64::MIN_POSITIVE,
        }
    }

    /// One little-endian element (exactly `size()` bytes).
    pub(super) fn read(self, b: &[u8]) -> Scalar {
        macro_rules! le {
            ($t:ty) => {
                <$t>::from_le_bytes(b.try_into().expect("element size"))
            };
        }
        match self {
            Numeric::I8 => Scalar::Int(le!(i8).into()),
            Numeric::I16 => Scalar::Int(le!(i16).into()),
            Numeric::I32 => Scalar::Int(le!(i32).into()),
            Numeric::I64 => Scalar::Int(le!(i64).into()),
            Numeric::U8 => Scalar::Int(le!(u8).into()),
            Numeric::U16 => Scalar::Int(le!(u16).into()),
            Numeric::U32 => Scalar::Int(le!(u32).into()),
            Numeric::U64 => Scalar::Int(le!(u64).into()),
            Numeric::F16 => Scalar::Float(le!(f16).to_f64()),
            Numeric::F32 => Scalar::Float(le!(f32).into()),
            Numeric::F64 => Scalar::Float(le!(f64)),
        }
    }

    /// Append `v`, which this type holds exactly (an integer in range, a float already
    /// rounded to this type, or a NaN), little-endian.
    pub(super) fn write(self, v: Scalar, out: &mut Vec<u8>) {
        // The casts below are exact for such values (`as` between integer types keeps the
        // low bytes, which are the value when it is in range).
        match (self, v) {
            (Numeric::I8, Scalar::Int(i)) => out.extend_from_slice(&(i as i8).to_le_bytes()),
            (Numeric::I16, Scalar::Int(i)) => out.extend_from_slice(&(i as i16).to_le_bytes()),
            (Numeric::I32, Scalar::Int(i)) => out.extend_from_slice(&(i as i32).to_le_bytes()),
            (Numeric::I64, Scalar::Int(i)) => out.extend_from_slice(&(i as i64).to_le_bytes()),
            (Numeric::U8, Scalar::Int(i)) => out.extend_from_slice(&(i as u8).to_le_bytes()),
            (Numeric::U16, Scalar::Int(i)) => out.extend_from_slice(&(i as u16).to_le_bytes()),
            (Numeric::U32, Scalar::Int(i)) => out.extend_from_slice(&(i as u32).to_le_bytes()),
            (Numeric::U64, Scalar::Int(i)) => out.extend_from_slice(&(i as u64).to_le_bytes()),
            (Numeric::F16, Scalar::Float(x)) => {
                out.extend_from_slice(&f16::from_f64(x).to_le_bytes())
            }
            (Numeric::F32, Scalar::Float(x)) => out.extend_from_slice(&(x as f32).to_le_bytes()),
            (Numeric::F64, Scalar::Float(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (t, v) => unreachable!("{v:?} written as {t:?}"),
        }
    }

    /// The value of this float type nearest to `x` (ties to even), as `cast-value-rs`
    /// computes it for a value of type `from`: float16 from float64 goes through the
    /// `half` crate, which may round through float32 on CPUs with F16C.
    pub(super) fn nearest_float(self, x: f64, from: Numeric) -> f64 {
        match self {
            Numeric::F16 if from == Numeric::F64 => f16::from_f64(x).to_f64(),
            Numeric::F16 => f16::from_f32(x as f32).to_f64(),
            Numeric::F32 => f64::from(x as f32),
            _ => x,
        }
    }

    /// The next value of this float type above (`up`) or below `x`, a value of the type.
    pub(super) fn step_float(self, x: f64, up: bool) -> f64 {
        match self {
            Numeric::F16 => f16::from_bits(step_f16(f16::from_f64(x).to_bits(), up)).to_f64(),
            Numeric::F32 => {
                let x = x as f32;
                f64::from(if up { x.next_up() } else { x.next_down() })
            }
            _ if up => x.next_up(),
            _ => x.next_down(),
        }
    }
}

/// IEEE nextUp / nextDown on float16 bits (NaN stays, infinities saturate the way
/// `f64::next_up` does).
fn step_f16(bits: u16, up: bool) -> u16 {
    let negative = bits & 0x8000 != 0;
    let magnitude = bits & 0x7fff;
    if magnitude > 0x7c00 {
        return bits; // NaN
    }
    if magnitude == 0 {
        // ±0: the smallest subnormal of the step's sign.
        return if up { 0x0001 } else { 0x8001 };
    }
    if magnitude == 0x7c00 && negative != up {
        return bits; // +inf up, -inf down
    }
    // Away from zero adds one to the magnitude, towards zero takes one.
    if up != negative {
        bits + 1
    } else {
        bits - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_steps() {
        let one = f16::ONE.to_bits();
        assert_eq!(step_f16(one, true), 0x3c01);
        assert_eq!(step_f16(one, false), 0x3bff);
        assert_eq!(step_f16(0x8000 | one, true), 0xbbff);
        assert_eq!(step_f16(0, false), 0x8001);
        assert_eq!(step_f16(0x8000, true), 0x0001);
        assert_eq!(step_f16(0x7bff, true), 0x7c00);
        assert_eq!(step_f16(0x7c00, true), 0x7c00);
        assert_eq!(step_f16(0x7c00, false), 0x7bff);
        assert_eq!(step_f16(0xfc00, true), 0xfbff);
        assert_eq!(step_f16(0x7e00, true), 0x7e00);
    }

    #[test]
    fn reads_and_writes_exactly() {
        let cases: [(Numeric, &[u8], Scalar); 5] = [
            (Numeric::I16, &(-2i16).to_le_bytes(), Scalar::Int(-2)),
            (Numeric::U64, &u64::MAX.to_le_bytes(), Scalar::Int(u64::MAX.into())),
            (Numeric::F16, &f16::from_f32(0.5).to_le_bytes(), Scalar::Float(0.5)),
            (Numeric::F32, &0.1f32.to_le_bytes(), Scalar::Float(0.1f32.into())),
            (Numeric::I64, &i64::MIN.to_le_bytes(), Scalar::Int(i64::MIN.into())),
        ];
        for (t, bytes, v) in cases {
            assert_eq!(t.read(bytes), v);
            let mut out = Vec::new();
            t.write(v, &mut out);
            assert_eq!(out, bytes);
        }
        assert_eq!(Numeric::U8.int_range(), Some((0, 255)));
        assert_eq!(Numeric::I64.int_range(), Some((i64::MIN.into(), i64::MAX.into())));
        assert_eq!(Numeric::F32.int_range(), None);
    }
}
