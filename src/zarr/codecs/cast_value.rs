//! The `cast_value` array->array codec (zarr-extensions `codecs/cast_value`): stores each
//! element converted by value to `data_type`; decoding converts back to the type the codec
//! was given. Conversions follow zarr-python 3.2+ (its `cast-value-rs` backend), in order:
//! `scalar_map` (`decode` entries when decoding; a NaN key matches every NaN), then exact
//! values, then `rounding` (default `nearest-even`) and `out_of_range` (`clamp`: to the
//! type's bounds, ±Infinity for floats; `wrap`: modulo 2^N, integers only; absent: an
//! error). NaN and ±Infinity never become integers except through the map; a float narrowed
//! past its finite range is an error unless clamped to ±Infinity.

use serde_json::{Map, Value};

use super::numeric::{Numeric, Scalar};
use super::CodecError;
use crate::zarr::data_type::DataType;
use crate::zarr::metadata::Codec;

pub(crate) const NAME: &str = "cast_value";

fn invalid(reason: impl Into<String>) -> CodecError {
    CodecError::InvalidConfiguration { codec: NAME.into(), reason: reason.into() }
}

/// How a value between two representable ones is rounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rounding {
    NearestEven,
    TowardsZero,
    TowardsPositive,
    TowardsNegative,
    NearestAway,
}

/// What happens to a value outside the target type's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OutOfRange {
    Clamp,
    Wrap,
}

/// A conversion of values of one numeric type into another.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Cast {
    from: Numeric,
    to: Numeric,
    rounding: Rounding,
    out_of_range: Option<OutOfRange>,
    /// Explicit mappings, looked up first, first match wins: (value of `from`, value of `to`).
    map: Vec<(Scalar, Scalar)>,
}

impl Cast {
    /// Convert little-endian `from` elements (a whole number of them) into `to` elements.
    pub(super) fn convert_all(&self, data: &[u8]) -> Result<Vec<u8>, CodecError> {
        let n = data.len() / self.from.size();
        let mut out = Vec::with_capacity(n * self.to.size());
        for e in data.chunks_exact(self.from.size()) {
            let x = self.from.read(e);
            match self.mapped(x) {
                Some(v) => self.to.write(v, &mut out),
                // Keep the bits (a signalling NaN included) when nothing changes the type.
                None if self.from == self.to => out.extend_from_slice(e),
                None => {
                    let v = self.convert(x).map_err(|reason| CodecError::Corrupt {
                        codec: NAME,
                        reason: format!("{reason} (converting {:?} to {:?})", self.from, self.to),
                    })?;
                    self.to.write(v, &mut out);
                }
            }
        }
        Ok(out)
    }

    fn mapped(&self, x: Scalar) -> Option<Scalar> {
        let hit = |key: &Scalar| match (key, x) {
            (Scalar::Float(k), Scalar::Float(v)) if k.is_nan() => v.is_nan(),
            (k, v) => *k == v,
        };
        self.map.iter().find(|(k, _)| hit(k)).map(|&(_, v)| v)
    }

    /// One value of `from` as a value of `to`, or why it has none.
    pub(super) fn convert(&self, x: Scalar) -> Result<Scalar, String> {
        match (x, self.to.is_float()) {
            (Scalar::Int(i), false) => self.int_to_int(i),
            (Scalar::Int(i), true) => self.int_to_float(i),
            (Scalar::Float(f), false) => self.float_to_int(f),
            (Scalar::Float(f), true) => self.float_to_float(f),
        }
    }

    fn out_of_range(&self, value: impl std::fmt::Display) -> String {
        format!("{value} is out of range and no out_of_range is set")
    }

    fn int_to_int(&self, i: i128) -> Result<Scalar, String> {
        let (lo, hi) = self.to.int_range().expect("integer target");
        if (lo..=hi).contains(&i) {
            return Ok(Scalar::Int(i));
        }
        match self.out_of_range {
            Some(OutOfRange::Clamp) => Ok(Scalar::Int(i.clamp(lo, hi))),
            Some(OutOfRange::Wrap) => Ok(Scalar::Int(wrap(i, self.to))),
            None => Err(self.out_of_range(i)),
        }
    }

