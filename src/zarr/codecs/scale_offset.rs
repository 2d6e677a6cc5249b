//! The `scale_offset` array->array codec (zarr-extensions `codecs/scale_offset`): stores
//! `(x - offset) * scale`; decoding computes `x / scale + offset` in the arithmetic of the
//! data type the codec is given, as zarr-python 3.2+ does with numpy: floats round after
//! each operation (float16 through float32, as numpy's half loops do); integers must divide
//! exactly and stay in range, or the chunk is an error. `offset` and `scale` are fill-value
//! forms of that type (default 0 and 1); `scale` must not be zero.

use half::f16;
use serde_json::Value;

use super::numeric::{Numeric, Scalar};
use super::CodecError;
use crate::zarr::data_type::fill_value::fill_value_bytes;
use crate::zarr::data_type::DataType;
use crate::zarr::metadata::Codec;

pub(crate) const NAME: &str = "scale_offset";

fn invalid(reason: impl Into<String>) -> CodecError {
    CodecError::InvalidConfiguration { codec: NAME.into(), reason: reason.into() }
}

/// A configured `scale_offset` codec on data of one type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ScaleOffset {
    numeric: Numeric,
    /// Values of `numeric`.
    scale: Scalar,
    offset: Scalar,
}

impl ScaleOffset {
    /// The codec `c` on data of `data_type`, checked as zarr-python checks it.
    pub(crate) fn new(c: &Codec, data_type: &DataType) -> Result<Self, CodecError> {
        let numeric = Numeric::of(data_type)
            .ok_or_else(|| CodecError::Unsupported(format!("{NAME} on {} data", data_type.name)))?;
        if let Some(key) =
            c.configuration.keys().find(|k| !["offset", "scale"].contains(&k.as_str()))
        {
            return Err(invalid(format!("unknown key `{key}`")));
        }
        let value = |key: &str, default: i64| {
            let v = c.configuration.get(key).cloned().unwrap_or(Value::from(default));
            parse(&v, data_type, numeric).map_err(|reason| {
                invalid(format!("`{key}` {v} is not a {} value: {reason}", data_type.name))
            })
        };
        let (scale, offset) = (value("scale", 1)?, value("offset", 0)?);
        if matches!(scale, Scalar::Int(0)) || matches!(scale, Scalar::Float(f) if f == 0.0) {
            return Err(invalid("`scale` must not be zero"));
        }
        Ok(ScaleOffset { numeric, scale, offset })
    }

    /// The scale and offset, as values of the codec's type.
    pub(super) fn scale_and_offset(&self) -> (Scalar, Scalar) {
        (self.scale, self.offset)
    }

    /// Decode little-endian elements (a whole number of them) in place.
    pub(crate) fn decode(&self, data: &mut [u8]) -> Result<(), CodecError> {
        let size = self.numeric.size();
        match (self.numeric, self.scale, self.offset) {
            (Numeric::F64, Scalar::Float(scale), Scalar::Float(offset)) => {
                for e in data.chunks_exact_mut(size) {
                    let x = f64::from_le_bytes(e.try_into().expect("8 bytes"));
                    e.copy_from_slice(&(x / scale + offset).to_le_bytes());
                }
            }
            (Numeric::F32, Scalar::Float(scale), Scalar::Float(offset)) => {
                let (scale, offset) = (scale as f32, offset as f32);
                for e in data.chunks_exact_mut(size) {
                    let x = f32::from_le_bytes(e.try_into().expect("4 bytes"));
                    e.copy_from_slice(&(x / scale + offset).to_le_bytes());
                }
            }
            (Numeric::F16, Scalar::Float(scale), Scalar::Float(offset)) => {
                let (scale, offset) = (scale as f32, offset as f32);
                for e in data.chunks_exact_mut(size) {
                    let x = f16::from_le_bytes(e.try_into().expect("2 bytes")).to_f32();
                    let q = f16::from_f32(x / scale).to_f32();
                    e.copy_from_slice(&f16::from_f32(q + offset).to_le_bytes());
                }
            }
            (t, Scalar::Int(scale), Scalar::Int(offset)) => {
                let (lo, hi) = t.int_range().expect("integer type");
                let mut out = Vec::with_capacity(size);
                for e in data.chunks_exact_mut(size) {
                    let Scalar::Int(x) = t.read(e) else { unreachable!("integer type") };
                    if x % scale != 0 {
                        return Err(
                            self.corrupt(format!("{x} is not a multiple of the scale {scale}"))
                        );
                    }
                    let v = x / scale + offset;
                    if !(lo..=hi).contains(&v) {
                        return Err(self.corrupt(format!("{x} decodes to {v}, out of range")));
                    }
                    out.clear();
                    t.write(Scalar::Int(v), &mut out);
                    e.copy_from_slice(&out);
                }
            }
            _ => unreachable!("scale and offset are values of the codec's type"),
        }
        Ok(())
    }