    fn int_to_float(&self, i: i128) -> Result<Scalar, String> {
        let precision = self.to.precision().expect("float target");
        let r = round_int(i, precision, self.rounding);
        if r.abs() > self.to.float_max() {
            return self.float_overflow(i as f64);
        }
        Ok(Scalar::Float(r))
    }

    fn float_to_int(&self, x: f64) -> Result<Scalar, String> {
        if !x.is_finite() {
            return Err(format!("{x} has no integer value"));
        }
        let r = match self.rounding {
            Rounding::NearestEven => x.round_ties_even(),
            Rounding::TowardsZero => x.trunc(),
            Rounding::TowardsPositive => x.ceil(),
            Rounding::TowardsNegative => x.floor(),
            Rounding::NearestAway => x.round(),
        };
        let (lo, hi) = self.to.int_range().expect("integer target");
        // Both bounds are powers of two (or zero), exact as floats.
        if r >= lo as f64 && r < (hi + 1) as f64 {
            return Ok(Scalar::Int(r as i128));
        }
        match self.out_of_range {
            Some(OutOfRange::Clamp) => Ok(Scalar::Int(if r < lo as f64 { lo } else { hi })),
            Some(OutOfRange::Wrap) => {
                // Past 2^64 a float is a multiple of 2^11: `%` is exact, the residue fits.
                const TWO_64: f64 = 18_446_744_073_709_551_616.0;
                let i = if r.abs() < TWO_64 { r as i128 } else { (r % TWO_64) as i128 };
                Ok(Scalar::Int(wrap(i, self.to)))
            }
            None => Err(self.out_of_range(x)),
        }
    }

    fn float_to_float(&self, x: f64) -> Result<Scalar, String> {
        let (to, from) = (self.to, self.from);
        if x.is_nan() || to.precision() >= from.precision() {
            return Ok(Scalar::Float(x)); // widening is exact; NaN stays NaN
        }
        let nearest = to.nearest_float(x, from);
        if nearest == x {
            return Ok(Scalar::Float(nearest)); // exact, ±0 and ±Infinity included
        }
        if self.rounding == Rounding::NearestEven {
            if nearest.is_infinite() {
                return self.float_overflow(x);
            }
            return Ok(Scalar::Float(nearest));
        }
        // The representable values either side of x.
        let (below, above) = if nearest > x {
            (to.step_float(nearest, false), nearest)
        } else {
            (nearest, to.step_float(nearest, true))
        };
        let rounded = match self.rounding {
            Rounding::TowardsZero if x > 0.0 => below,
            Rounding::TowardsZero => above,
            Rounding::TowardsPositive => above,
            Rounding::TowardsNegative => below,
            // Nearest-even already is the nearest; only a tie may go the other way
            // (cast-value-rs decides a tie against the nearest-even value it computed).
            Rounding::NearestAway | Rounding::NearestEven => {
                let other = if nearest > x { below } else { above };
                if (nearest + other) / 2.0 == x && other.abs() > nearest.abs() {
                    other
                } else {
                    nearest
                }
            }
        };
        // Overflow: the rounding with an unbounded exponent passes the largest finite
        // value, i.e. x reaches MAX + ulp(MAX) when towards-zero stepped back from infinity.
        let max = to.float_max();
        let past_max = max + (max - to.step_float(max, false));
        if rounded.is_infinite() || (nearest.is_infinite() && x.abs() >= past_max) {
            return self.float_overflow(x);
        }
        Ok(Scalar::Float(rounded))
    }

    fn float_overflow(&self, x: f64) -> Result<Scalar, String> {
        match self.out_of_range {
            Some(OutOfRange::Clamp) => Ok(Scalar::Float(f64::INFINITY.copysign(x))),
            _ => Err(self.out_of_range(x)),
        }
    }
}

/// `i` modulo 2^N into an N-bit integer type, two's complement for signed ones.
fn wrap(i: i128, to: Numeric) -> i128 {
    let (lo, hi) = to.int_range().expect("integer target");
    let modulus = hi - lo + 1;
    let r = i.rem_euclid(modulus);
    if r > hi {
        r - modulus
    } else {
        r
    }
}

/// `i` rounded to `precision` significant bits, as an f64 (which holds the result exactly).
fn round_int(i: i128, precision: u32, rounding: Rounding) -> f64 {
    let negative = i < 0;
    let magnitude = i.unsigned_abs();
    let bits = u128::BITS - magnitude.leading_zeros();
    let rounded = if bits <= precision {
        magnitude
    } else {
        let shift = bits - precision;
        let unit = 1u128 << shift;
        let rest = magnitude & (unit - 1);
        let half = unit >> 1;
        let up = match rounding {
            Rounding::NearestEven => rest > half || (rest == half && (magnitude >> shift) & 1 == 1),
            Rounding::NearestAway => rest >= half,
            Rounding::TowardsZero => false,
            Rounding::TowardsPositive => !negative && rest != 0,
            Rounding::TowardsNegative => negative && rest != 0,
        };
        magnitude - rest + if up { unit } else { 0 }
    };
    let r = rounded as f64;
    if negative {
        -r
    } else {
        r
    }
}

/// A configured `cast_value` codec on data of one type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CastValue {
    /// Stored type -> the type the codec was given.
    decode: Cast,
    encoded_type: DataType,
}

impl CastValue {
    /// The codec `c` on data of `data_type`, checked as zarr-python checks it.
    pub(crate) fn new(c: &Codec, data_type: &DataType) -> Result<Self, CodecError> {
        let config = &c.configuration;
        if let Some(key) = config.keys().find(|k| {
            !["data_type", "rounding", "out_of_range", "scalar_map"].contains(&k.as_str())
        }) {
            return Err(invalid(format!("unknown key `{key}`")));
        }
        let numeric = |t: &DataType, role: &str| {
            Numeric::of(t).ok_or_else(|| {
                CodecError::Unsupported(format!("{NAME} with {role} data type {}", t.name))
            })
        };
        let encoded_type = match config.get("data_type") {
            Some(v) => DataType::from_json(v)
                .map_err(|_| CodecError::Unsupported(format!("{NAME} to data type {v}")))?,
            None => return Err(invalid("`data_type` is required")),
        };
        let from = numeric(data_type, "source")?;
        let to = numeric(&encoded_type, "target")?;
        let rounding = match config.get("rounding") {
            None => Rounding::NearestEven,
            Some(Value::String(s)) => match s.as_str() {
                "nearest-even" => Rounding::NearestEven,
                "towards-zero" => Rounding::TowardsZero,
                "towards-positive" => Rounding::TowardsPositive,
                "towards-negative" => Rounding::TowardsNegative,
                "nearest-away" => Rounding::NearestAway,
                _ => return Err(invalid(format!("unknown rounding {s:?}"))),
            },
            Some(_) => return Err(invalid("`rounding` must be a string")),
        };
        let out_of_range = match config.get("out_of_range") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s == "clamp" => Some(OutOfRange::Clamp),
            Some(Value::String(s)) if s == "wrap" && !to.is_float() => Some(OutOfRange::Wrap),
            Some(Value::String(s)) if s == "wrap" => {
                return Err(invalid("out_of_range \"wrap\" needs an integer data_type"))
            }
            Some(v) => return Err(invalid(format!("unknown out_of_range {v}"))),
        };
        let map = match config.get("scalar_map") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(m)) => scalar_map(m, to, from)?,
            Some(_) => return Err(invalid("`scalar_map` must be an object")),
        };
        Ok(CastValue {
            decode: Cast { from: to, to: from, rounding, out_of_range, map },
            encoded_type,
        })
    }

    /// The data type the codec stores (its `data_type`).
    pub(crate) fn encoded_type(&self) -> &DataType {
        &self.encoded_type
    }

    /// Decode little-endian stored elements (a whole number of them: the caller checked the
    /// size) into little-endian elements of the type the codec was given.
    pub(crate) fn decode(&self, data: &[u8]) -> Result<Vec<u8>, CodecError> {
        self.decode.convert_all(data)
    }

    /// True when decoding maps no value explicitly (`scalar_map` has no `decode` entries).
    pub(crate) fn decodes_without_map(&self) -> bool {
        self.decode.map.is_empty()
    }

    pub(crate) fn rounding(&self) -> Rounding {
        self.decode.rounding
    }
}