    fn corrupt(&self, reason: String) -> CodecError {
        CodecError::Corrupt { codec: NAME, reason }
    }
}

/// A scale or offset as zarr-python reads it (`from_json_scalar`): a fill-value form of the
/// type, or a decimal string of one.
fn parse(v: &Value, data_type: &DataType, numeric: Numeric) -> Result<Scalar, String> {
    let text = match v {
        Value::String(s)
            if !s.starts_with("0x") && !["NaN", "Infinity", "-Infinity"].contains(&s.as_str()) =>
        {
            Some(s.as_str())
        }
        _ => None,
    };
    let v = match text {
        Some(s) if numeric.is_float() => {
            let x: f64 = s.parse().map_err(|_| format!("{s:?} is no number"))?;
            serde_json::Number::from_f64(x).map(Value::Number).unwrap_or_else(|| {
                Value::from(if x.is_nan() {
                    "NaN"
                } else if x > 0.0 {
                    "Infinity"
                } else {
                    "-Infinity"
                })
            })
        }
        Some(s) => {
            let i: i128 = s.parse().map_err(|_| format!("{s:?} is no integer"))?;
            Value::Number(serde_json::Number::from_i128(i).ok_or("too large")?)
        }
        None => v.clone(),
    };
    let bytes = fill_value_bytes(data_type, &v).map_err(|e| e.to_string())?;
    Ok(numeric.read(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn codec(config: Value) -> Codec {
        Codec { name: NAME.into(), configuration: config.as_object().unwrap().clone() }
    }

    fn make(config: Value, t: &str) -> Result<ScaleOffset, CodecError> {
        ScaleOffset::new(&codec(config), &DataType::from_name(t).unwrap())
    }

    fn bytes<T: Copy, const N: usize>(v: &[T], f: fn(T) -> [u8; N]) -> Vec<u8> {
        v.iter().flat_map(|&x| f(x)).collect()
    }

    #[test]
    fn configurations() {
        let s = make(json!({}), "float32").unwrap();
        assert_eq!(s.scale_and_offset(), (Scalar::Float(1.0), Scalar::Float(0.0)));
        let s = make(json!({"scale": "0.1", "offset": "NaN"}), "float32").unwrap();
        let (scale, offset) = s.scale_and_offset();
        assert_eq!(scale, Scalar::Float(0.1f32.into()));
        assert!(matches!(offset, Scalar::Float(f) if f.is_nan()));
        assert_eq!(
            make(json!({"offset": "-7", "scale": 2.0}), "int16").unwrap().scale_and_offset(),
            (Scalar::Int(2), Scalar::Int(-7))
        );
        for (bad, t) in [
            (json!({"scale": 0}), "float64"),
            (json!({"scale": "0x0000"}), "float16"),
            (json!({"scale": 0}), "int8"),
            (json!({"offset": 300}), "int8"),
            (json!({"offset": 1.5}), "int8"),
            (json!({"offset": "abc"}), "float64"),
            (json!({"offset": 1, "other": 2}), "float64"),
        ] {
            assert!(
                matches!(make(bad.clone(), t), Err(CodecError::InvalidConfiguration { .. })),
                "{bad} {t}"
            );
        }
        assert!(matches!(make(json!({}), "bool"), Err(CodecError::Unsupported(_))));
    }

    #[test]
    fn decodes_in_the_types_arithmetic() {
        let s = make(json!({"scale": 10, "offset": 1}), "float64").unwrap();
        let mut d = bytes(&[-9.0f64, 5.0], f64::to_le_bytes);
        s.decode(&mut d).unwrap();
        assert_eq!(d, bytes(&[-9.0f64 / 10.0 + 1.0, 1.5], f64::to_le_bytes));
        // float32: 1 / 0.1f32 rounds in float32 (not 10 as in float64 arithmetic).
        let s = make(json!({"scale": 0.1}), "float32").unwrap();
        let mut d = bytes(&[1.0f32, 3.0], f32::to_le_bytes);
        s.decode(&mut d).unwrap();
        assert_eq!(d, bytes(&[1.0f32 / 0.1f32, 3.0f32 / 0.1f32], f32::to_le_bytes));
        // Integers divide exactly or fail, and stay in range or fail.
        let s = make(json!({"scale": 3, "offset": 100}), "int8").unwrap();
        let mut d = vec![(-6i8) as u8, 27];
        s.decode(&mut d).unwrap();
        assert_eq!(d, [98, 109]);
        assert!(matches!(s.decode(&mut [4]), Err(CodecError::Corrupt { .. })));
        assert!(matches!(s.decode(&mut [90]), Err(CodecError::Corrupt { .. })));
        let s = make(json!({"scale": 2, "offset": 200}), "uint8").unwrap();
        let mut d = [110, 112];
        assert!(s.decode(&mut d).is_err());
        assert!(make(json!({"scale": -1}), "uint64").is_err());
    }
}