/// The `decode` entries of a `scalar_map` (`encode` ones only matter when encoding, but
/// are checked too), from values of `stored` to values of `decoded`.
fn scalar_map(
    m: &Map<String, Value>,
    stored: Numeric,
    decoded: Numeric,
) -> Result<Vec<(Scalar, Scalar)>, CodecError> {
    if let Some(key) = m.keys().find(|k| !["encode", "decode"].contains(&k.as_str())) {
        return Err(invalid(format!("unknown scalar_map key `{key}`")));
    }
    if let Some(encode) = m.get("encode") {
        map_entries(encode, decoded, stored)?;
    }
    match m.get("decode") {
        Some(decode) => map_entries(decode, stored, decoded),
        None => Ok(Vec::new()),
    }
}

/// One direction's `[[input, output], ...]`, in the order zarr-python looks them up: it
/// builds a Python dict of the JSON pairs, then one of `int(input)` or `float(input)`, so a
/// repeated input keeps its first place and its last output (NaN equals no other NaN).
fn map_entries(v: &Value, from: Numeric, to: Numeric) -> Result<Vec<(Scalar, Scalar)>, CodecError> {
    let Value::Array(items) = v else {
        return Err(invalid("scalar_map entries must be a list of [input, output] pairs"));
    };
    let mut by_json: Vec<(&Value, &Value)> = Vec::new();
    for item in items {
        let [input, output] = item.as_array().map(Vec::as_slice).unwrap_or_default() else {
            return Err(invalid(format!("scalar_map entry {item} is not an [input, output] pair")));
        };
        match by_json.iter_mut().find(|(k, _)| python_equal(k, input)) {
            Some(e) => e.1 = output,
            None => by_json.push((input, output)),
        }
    }
    let mut by_number: Vec<(Scalar, &Value)> = Vec::new();
    for (input, output) in by_json {
        let key = python_number(input, from)?;
        match by_number.iter_mut().find(|(k, _)| *k == key && !is_nan(key)) {
            Some(e) => e.1 = output,
            None => by_number.push((key, output)),
        }
    }
    by_number
        .into_iter()
        .map(|(k, output)| Ok((as_type(k, from)?, as_type(python_number(output, to)?, to)?)))
        .collect()
}

/// Python's `==` on two JSON values as `json.loads` makes them (`1 == 1.0`).
fn python_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i128(), y.as_i128()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b,
    }
}

fn is_nan(v: Scalar) -> bool {
    matches!(v, Scalar::Float(f) if f.is_nan())
}

/// A scalar_map JSON value as zarr-python hands it on: Python's `int(v)` for integer types,
/// `float(v)` for float types, after checking it is a fill value of the type (integers:
/// integral numbers or integer strings; floats: numbers, `"NaN"`, `"Infinity"`,
/// `"-Infinity"` or decimal strings; `"0x…"` bit patterns pass zarr-python's check but not
/// `float()`, so they are refused).
fn python_number(v: &Value, t: Numeric) -> Result<Scalar, CodecError> {
    let bad = || invalid(format!("scalar_map value {v} is not a {t:?} value"));
    if t.is_float() {
        let x = match v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => match s.as_str() {
                "NaN" => Some(f64::NAN),
                "Infinity" => Some(f64::INFINITY),
                "-Infinity" => Some(f64::NEG_INFINITY),
                s if s.starts_with("0x") => None,
                s => s.parse().ok(),
            },
            _ => None,
        };
        return x.map(Scalar::Float).ok_or_else(bad);
    }
    let i = match v {
        Value::Number(n) => {
            n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)).or_else(|| {
                n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e30).map(|f| f as i128)
            })
        }
        Value::String(s) => s.parse().ok(),
        _ => None,
    };
    i.map(Scalar::Int).ok_or_else(bad)
}

/// A Python number as a value of `t`, the way the backend takes it from Python: an integer
/// must be in range; a float is rounded to float32 (and from there to float16).
fn as_type(v: Scalar, t: Numeric) -> Result<Scalar, CodecError> {
    Ok(match (v, t) {
        (Scalar::Int(i), _) => {
            let (lo, hi) = t.int_range().expect("integers for integer types");
            if !(lo..=hi).contains(&i) {
                return Err(invalid(format!("scalar_map value {i} is out of range for {t:?}")));
            }
            Scalar::Int(i)
        }
        (Scalar::Float(x), Numeric::F16) => Scalar::Float(half::f16::from_f32(x as f32).to_f64()),
        (Scalar::Float(x), Numeric::F32) => Scalar::Float(f64::from(x as f32)),
        (f, _) => f,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn codec(config: Value) -> Codec {
        Codec { name: NAME.into(), configuration: config.as_object().unwrap().clone() }
    }

    fn dt(name: &str) -> DataType {
        DataType::from_name(name).unwrap()
    }

    #[test]
    fn configurations() {
        let ok = CastValue::new(&codec(json!({"data_type": "int16"})), &dt("float64")).unwrap();
        assert_eq!(ok.encoded_type(), &dt("int16"));
        assert_eq!(ok.rounding(), Rounding::NearestEven);
        assert!(ok.decodes_without_map());
        let mapped = CastValue::new(
            &codec(
                json!({"data_type": "uint8", "rounding": "towards-zero", "out_of_range": "clamp",
                "scalar_map": {"encode": [["NaN", 0]], "decode": [[0, "NaN"]]}}),
            ),
            &dt("float32"),
        )
        .unwrap();
        assert!(!mapped.decodes_without_map());
        let bad = [
            json!({}),
            json!({"data_type": "int16", "extra": 1}),
            json!({"data_type": "int16", "rounding": "up"}),
            json!({"data_type": "int16", "out_of_range": "saturate"}),
            json!({"data_type": "float32", "out_of_range": "wrap"}),
            json!({"data_type": "int16", "scalar_map": []}),
            json!({"data_type": "int16", "scalar_map": {"both": []}}),
            json!({"data_type": "int16", "scalar_map": {"decode": [[1]]}}),
            json!({"data_type": "int16", "scalar_map": {"decode": [["NaN", 0]]}}),
            json!({"data_type": "int16", "scalar_map": {"decode": [[1, "0x7ff8000000000000"]]}}),
            json!({"data_type": "int8", "scalar_map": {"decode": [[300, 0]]}}),
            json!({"data_type": "int8", "scalar_map": {"decode": [[1.5, 0]]}}),
        ];
        for config in bad {
            assert!(
                matches!(
                    CastValue::new(&codec(config.clone()), &dt("float64")),
                    Err(CodecError::InvalidConfiguration { .. })
                ),
                "{config}"
            );
        }
        for (config, source) in [
            (json!({"data_type": "complex64"}), "float64"),
            (json!({"data_type": "bfloat16"}), "float64"),
            (json!({"data_type": "int16"}), "bool"),
        ] {
            assert!(
                matches!(
                    CastValue::new(&codec(config.clone()), &dt(source)),
                    Err(CodecError::Unsupported(_))
                ),
                "{config} on {source}"
            );
        }
    }

    /// A repeated input keeps its first place and takes its last output (a Python dict).
    #[test]
    fn repeated_map_inputs() {
        let c = CastValue::new(
            &codec(json!({"data_type": "int16",
                "scalar_map": {"decode": [[1, 10.0], [2, 20.0], [1.0, 30.0], ["1", 40.0]]}})),
            &dt("float64"),
        )
        .unwrap();
        let want =
            vec![(Scalar::Int(1), Scalar::Float(40.0)), (Scalar::Int(2), Scalar::Float(20.0))];
        assert_eq!(c.decode.map, want);
        // By JSON first: `1` and `1.0` are one input, `"1"` another until both are `int()`ed.
        let entries =
            map_entries(&json!([[1, 10], ["1", 40], [1.0, 30]]), Numeric::I8, Numeric::I8);
        assert_eq!(entries.unwrap(), [(Scalar::Int(1), Scalar::Int(40))]);
        // NaN inputs merge only when spelled alike; an overwritten output is never read.
        let entries =
            map_entries(&json!([["NaN", "x"], ["NaN", 2], ["nan", 3]]), Numeric::F32, Numeric::I8);
        let entries = entries.unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].1, Scalar::Int(2));
    }

    fn numeric(name: &str) -> Numeric {
        Numeric::of(&dt(name)).unwrap()
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// Every pair of types, rounding mode and out_of_range converts each awkward value
    /// (ties, range edges, subnormals, NaN, infinities) as cast-value-rs does, errors
    /// included (testdata/cast_table.txt, from make_cast_vectors.py).
    #[test]
    fn casts_match_cast_value_rs() {
        let table = std::fs::read_to_string(crate::zarr::codecs::tests::testdata("cast_table.txt"))
            .unwrap();
        let mut inputs = std::collections::HashMap::new();
        let mut checked = 0;
        for line in table.lines().filter(|l| !l.starts_with('#')) {
            let fields: Vec<&str> = line.split(' ').collect();
            if fields[0] == "in" {
                inputs.insert(fields[1], fields[2..].iter().map(|h| hex(h)).collect::<Vec<_>>());
                continue;
            }
            let [from, to, out_of_range, roundings, results @ ..] = fields.as_slice() else {
                panic!("{line}")
            };
            let out_of_range = match *out_of_range {
                "clamp" => Some(OutOfRange::Clamp),
                "wrap" => Some(OutOfRange::Wrap),
                _ => None,
            };
            for r in roundings.split(',') {
                let config = json!({"data_type": from, "rounding": r});
                let rounding = CastValue::new(&codec(config), &dt(to)).unwrap().rounding();
                let cast = Cast {
                    from: numeric(from),
                    to: numeric(to),
                    rounding,
                    out_of_range,
                    map: vec![],
                };
                for (input, want) in inputs[from].iter().zip(results) {
                    let got = cast.convert_all(input);
                    let case = format!("{from} {} -> {to} {r} {out_of_range:?}", hex_str(input));
                    match (got, *want) {
                        (Err(_), "E") => {}
                        (Ok(bytes), want) => assert_eq!(hex_str(&bytes), want, "{case}"),
                        (Err(e), want) => panic!("{case}: {e}, want {want}"),
                    }
                    checked += 1;
                }
            }
        }
        assert!(checked > 35_000, "{checked}");
    }

    fn hex_str(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn integer_rounding() {
        let two_24_plus = (1i128 << 24) + 1;
        assert_eq!(round_int(two_24_plus, 24, Rounding::NearestEven), 16777216.0);
        assert_eq!(round_int(two_24_plus, 24, Rounding::TowardsPositive), 16777218.0);
        assert_eq!(round_int(-two_24_plus, 24, Rounding::TowardsPositive), -16777216.0);
        assert_eq!(round_int(-two_24_plus, 24, Rounding::TowardsNegative), -16777218.0);
        assert_eq!(round_int(16777219, 24, Rounding::NearestEven), 16777220.0);
        assert_eq!(round_int(16777219, 24, Rounding::NearestAway), 16777220.0);
        assert_eq!(round_int(u64::MAX.into(), 53, Rounding::NearestEven), 18446744073709551616.0);
        assert_eq!(wrap(40000, Numeric::I16), 40000 - 65536);
        assert_eq!(wrap(-1, Numeric::U8), 255);
        assert_eq!(wrap(-32769, Numeric::I16), 32767);
    }
}
