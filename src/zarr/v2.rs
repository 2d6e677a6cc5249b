//! Zarr v2 array metadata both ways: reading a `.zarray` into the equivalent v3
//! codec chain (so v2 chunks decode through [`ChunkSpec`]), and writing a v3
//! array's dtype, codecs and fill value in v2 form (for presenting v3 arrays to v2
//! readers).
//!
//! The mapping (v3 name <-> numcodecs id): `bytes` <-> the dtype's byte order;
//! `transpose` with the full reversal <-> `order: "F"`; `blosc`, `zstd`, `gzip`,
//! `crc32c` <-> the same ids; `numcodecs.zlib` <-> `zlib`. v2 applies `filters` in
//! order and then the `compressor` when encoding, so a v3 chain of bytes->bytes
//! codecs b1..bk is `filters: [b1..b(k-1)]`, `compressor: bk`.

use serde_json::{json, Map, Value};

use crate::zarr::chunk_key::ChunkKeyEncoding;
use crate::zarr::codecs::cast_value::NAME as CAST_VALUE;
use crate::zarr::codecs::scale_offset::NAME as SCALE_OFFSET;
use crate::zarr::codecs::transpose::parse_order;
use crate::zarr::codecs::{fixedscaleoffset_form, ChunkSpec, CodecError};
use crate::zarr::data_type::fill_value::{
    element_to_v2_json, fill_value_bytes, fill_value_bytes_v2, shown,
};
pub use crate::zarr::data_type::v2_dtype;
use crate::zarr::data_type::{DataType, CORE_TYPES};
use crate::zarr::error::{DataTypeError, MetadataError};
use crate::zarr::json::u64_list;
use crate::zarr::metadata::{parse_zarray, Codec};

/// A parsed v2 `.zarray`.
#[derive(Debug, Clone, PartialEq)]
pub struct V2Array {
    /// The whole document, in its original key order.
    pub json: Map<String, Value>,
    pub shape: Vec<u64>,
    pub chunks: Vec<u64>,
    pub data_type: DataType,
    /// The dtype's byte order is `>`.
    pub big_endian: bool,
    /// `order` is `"F"`.
    pub order_f: bool,
    /// `dimension_separator`: `.` (the default) or `/`.
    pub separator: char,
    /// The document's `fill_value` (`null` when absent).
    pub fill_value: Value,
}

impl V2Array {
    /// Parse a `.zarray`. Only fixed-size numeric and bool dtypes are accepted
    /// (`"<i4"`, `">f8"`, `"|u1"`, `"|b1"`, `"<c16"`, `"<f2"`, ...); anything else
    /// (objects, strings, datetimes, structured types) is an error naming it.
    /// `compressor` and `filters` are checked for shape here and mapped to v3 by
    /// [`chunk_spec`](Self::chunk_spec).
    pub fn parse(bytes: &[u8]) -> Result<V2Array, MetadataError> {
        let json = parse_zarray(bytes)?;
        let field = |name: &'static str| json.get(name).ok_or(MetadataError::MissingField(name));
        let shape = u64_list(field("shape")?, "shape")?;
        let chunks = u64_list(field("chunks")?, "chunks")?;
        if chunks.contains(&0) {
            return Err(MetadataError::InvalidField {
                field: "chunks",
                expected: "positive integers",
            });
        }
        if chunks.len() != shape.len() {
            return Err(MetadataError::RankMismatch {
                shape: shape.len(),
                chunk_shape: chunks.len(),
            });
        }
        let (data_type, big_endian) = parse_dtype(field("dtype")?)?;
        let order_f = match json.get("order") {
            None => false,
            Some(Value::String(s)) if s == "C" => false,
            Some(Value::String(s)) if s == "F" => true,
            Some(_) => {
                return Err(MetadataError::InvalidField {
                    field: "order",
                    expected: "\"C\" or \"F\"",
                })
            }
        };
        let separator = match json.get("dimension_separator") {
            None | Some(Value::Null) => '.',
            Some(Value::String(s)) if s == "." => '.',
            Some(Value::String(s)) if s == "/" => '/',
            Some(other) => return Err(MetadataError::InvalidSeparator(other.to_string())),
        };
        let numcodec = |v: &Value| v.get("id").and_then(Value::as_str).is_some();
        match json.get("compressor") {
            None | Some(Value::Null) => {}
            Some(c) if numcodec(c) => {}
            Some(_) => {
                return Err(MetadataError::InvalidField {
                    field: "compressor",
                    expected: "null or an object with an `id` string",
                })
            }
        }
        match json.get("filters") {
            None | Some(Value::Null) => {}
            Some(Value::Array(fs)) if fs.iter().all(numcodec) => {}
            Some(_) => {
                return Err(MetadataError::InvalidField {
                    field: "filters",
                    expected: "null or an array of objects with an `id` string",
                })
            }
        }
        let fill_value = json.get("fill_value").cloned().unwrap_or(Value::Null);
        Ok(V2Array { json, shape, chunks, data_type, big_endian, order_f, separator, fill_value })
    }

    /// How chunk coordinates become keys: `1.0.2` (or `1/0/2`).
    pub fn key_encoding(&self) -> ChunkKeyEncoding {
        ChunkKeyEncoding::V2 { separator: self.separator }
    }

    /// The equivalent v3 chain, checked: a transpose with the reversed axis order
    /// if `order` is F (and the array has 2 or more dimensions), `bytes` with the
    /// dtype's byte order, then the filters and the compressor under their v3
    /// names. A numcodecs id without a v3 equivalent here is
    /// `Unsupported("numcodecs <id>")`.
    pub fn chunk_spec(&self) -> Result<ChunkSpec, CodecError> {
        let ndim = self.chunks.len();
        let mut codecs = Vec::new();
        if self.order_f && ndim > 1 {
            let reversed: Vec<usize> = (0..ndim).rev().collect();
            codecs.push(codec("transpose", json!({ "order": reversed })));
        }
        let endian = if self.big_endian { "big" } else { "little" };
        let mut filters = match self.json.get("filters") {
            Some(Value::Array(fs)) => fs.as_slice(),
            _ => &[],
        };
        // Leading array->array filters (bitround, quantize, ...) come before `bytes` in v3.
        while let Some((first, rest)) = filters.split_first() {
            let id = first.get("id").and_then(Value::as_str).unwrap_or("");
            if !NUMCODECS_ARRAY_TO_ARRAY.contains(&id) {
                break;
            }
            if id == "fixedscaleoffset" && self.big_endian {
                // zarr-python 2 stores the filter's output in `astype`'s byte order but views
                // its decoded output as the big-endian dtype: no consistent reading.
                return Err(CodecError::Unsupported(
                    "numcodecs fixedscaleoffset on a big-endian dtype".into(),
                ));
            }
            codecs.push(numcodec_to_v3(first, &self.data_type)?);
            filters = rest;
        }
        codecs.push(codec("bytes", json!({ "endian": endian })));
        let compressor = self.json.get("compressor").filter(|c| !c.is_null());
        for numcodec in filters.iter().chain(compressor) {
            codecs.push(numcodec_to_v3(numcodec, &self.data_type)?);
        }
        let spec = ChunkSpec {
            codecs,
            data_type: self.data_type.clone(),
            chunk_shape: self.chunks.clone(),
            fill_value: fill_value_bytes_v2(&self.data_type, self.big_endian, &self.fill_value)?,
        };
        spec.check()?;
        Ok(spec)
    }
}

/// How a v3 codec chain is written in v2.
#[derive(Debug, Clone, PartialEq)]
pub struct V2Codecs {
    /// The `bytes` codec is big-endian (the dtype gets `>`).
    pub big_endian: bool,
    /// The chain transposes with the full reversal of the axes (`order: "F"`).
    pub order_f: bool,
    /// numcodecs configurations, applied in order when encoding; empty means
    /// `"filters": null`.
    pub filters: Vec<Value>,
    pub compressor: Option<Value>,
    /// The array->bytes codec is `vlen-utf8` or `vlen-bytes` (an object dtype in v2).
    pub vlen: Option<&'static str>,
}

/// zarr-python 3 names numcodecs' codecs `numcodecs.<id>` in v3 metadata; their
/// configuration is numcodecs' own without the `id`.
pub const NUMCODECS_PREFIX: &str = "numcodecs.";
/// numcodecs ids that zarr-python 3 uses as array->array codecs (before `bytes`).
const NUMCODECS_ARRAY_TO_ARRAY: [&str; 6] =
    ["delta", "bitround", "fixedscaleoffset", "quantize", "packbits", "astype"];
/// numcodecs ids that zarr-python 3 uses as array->bytes codecs (instead of `bytes`).
const NUMCODECS_ARRAY_TO_BYTES: [&str; 2] = ["pcodec", "zfpy"];
/// The variable-length array->bytes codecs; their v2 form is the filter of the same id.
const VLEN_CODECS: [&str; 2] = ["vlen-utf8", "vlen-bytes"];

/// A `numcodecs.<id>` codec as the numcodecs configuration `{"id": <id>, ...}`.
fn numcodecs_config(id: &str, c: &Codec) -> Value {
    let mut m = Map::new();
    m.insert("id".into(), Value::String(id.to_string()));
    for (k, v) in &c.configuration {
        if k != "id" {
            m.insert(k.clone(), v.clone());
        }
    }
    Value::Object(m)
}

/// How a v3 codec chain (with no sharding left in it, as the unsharded view
/// presents it) on an array of `data_type` is written in v2, or `None` when v2 cannot
/// express it (a transpose other than the identity or the full reversal, a transpose
/// together with a numcodecs array->array codec, sharding, an unknown codec, a
/// configuration numcodecs could not read, `scale_offset` and `cast_value` that no
/// `fixedscaleoffset` decodes exactly alike).
pub fn v3_codecs_to_v2(codecs: &[Codec], ndim: usize, data_type: &Value) -> Option<V2Codecs> {
    // The composed permutation: encoded axis i is array axis perm[i].
    let mut perm: Vec<usize> = (0..ndim).collect();
    let mut big_endian = None;
    let mut numcodecs = Vec::new();
    let mut vlen = None;
    let mut elementwise = false;
    // The data type the next codec sees, while it is known (numcodecs filters may change it).
    let mut seen_type = DataType::from_json(data_type).ok();
    // The fixedscaleoffset filters standing for scale_offset + cast_value: their stored type
    // must be little-endian (or one byte), and their `dtype` follows the array's byte order.
    let mut fixed_forms = Vec::new();
    let mut codecs = codecs.iter().peekable();
    while let Some(c) = codecs.next() {
        let id = c.name.strip_prefix(NUMCODECS_PREFIX);
        if big_endian.is_none() && [SCALE_OFFSET, CAST_VALUE].contains(&c.name.as_str()) {
            let (scale_offset, cast) = match c.name.as_str() {
                SCALE_OFFSET => (Some(c), codecs.next().filter(|n| n.name == CAST_VALUE)?),
                _ => (None, c),
            };
            let decoded = seen_type.take()?;
            let form = fixedscaleoffset_form(scale_offset, cast, &decoded)?;
            elementwise = true;
            fixed_forms.push((numcodecs.len(), decoded, form.astype.itemsize));
            numcodecs.push(json!({"id": "fixedscaleoffset", "scale": form.scale,
                "offset": form.offset, "dtype": null, "astype": v2_dtype(&form.astype, false)?}));
            seen_type = Some(form.astype);
            continue;
        }
        if id.is_some_and(|id| NUMCODECS_ARRAY_TO_ARRAY.contains(&id)) {
            seen_type = None; // it may convert: not worked out here
        }
        match (c.name.as_str(), big_endian) {
            ("transpose", None) => {
                let order = parse_order(c).ok()?;
                if !is_permutation(&order, ndim) {
                    return None;
                }
                perm = order.iter().map(|&a| perm[a]).collect();
            }
            (_, None) if id.is_some_and(|id| NUMCODECS_ARRAY_TO_ARRAY.contains(&id)) => {
                elementwise = true;
                numcodecs.push(numcodecs_config(id?, c));
            }
            ("bytes", None) => {
                big_endian = Some(match c.configuration.get("endian") {
                    None | Some(Value::Null) => false,
                    Some(Value::String(s)) if s == "little" => false,
                    Some(Value::String(s)) if s == "big" => true,
                    Some(_) => return None,
                });
            }
            (name, None) if VLEN_CODECS.contains(&name) => {
                big_endian = Some(false);
                vlen = VLEN_CODECS.into_iter().find(|&v| v == name);
                numcodecs.push(json!({ "id": name }));
            }
            (_, None) if id.is_some_and(|id| NUMCODECS_ARRAY_TO_BYTES.contains(&id)) => {
                big_endian = Some(false);
                numcodecs.push(numcodecs_config(id?, c));
            }
            (_, Some(_)) => numcodecs.push(v3_to_numcodec(c)?),
            _ => return None,
        }
    }
    let big_endian = big_endian?;
    for (at, decoded, stored_size) in fixed_forms {
        if big_endian && stored_size > 1 {
            return None; // numcodecs reads `astype` as little-endian
        }
        numcodecs[at]["dtype"] = Value::String(v2_dtype(&decoded, big_endian)?);
    }
    let order_f = if perm.iter().enumerate().all(|(i, &a)| a == i) {
        false
    } else if perm.iter().enumerate().all(|(i, &a)| a == ndim - 1 - i) && !elementwise {
        // numcodecs filters see the chunk in C order in v3 but in the array's order in
        // v2, so a transpose only goes with chains that have none.
        true
    } else {
        return None;
    };
    // zarr-python writes array->array codecs and the vlen codecs as filters, also when
    // nothing follows them.
    let filter_only = |c: &Value| {
        let id = c.get("id").and_then(Value::as_str).unwrap_or("");
        NUMCODECS_ARRAY_TO_ARRAY.contains(&id) || VLEN_CODECS.contains(&id)
    };
    let compressor = match numcodecs.last() {
        Some(last) if !filter_only(last) => numcodecs.pop(),
        _ => None,
    };
    Some(V2Codecs { big_endian, order_f, filters: numcodecs, compressor, vlen })
}

/// The name of a v3 `data_type` (a string, or the `name` of an object).
fn data_type_name(v: &Value) -> Option<&str> {
    match v {
        Value::String(s) => Some(s),
        Value::Object(m) => m.get("name")?.as_str(),
        _ => None,
    }
}

fn data_type_config<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get("configuration")?.get(key)
}

/// numpy's datetime units.
const TIME_UNITS: [&str; 13] =
    ["Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as"];

/// The v2 `dtype` and `fill_value` of a v3 array's data type, the way zarr-python 3
/// writes the same array with `zarr_format=2`: core types as before; `numpy.datetime64`
/// and `numpy.timedelta64` as `<M8[10ms]` / `<m8[s]` (NaT as the int64 minimum);
/// `fixed_length_utf32` as `<U<n>`; `null_terminated_bytes` as `|S<n>`; `string` and
/// `variable_length_bytes` as `|O` (they need the `vlen-utf8` resp. `vlen-bytes` codec,
/// `vlen`). An error says why a type has no v2 form.
pub fn v3_type_to_v2(
    data_type: &Value,
    fill: &Value,
    big_endian: bool,
    vlen: Option<&str>,
) -> Result<(String, Value), String> {
    let shown_type = shown(data_type);
    let no_form = || format!("data type {shown_type} has no Zarr v2 equivalent");
    let name = data_type_name(data_type).ok_or_else(no_form)?;
    let bad_fill = || format!("fill value {} is not valid for data type {shown_type}", shown(fill));
    let want_vlen = match name {
        "string" => Some("vlen-utf8"),
        "variable_length_bytes" => Some("vlen-bytes"),
        _ => None,
    };
    if want_vlen != vlen {
        return Err(match (want_vlen, vlen) {
            (Some(w), _) => format!("data type {name} needs the {w} codec for a v2 form"),
            (None, Some(v)) => format!("codec {v} with data type {shown_type}"),
            (None, None) => unreachable!("equal"),
        });
    }
    let order = if big_endian { '>' } else { '<' };
    if let Ok(dt) = DataType::from_json(data_type) {
        let dtype = v2_dtype(&dt, big_endian).ok_or_else(no_form)?;
        return Ok((dtype, v3_fill_to_v2(&dt, fill).map_err(|e| e.to_string())?));
    }
    match name {
        "numpy.datetime64" | "numpy.timedelta64" => {
            let unit = data_type_config(data_type, "unit").and_then(Value::as_str);
            let unit = unit.filter(|u| TIME_UNITS.contains(u)).ok_or_else(no_form)?;
            let scale = match data_type_config(data_type, "scale_factor") {
                None => 1,
                Some(v) => v.as_u64().filter(|&s| (1..1 << 31).contains(&s)).ok_or_else(no_form)?,
            };
            let kind = if name == "numpy.datetime64" { 'M' } else { 'm' };
            let scale = if scale == 1 { String::new() } else { scale.to_string() };
            let fill = match fill {
                Value::String(s) if s == "NaT" => json!(i64::MIN),
                Value::Number(n) if n.is_i64() => fill.clone(),
                _ => return Err(bad_fill()),
            };
            Ok((format!("{order}{kind}8[{scale}{unit}]"), fill))
        }
        "fixed_length_utf32" | "null_terminated_bytes" => {
            let n = data_type_config(data_type, "length_bytes")
                .and_then(Value::as_u64)
                .filter(|&n| n > 0 && n < 1 << 31)
                .ok_or_else(no_form)?;
            if !fill.is_string() {
                return Err(bad_fill());
            }
            if name == "fixed_length_utf32" {
                if n % 4 != 0 {
                    return Err(no_form());
                }
                Ok((format!("{order}U{}", n / 4), fill.clone()))
            } else {
                // Both versions write the fill value as base64.
                Ok((format!("|S{n}"), fill.clone()))
            }
        }
        "string" | "variable_length_bytes" => match fill {
            Value::String(_) => Ok(("|O".into(), fill.clone())),
            _ => Err(bad_fill()),
        },
        _ => Err(no_form()),
    }
}

/// A v3 `fill_value` as v2 JSON: numbers as numbers, `"NaN"`/`"Infinity"`/
/// `"-Infinity"` as those strings, `"0x…"` patterns converted to the number (or
/// `"NaN"`), complex as `[re, im]`, bool as bool. Floats are written as the
/// shortest decimal that reads back as the same element.
pub fn v3_fill_to_v2(data_type: &DataType, v: &Value) -> Result<Value, DataTypeError> {
    element_to_v2_json(data_type, &fill_value_bytes(data_type, v)?)
}

/// A v2 dtype string into the v3 data type and whether it is big-endian.
fn parse_dtype(v: &Value) -> Result<(DataType, bool), MetadataError> {
    let unsupported = || MetadataError::DataType(DataTypeError::Unsupported(shown(v)));
    let s = v.as_str().ok_or_else(unsupported)?;
    let mut chars = s.chars();
    let (Some(order), Some(kind)) = (chars.next(), chars.next()) else {
        return Err(unsupported());
    };
    let digits = chars.as_str();
    let size: usize = digits.parse().map_err(|_| unsupported())?;
    if digits != size.to_string() {
        return Err(unsupported()); // "+4", "04"
    }
    let name = CORE_TYPES
        .iter()
        .find(|&&(_, k, n)| k == kind && n == size)
        .map(|&(name, _, _)| name)
        .ok_or_else(unsupported)?;
    let big_endian = match order {
        '<' => false,
        '>' => size > 1,
        '|' if size == 1 => false,
        _ => return Err(unsupported()),
    };
    let data_type = DataType::from_name(name).map_err(|_| unsupported())?;
    Ok((data_type, big_endian))
}

fn is_permutation(order: &[usize], ndim: usize) -> bool {
    let mut seen = vec![false; ndim];
    order.len() == ndim && order.iter().all(|&a| a < ndim && !std::mem::replace(&mut seen[a], true))
}

fn codec(name: &str, configuration: Value) -> Codec {
    Codec {
        name: name.into(),
        configuration: match configuration {
            Value::Object(m) => m,
            _ => Map::new(),
        },
    }
}

/// Blosc's shuffle names in v3 and numbers in numcodecs.
const SHUFFLES: [(&str, i64); 3] = [("noshuffle", 0), ("shuffle", 1), ("bitshuffle", 2)];

/// An optional field of a configuration: `default` when absent, `None` when
/// present but not what `get` accepts.
fn opt<'a, T>(
    config: &'a Map<String, Value>,
    key: &str,
    get: impl Fn(&'a Value) -> Option<T>,
    default: T,
) -> Option<T> {
    match config.get(key) {
        None => Some(default),
        Some(v) => get(v),
    }
}

/// One numcodecs configuration as the v3 codec that decodes the same bytes.
fn numcodec_to_v3(cfg: &Value, data_type: &DataType) -> Result<Codec, CodecError> {
    let empty = Map::new();
    let config = cfg.as_object().unwrap_or(&empty);
    let id = config.get("id").and_then(Value::as_str).unwrap_or("");
    let bad = |field: &str| CodecError::InvalidConfiguration {
        codec: format!("numcodecs {id}"),
        reason: format!("invalid `{field}`"),
    };
    let level = |default: i64| opt(config, "level", Value::as_i64, default).ok_or(bad("level"));
    Ok(match id {
        "blosc" => {
            let cname = opt(config, "cname", Value::as_str, "lz4").ok_or(bad("cname"))?;
            let clevel = opt(config, "clevel", Value::as_u64, 5).ok_or(bad("clevel"))?;
            let blocksize = opt(config, "blocksize", Value::as_u64, 0).ok_or(bad("blocksize"))?;
            let shuffle = match opt(config, "shuffle", Value::as_i64, 1).ok_or(bad("shuffle"))? {
                // AUTOSHUFFLE: bit shuffle for 1-byte items, byte shuffle otherwise.
                -1 if data_type.itemsize == 1 => 2,
                -1 => 1,
                n => n,
            };
            let (shuffle, _) =
                SHUFFLES.iter().find(|&&(_, n)| n == shuffle).ok_or(bad("shuffle"))?;
            codec(
                "blosc",
                json!({"typesize": data_type.itemsize, "cname": cname, "clevel": clevel,
                       "shuffle": shuffle, "blocksize": blocksize}),
            )
        }
        "zstd" => {
            let checksum = opt(config, "checksum", Value::as_bool, false).ok_or(bad("checksum"))?;
            codec("zstd", json!({"level": level(0)?, "checksum": checksum}))
        }
        "gzip" => codec("gzip", json!({"level": level(1)?})),
        "zlib" => codec("numcodecs.zlib", json!({"level": level(1)?})),
        "crc32c" => match config.get("location") {
            None | Some(Value::Null) => codec("crc32c", json!({})),
            Some(Value::String(s)) if s == "end" => codec("crc32c", json!({})),
            Some(_) => return Err(CodecError::Unsupported("numcodecs crc32c location".into())),
        },
        // The rest under zarr-python 3's name for them; the decoder knows which it decodes.
        _ if !id.is_empty() => {
            let mut config = config.clone();
            config.remove("id");
            codec(&format!("{NUMCODECS_PREFIX}{id}"), Value::Object(config))
        }
        _ => return Err(CodecError::Unsupported("numcodecs codec without an id".into())),
    })
}

/// One v3 bytes->bytes codec as the numcodecs configuration zarr-python 2 writes
/// for it, or `None`.
fn v3_to_numcodec(c: &Codec) -> Option<Value> {
    let config = &c.configuration;
    let level = |default: i64| opt(config, "level", Value::as_i64, default);
    Some(match c.name.as_str() {
        "blosc" => {
            let cname = config.get("cname")?.as_str()?;
            let clevel = config.get("clevel")?.as_u64()?;
            let shuffle = config.get("shuffle")?.as_str()?;
            let (_, shuffle) = SHUFFLES.iter().find(|&&(name, _)| name == shuffle)?;
            let blocksize = opt(config, "blocksize", Value::as_u64, 0)?;
            json!({"id": "blosc", "cname": cname, "clevel": clevel, "shuffle": shuffle,
                   "blocksize": blocksize})
        }
        // No `checksum`: zarr-python 3 writing v2 leaves it out, and strict v2 readers
        // (tensorstore, numcodecs 0.12, zarrs) reject it. numcodecs' decoder checks a frame's
        // checksum whenever the frame carries one, so nothing is lost.
        "zstd" => {
            opt(config, "checksum", Value::as_bool, false)?;
            json!({"id": "zstd", "level": level(0)?})
        }
        "gzip" => json!({"id": "gzip", "level": level(1)?}),
        "numcodecs.zlib" | "zlib" => json!({"id": "zlib", "level": level(1)?}),
        "crc32c" => json!({"id": "crc32c"}),
        name => match name.strip_prefix(NUMCODECS_PREFIX) {
            // Array->array and array->bytes ones cannot come after `bytes`.
            Some(id)
                if !id.is_empty()
                    && !NUMCODECS_ARRAY_TO_ARRAY.contains(&id)
                    && !NUMCODECS_ARRAY_TO_BYTES.contains(&id) =>
            {
                numcodecs_config(id, c)
            }
            _ => return None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::codecs::tests::{check_mutations, testdata, v3_vectors, vector_meta};
    use crate::zarr::metadata::parse_codecs;

    fn v2_vectors() -> Vec<(String, V2Array)> {
        let mut out: Vec<(String, V2Array)> = std::fs::read_dir(testdata("v2"))
            .unwrap()
            .map(|e| {
                let dir = e.unwrap().path();
                let name = dir.file_name().unwrap().to_string_lossy().into_owned();
                let doc = std::fs::read(dir.join(".zarray")).unwrap();
                let a = V2Array::parse(&doc).unwrap_or_else(|e| panic!("{name}: {e}"));
                (name, a)
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// zarr-python 2 arrays (see testdata/make_v2_vectors.py): every chunk decodes
    /// to numpy's bytes through the equivalent v3 chain.
    /// Every v2 vector, truncated or with a flipped byte, errors or decodes to the
    /// right size, and never panics (moved here from the codecs' tests, which must not
    /// import this module).
    #[test]
    fn mutated_v2_vectors_never_panic() {
        let mut n = 0;
        for entry in std::fs::read_dir(testdata("v2")).unwrap() {
            let dir = entry.unwrap().path();
            let zarray = std::fs::read(dir.join(".zarray")).unwrap();
            let spec = V2Array::parse(&zarray).unwrap().chunk_spec().unwrap();
            check_mutations(&format!("v2/{}", dir.file_name().unwrap().to_string_lossy()), &spec);
            n += 1;
        }
        assert!(n >= 9, "only {n} v2 vectors");
    }

    #[test]
    fn zarr_python_2_vectors_decode() {
        let vectors = v2_vectors();
        assert_eq!(vectors.len(), 9);
        for (name, a) in &vectors {
            let dir = testdata("v2").join(name);
            let chunk = std::fs::read(dir.join("chunk")).unwrap();
            let expected = std::fs::read(dir.join("expected")).unwrap();
            let spec = a.chunk_spec().unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(spec.chunk_shape, a.chunks);
            let got = spec.decode(&chunk).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(got == expected, "{name}: decoded bytes differ");
        }
    }

    #[test]
    fn zarr_python_2_vector_fields() {
        let vectors = v2_vectors();
        let get = |n: &str| &vectors.iter().find(|(name, _)| name == n).unwrap().1;

        let a = get("int32_F_zlib");
        assert_eq!((a.shape.as_slice(), a.chunks.as_slice()), (&[12, 10][..], &[4, 5][..]));
        assert_eq!(a.data_type, DataType::from_name("int32").unwrap());
        assert!(a.order_f && !a.big_endian);
        assert_eq!(a.key_encoding(), ChunkKeyEncoding::V2 { separator: '.' });
        assert_eq!(a.fill_value, json!(42));
        let spec = a.chunk_spec().unwrap();
        assert_eq!(spec.fill_value, 42i32.to_le_bytes());
        let names: Vec<&str> = spec.codecs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["transpose", "bytes", "numcodecs.zlib"]);
        assert_eq!(spec.codecs[0].configuration["order"], json!([1, 0]));

        let a = get("float64_big_blosc_slash");
        assert!(a.big_endian && !a.order_f);
        assert_eq!(a.key_encoding(), ChunkKeyEncoding::V2 { separator: '/' });
        let spec = a.chunk_spec().unwrap();
        assert_eq!(spec.fill_value, f64::NAN.to_le_bytes());
        assert_eq!(spec.codecs[0].configuration["endian"], json!("big"));
        assert_eq!(
            Value::Object(spec.codecs[1].configuration.clone()),
            json!({"typesize": 8, "cname": "lz4", "clevel": 5, "shuffle": "shuffle", "blocksize": 0})
        );

        let spec = get("uint16_zlib_filter_zstd_checksum").chunk_spec().unwrap();
        let names: Vec<&str> = spec.codecs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["bytes", "numcodecs.zlib", "zstd"]);
        assert_eq!(spec.codecs[2].configuration["checksum"], json!(true));

        let a = get("complex128_F_3d");
        let spec = a.chunk_spec().unwrap();
        assert_eq!(spec.codecs[0].configuration["order"], json!([2, 1, 0]));
        assert_eq!(spec.codecs.len(), 2);
        assert_eq!(spec.fill_value, [1.0f64.to_le_bytes(), 2.0f64.to_le_bytes()].concat());

        let spec = get("bool_gzip").chunk_spec().unwrap();
        assert_eq!(spec.fill_value, [1]);
        let spec = get("float16_blosc_zstd_bitshuffle").chunk_spec().unwrap();
        assert_eq!(spec.fill_value, [0, 0]); // null
        assert_eq!(spec.codecs[1].configuration["shuffle"], json!("bitshuffle"));
        let spec = get("uint8_blosc_autoshuffle").chunk_spec().unwrap();
        assert_eq!(spec.codecs[1].configuration["shuffle"], json!("bitshuffle"));
        let spec = get("int16_big_gzip_crc32c").chunk_spec().unwrap();
        let names: Vec<&str> = spec.codecs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["bytes", "gzip", "crc32c"]);
        assert_eq!(spec.fill_value, (-3i16).to_le_bytes());
        let spec = get("float32_F_big_crc32c").chunk_spec().unwrap();
        assert_eq!(spec.fill_value, f32::NEG_INFINITY.to_le_bytes());
    }

    /// v2 -> v3 -> v2 reproduces what zarr-python 2 wrote: dtype, order, filters,
    /// compressor and fill value.
    #[test]
    fn zarr_python_2_documents_round_trip() {
        for (name, a) in v2_vectors() {
            let spec = a.chunk_spec().unwrap();
            let back = v3_codecs_to_v2(&spec.codecs, a.shape.len(), &json!(a.data_type.name))
                .unwrap_or_else(|| panic!("{name}: not expressible"));
            let doc = &a.json;
            assert_eq!(
                v2_dtype(&a.data_type, back.big_endian).map(Value::from).as_ref(),
                doc.get("dtype"),
                "{name}"
            );
            let order = if back.order_f { "F" } else { "C" };
            assert_eq!(Some(&json!(order)), doc.get("order"), "{name}");
            let filters = if back.filters.is_empty() {
                Value::Null
            } else {
                Value::Array(back.filters.clone())
            };
            assert_eq!(Some(&filters), doc.get("filters"), "{name}");
            let mut compressor = back.compressor.clone().unwrap_or(Value::Null);
            if name == "uint8_blosc_autoshuffle" {
                // AUTOSHUFFLE is resolved to what it means for the item size.
                assert_eq!(compressor["shuffle"], json!(2));
                compressor["shuffle"] = json!(-1);
            }
            if name == "uint16_zlib_filter_zstd_checksum" {
                // numcodecs writes `checksum: true`; ours leaves it out (numcodecs 0.12 and
                // tensorstore refuse the key) and still decodes the checksummed frames.
                assert_eq!(compressor.get("checksum"), None);
                compressor["checksum"] = json!(true);
            }
            assert_eq!(Some(&compressor), doc.get("compressor"), "{name}");
            if !a.fill_value.is_null() {
                assert_eq!(
                    v3_fill_to_v2(&a.data_type, &a.fill_value).unwrap(),
                    a.fill_value,
                    "{name}"
                );
            }
        }
    }

    /// A v2 document written from a v3 array's dtype, chain and fill value.
    fn zarray_for(meta: &crate::zarr::metadata::ArrayMetadata) -> Option<Vec<u8>> {
        let dt = DataType::from_json(&meta.data_type).unwrap();
        let c = v3_codecs_to_v2(&meta.codecs, meta.shape.len(), &meta.data_type)?;
        let doc = json!({
            "zarr_format": 2,
            "shape": meta.shape,
            "chunks": meta.chunk_shape(),
            "dtype": v2_dtype(&dt, c.big_endian)?,
            "compressor": c.compressor,
            "fill_value": v3_fill_to_v2(&dt, &meta.json["fill_value"]).unwrap(),
            "order": if c.order_f { "F" } else { "C" },
            "filters": if c.filters.is_empty() { Value::Null } else { Value::Array(c.filters) },
        });
        Some(serde_json::to_vec(&doc).unwrap())
    }

    /// v3 chain -> v2 -> `chunk_spec` decodes the zarr-python 3 vectors' chunks
    /// to the same bytes. Sharded chains are not expressible.
    #[test]
    fn v3_vectors_round_trip_through_v2() {
        let mut expressible = 0;
        for name in v3_vectors() {
            let meta = vector_meta(&name);
            let Some(zarray) = zarray_for(&meta) else {
                // Sharding, or a transpose other than the full reversal.
                assert!(
                    meta.codecs.iter().any(|c| c.name == "sharding_indexed")
                        || name == "int32_transpose_3d",
                    "{name}: should be expressible in v2"
                );
                continue;
            };
            expressible += 1;
            let a = V2Array::parse(&zarray).unwrap();
            let v3 = ChunkSpec::from_v3(&meta).unwrap();
            let v2 = a.chunk_spec().unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(v2.fill_value, v3.fill_value, "{name}");
            let dir = testdata(&name);
            let chunk = std::fs::read(dir.join("chunk")).unwrap();
            let expected = std::fs::read(dir.join("expected")).unwrap();
            assert!(v2.decode(&chunk).unwrap() == expected, "{name}");
        }
        assert_eq!(expressible, 11);
    }

    /// scale_offset + cast_value are written as numcodecs' fixedscaleoffset exactly where
    /// that decodes alike, and then the stored chunk decodes through the v2 chain to what
    /// zarr-python 3 read; the others (a NaN sentinel, float32 arithmetic that rounds, integer
    /// arrays, float storage) are not expressible, so the v2 view decodes them.
    #[test]
    fn cast_value_vectors_as_fixedscaleoffset() {
        let mut expressible = Vec::new();
        for name in crate::zarr::codecs::tests::vectors_in("cast_value") {
            let mut meta = vector_meta(&name);
            let sharded = meta.codecs[0].name == "sharding_indexed";
            if sharded {
                // The v2 view works on the unsharded view: inner chunks, inner chain.
                meta.codecs =
                    parse_codecs(&meta.codecs[0].configuration["codecs"], "codecs").unwrap();
            }
            let Some(zarray) = zarray_for(&meta) else { continue };
            expressible.push(name.trim_start_matches("cast_value/").to_string());
            let a = V2Array::parse(&zarray).unwrap();
            let filters = a.json["filters"].as_array().unwrap();
            assert_eq!(filters[0]["id"], "fixedscaleoffset", "{name}");
            assert_eq!(filters[0]["dtype"], a.json["dtype"], "{name}");
            if !sharded {
                let chunk = std::fs::read(testdata(&name).join("chunk")).unwrap();
                let expected = std::fs::read(testdata(&name).join("expected")).unwrap();
                assert!(a.chunk_spec().unwrap().decode(&chunk).unwrap() == expected, "{name}");
            }
        }
        let mut want: Vec<String> = ["f2_u1", "f8_i2_sharded", "f8_i2_wrap", "f8_i4_cast_only"]
            .into_iter()
            .map(String::from)
            .collect();
        for r in
            ["nearest-even", "towards-zero", "towards-positive", "towards-negative", "nearest-away"]
        {
            want.push(format!("f8_i2_{r}"));
            want.push(format!("f4_u1_{r}_clamp"));
        }
        want.sort();
        assert_eq!(expressible, want);
    }

    /// The fixedscaleoffset standing for scale_offset + cast_value: numcodecs' fields in its
    /// order, the parameters as values of the array's type, the dtype in the array's byte
    /// order; a multi-byte stored type must be little-endian.
    #[test]
    fn scale_offset_cast_value_to_v2() {
        let chain = |so: Value, cast: Value, bytes: Value| {
            codecs(json!([{"name": "scale_offset", "configuration": so},
                          {"name": "cast_value", "configuration": cast}, bytes, "zstd"]))
        };
        let little = json!({"name": "bytes", "configuration": {"endian": "little"}});
        let big = json!({"name": "bytes", "configuration": {"endian": "big"}});
        let c = v3_codecs_to_v2(
            &chain(
                json!({"scale": 4, "offset": 0.1}),
                json!({"data_type": "int16"}),
                little.clone(),
            ),
            1,
            &json!("float32"),
        )
        .unwrap();
        assert_eq!(
            serde_json::to_string(&c.filters).unwrap(),
            format!(
                r#"[{{"id":"fixedscaleoffset","scale":4.0,"offset":{},"dtype":"<f4","astype":"<i2"}}]"#,
                f64::from(0.1f32)
            )
        );
        let one_byte = chain(json!({"scale": 4}), json!({"data_type": "uint8"}), big.clone());
        let c = v3_codecs_to_v2(&one_byte, 1, &json!("float64")).unwrap();
        assert_eq!(c.filters[0]["dtype"], ">f8");
        assert_eq!(c.filters[0]["astype"], "|u1");
        let two_bytes = chain(json!({"scale": 4}), json!({"data_type": "int16"}), big);
        assert_eq!(v3_codecs_to_v2(&two_bytes, 1, &json!("float64")), None);
        // scale_offset alone, or with something between it and cast_value: decoded instead.
        let alone =
            codecs(json!([{"name": "scale_offset", "configuration": {"scale": 2}}, little]));
        assert_eq!(v3_codecs_to_v2(&alone, 1, &json!("float64")), None);
        // After a numcodecs filter that may convert, the type is not known.
        let after = codecs(json!([
            {"name": "numcodecs.astype", "configuration": {"encode_dtype": "<f4", "decode_dtype": "<f8"}},
            {"name": "cast_value", "configuration": {"data_type": "int16"}}, little]));
        assert_eq!(v3_codecs_to_v2(&after, 1, &json!("float64")), None);
    }

    fn codecs(v: Value) -> Vec<Codec> {
        parse_codecs(&v, "codecs").unwrap()
    }

    fn t(order: &[usize]) -> Value {
        json!({"name": "transpose", "configuration": {"order": order}})
    }

    #[test]
    fn transposes_to_order() {
        let le = json!({"name": "bytes", "configuration": {"endian": "little"}});
        let order_f =
            |v: Value, ndim| v3_codecs_to_v2(&codecs(v), ndim, &json!("int32")).map(|c| c.order_f);
        assert_eq!(order_f(json!([le]), 2), Some(false));
        assert_eq!(order_f(json!([t(&[0, 1]), le]), 2), Some(false));
        assert_eq!(order_f(json!([t(&[1, 0]), le]), 2), Some(true));
        assert_eq!(order_f(json!([t(&[2, 1, 0]), le]), 3), Some(true));
        assert_eq!(order_f(json!([t(&[1, 0]), t(&[1, 0]), le]), 2), Some(false));
        // [1,2,0] then [2,0,1] composes to the identity; [1,2,0] twice does not.
        assert_eq!(order_f(json!([t(&[1, 2, 0]), t(&[2, 0, 1]), le]), 3), Some(false));
        assert_eq!(order_f(json!([t(&[1, 2, 0]), t(&[1, 2, 0]), le]), 3), None);
        assert_eq!(order_f(json!([t(&[1, 0, 2]), le]), 3), None);
        assert_eq!(order_f(json!([t(&[0]), le]), 1), Some(false));
        assert_eq!(order_f(json!(["bytes"]), 0), Some(false));
        // Not a permutation of the rank.
        assert_eq!(order_f(json!([t(&[1, 0]), le]), 3), None);
        assert_eq!(order_f(json!([t(&[0, 0]), le]), 2), None);
        assert_eq!(order_f(json!([{"name": "transpose"}, le]), 2), None);
    }

    #[test]
    fn codecs_to_v2() {
        let c = v3_codecs_to_v2(
            &codecs(json!([
                {"name": "bytes", "configuration": {"endian": "big"}},
                {"name": "numcodecs.zlib", "configuration": {"level": 1}},
                {"name": "gzip", "configuration": {"level": 5}},
                "crc32c",
                {"name": "zstd", "configuration": {"level": 3, "checksum": false}},
                {"name": "blosc", "configuration": {"typesize": 4, "cname": "lz4", "clevel": 5,
                    "shuffle": "noshuffle", "blocksize": 0}},
            ])),
            1,
            &json!("int32"),
        )
        .unwrap();
        assert!(c.big_endian && !c.order_f);
        assert_eq!(
            c.filters,
            [
                json!({"id": "zlib", "level": 1}),
                json!({"id": "gzip", "level": 5}),
                json!({"id": "crc32c"}),
                json!({"id": "zstd", "level": 3}),
            ]
        );
        assert_eq!(
            c.compressor,
            Some(json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 0, "blocksize": 0}))
        );
        // Key order matches numcodecs' get_config (the document is written as is).
        let keys: Vec<&String> =
            c.compressor.as_ref().unwrap().as_object().unwrap().keys().collect();
        assert_eq!(keys, ["id", "cname", "clevel", "shuffle", "blocksize"]);

        let plain = v3_codecs_to_v2(&codecs(json!(["bytes"])), 1, &json!("int32")).unwrap();
        assert_eq!(
            plain,
            V2Codecs {
                big_endian: false,
                order_f: false,
                filters: vec![],
                compressor: None,
                vlen: None
            }
        );
        // Defaults for optional settings.
        let d =
            v3_codecs_to_v2(&codecs(json!(["bytes", "zstd", "gzip", "zlib"])), 1, &json!("int32"))
                .unwrap();
        assert_eq!(
            d.filters,
            [json!({"id": "zstd", "level": 0}), json!({"id": "gzip", "level": 1})]
        );
        assert_eq!(d.compressor, Some(json!({"id": "zlib", "level": 1})));

        for bad in [
            json!([]),
            json!(["zstd", "bytes"]),
            json!(["bytes", "bytes"]),
            json!(["bytes", t(&[0])]),
            json!(["bytes", "lz4"]),
            json!(["bytes", {"name": "zstd", "configuration": {"level": "high"}}]),
            json!(["bytes", {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "maybe"}}]),
            json!(["bytes", {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5}}]),
            json!([{"name": "bytes", "configuration": {"endian": "middle"}}]),
            json!([{"name": "sharding_indexed", "configuration": {"chunk_shape": [1],
                "codecs": ["bytes"], "index_codecs": ["bytes"]}}]),
            json!(["transpose-ish", "bytes"]),
        ] {
            assert_eq!(v3_codecs_to_v2(&codecs(bad.clone()), 1, &json!("int32")), None, "{bad}");
        }
    }

    #[test]
    fn dtypes() {
        // (dtype, v3 name, big-endian, the spelling v2_dtype writes)
        for (s, name, big, canonical) in [
            ("<i4", "int32", false, true),
            (">i4", "int32", true, true),
            ("|u1", "uint8", false, true),
            ("<u1", "uint8", false, false),
            (">u1", "uint8", false, false),
            ("|b1", "bool", false, true),
            ("|i1", "int8", false, true),
            (">f8", "float64", true, true),
            ("<f2", "float16", false, true),
            ("<c16", "complex128", false, true),
            (">c8", "complex64", true, true),
            ("<u8", "uint64", false, true),
        ] {
            let (dt, b) = parse_dtype(&json!(s)).unwrap();
            assert_eq!((dt.name.as_str(), b), (name, big), "{s}");
            assert_eq!(v2_dtype(&dt, big).as_deref() == Some(s), canonical, "{s}");
        }
        for bad in [
            json!("|O"),
            json!("<U10"),
            json!("|S12"),
            json!("<M8[ns]"),
            json!("<m8[s]"),
            json!("|V8"),
            json!("<i3"),
            json!("|i4"),
            json!("=i4"),
            json!("i4"),
            json!("<f"),
            json!("<f16"),
            json!("<i+4"),
            json!("<i04"),
            json!(""),
            json!([["r", "|u1"], ["g", "|u1"]]),
            json!(4),
        ] {
            let err = parse_dtype(&bad).unwrap_err().to_string();
            assert!(err.contains(&bad.to_string()), "{err}");
        }
        for &(name, _, _) in &CORE_TYPES {
            let dt = DataType::from_name(name).unwrap();
            for big in [false, true] {
                let s = v2_dtype(&dt, big).unwrap();
                assert_eq!(parse_dtype(&json!(s)).unwrap(), (dt.clone(), big && dt.itemsize > 1));
            }
        }
        let odd = DataType { itemsize: 16, name: "string".into() };
        assert_eq!(v2_dtype(&odd, false), None);
    }

    #[test]
    fn fills_to_v2() {
        let f = |name: &str, v: Value| v3_fill_to_v2(&DataType::from_name(name).unwrap(), &v);
        assert_eq!(f("int32", json!(-7)).unwrap(), json!(-7));
        assert_eq!(f("bool", json!(false)).unwrap(), json!(false));
        assert_eq!(f("float32", json!("0x7fc00000")).unwrap(), json!("NaN"));
        assert_eq!(f("float64", json!("0x3ff0000000000000")).unwrap(), json!(1.0));
        assert_eq!(f("float32", json!(0.1)).unwrap(), json!(0.1));
        assert_eq!(f("float16", json!("-Infinity")).unwrap(), json!("-Infinity"));
        assert_eq!(
            f("complex128", json!([1.5, "0x7ff0000000000000"])).unwrap(),
            json!([1.5, "Infinity"])
        );
        assert!(f("int8", json!(1000)).is_err());
        assert!(f("float32", json!("nope")).is_err());
    }

    fn doc(edit: impl FnOnce(&mut Map<String, Value>)) -> Vec<u8> {
        let mut d = json!({"zarr_format": 2, "shape": [10, 8], "chunks": [5, 4], "dtype": "<i2",
            "compressor": null, "fill_value": 0, "order": "C", "filters": null});
        edit(d.as_object_mut().unwrap());
        serde_json::to_vec(&d).unwrap()
    }

    #[test]
    fn parse_defaults_and_errors() {
        // Optional and defaulted keys.
        let a = V2Array::parse(&doc(|d| {
            for k in ["compressor", "fill_value", "order", "filters"] {
                d.remove(k);
            }
        }))
        .unwrap();
        assert!(!a.order_f);
        assert_eq!(a.separator, '.');
        assert_eq!(a.fill_value, Value::Null);
        assert_eq!(a.chunk_spec().unwrap().codecs.len(), 1);
        // Order F on a 1-d array needs no transpose.
        let a = V2Array::parse(&doc(|d| {
            d.insert("shape".into(), json!([10]));
            d.insert("chunks".into(), json!([5]));
            d.insert("order".into(), json!("F"));
        }))
        .unwrap();
        assert!(a.order_f);
        assert_eq!(a.chunk_spec().unwrap().codecs.len(), 1);

        let bad: Vec<Vec<u8>> = vec![
            b"{".to_vec(),
            b"[]".to_vec(),
            doc(|d| {
                d.insert("zarr_format".into(), json!(3));
            }),
            doc(|d| {
                d.remove("shape");
            }),
            doc(|d| {
                d.remove("chunks");
            }),
            doc(|d| {
                d.remove("dtype");
            }),
            doc(|d| {
                d.insert("chunks".into(), json!([5, 0]));
            }),
            doc(|d| {
                d.insert("chunks".into(), json!([5]));
            }),
            doc(|d| {
                d.insert("shape".into(), json!([-1, 8]));
            }),
            doc(|d| {
                d.insert("order".into(), json!("K"));
            }),
            doc(|d| {
                d.insert("dimension_separator".into(), json!("-"));
            }),
            doc(|d| {
                d.insert("compressor".into(), json!({"level": 1}));
            }),
            doc(|d| {
                d.insert("compressor".into(), json!("zlib"));
            }),
            doc(|d| {
                d.insert("filters".into(), json!({"id": "zlib"}));
            }),
            doc(|d| {
                d.insert("filters".into(), json!([{"id": 3}]));
            }),
            doc(|d| {
                d.insert("dtype".into(), json!("|O"));
            }),
        ];
        for b in bad {
            assert!(V2Array::parse(&b).is_err(), "{}", String::from_utf8_lossy(&b));
        }
    }

    /// v2 arrays with numcodecs codecs decode through the same decoders: the numcodecs
    /// vectors' chunks are also what zarr-python 2 stores for these filters and compressors.
    #[test]
    fn v2_numcodecs_decode() {
        for (name, dtype, filters, compressor) in [
            ("bz2", "<f8", json!(null), json!({"id": "bz2", "level": 5})),
            ("lzma_alone", "<i4", json!(null), json!({"id": "lzma", "format": 2, "preset": 1})),
            (
                "shuffle_zstd",
                "<f8",
                json!([{"id": "shuffle", "elementsize": 8}]),
                json!({"id": "zstd", "level": 2}),
            ),
            (
                "quantize_gzip",
                "<f8",
                json!([{"id": "quantize", "digits": 2, "dtype": "<f8"}]),
                json!({"id": "gzip", "level": 1}),
            ),
            ("lz4_big_endian", ">u8", json!(null), json!({"id": "lz4", "acceleration": 1})),
            (
                "fixedscaleoffset_f8_i4",
                "<f8",
                json!([{"id": "fixedscaleoffset", "scale": 100, "offset": -50, "dtype": "<f8",
                    "astype": "<i4"}]),
                json!(null),
            ),
            (
                "fixedscaleoffset_i4_delta",
                "<i4",
                json!([{"id": "fixedscaleoffset", "scale": 0.001, "offset": 7, "dtype": "<i4",
                    "astype": "<i4"}, {"id": "delta", "dtype": "<i4", "astype": "<i4"}]),
                json!(null),
            ),
            ("packbits", "|b1", json!([{"id": "packbits"}]), json!(null)),
            ("fletcher32", "<i8", json!(null), json!({"id": "fletcher32"})),
            (
                "fletcher32_zstd",
                "<f4",
                json!([{"id": "zstd", "level": 1}]),
                json!({"id": "fletcher32"}),
            ),
        ] {
            let doc = json!({"zarr_format": 2, "shape": [12, 10], "chunks": [4, 5], "dtype": dtype,
                "compressor": compressor, "fill_value": 0, "order": "C", "filters": filters});
            let a = V2Array::parse(&serde_json::to_vec(&doc).unwrap()).unwrap();
            let spec = a.chunk_spec().unwrap_or_else(|e| panic!("{name}: {e}"));
            let dir = testdata("numcodecs").join(name);
            let chunk = std::fs::read(dir.join("chunk")).unwrap();
            let got = spec.decode(&chunk).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(got == std::fs::read(dir.join("expected")).unwrap(), "{name}");
        }
    }

    #[test]
    fn chunk_spec_errors() {
        let spec =
            |edit: fn(&mut Map<String, Value>)| V2Array::parse(&doc(edit)).unwrap().chunk_spec();
        // packbits packs bools; the test document is `<i2`.
        assert!(matches!(
            spec(|d| {
                d.insert("filters".into(), json!([{"id": "packbits"}]));
            }),
            Err(CodecError::InvalidChain(_))
        ));
        match spec(|d| {
            d.insert("compressor".into(), json!({"id": "jenkins_lookup3"}));
        }) {
            Err(CodecError::Unsupported(s)) => assert_eq!(s, "numcodecs.jenkins_lookup3"),
            other => panic!("{other:?}"),
        }
        match spec(|d| {
            d.insert("dtype".into(), json!(">i2"));
            d.insert(
                "filters".into(),
                json!([{"id": "fixedscaleoffset", "scale": 1,
                "offset": 0, "dtype": ">i2"}]),
            );
        }) {
            Err(CodecError::Unsupported(s)) => assert!(s.contains("big-endian"), "{s}"),
            other => panic!("{other:?}"),
        }
        for c in [
            json!({"id": "blosc", "shuffle": 7}),
            json!({"id": "blosc", "cname": 5}),
            json!({"id": "blosc", "clevel": -1}),
            json!({"id": "zstd", "level": "x"}),
            json!({"id": "zstd", "checksum": 1}),
            json!({"id": "gzip", "level": 1.5}),
        ] {
            let a = V2Array::parse(&doc(|d| {
                d.insert("compressor".into(), c.clone());
            }))
            .unwrap();
            assert!(matches!(a.chunk_spec(), Err(CodecError::InvalidConfiguration { .. })), "{c}");
        }
        assert!(matches!(
            spec(|d| {
                d.insert("compressor".into(), json!({"id": "crc32c", "location": "start"}));
            }),
            Err(CodecError::Unsupported(_))
        ));
        assert!(matches!(
            spec(|d| {
                d.insert("fill_value".into(), json!(1e9));
            }),
            Err(CodecError::DataType(DataTypeError::InvalidFillValue { .. }))
        ));
        assert!(matches!(
            spec(|d| {
                d.insert("fill_value".into(), json!("NaN"));
            }),
            Err(CodecError::DataType(DataTypeError::InvalidFillValue { .. }))
        ));
        // Defaults of numcodecs' constructors for missing settings.
        let a = V2Array::parse(&doc(|d| {
            d.insert("compressor".into(), json!({"id": "blosc"}));
        }))
        .unwrap();
        assert_eq!(
            Value::Object(a.chunk_spec().unwrap().codecs[1].configuration.clone()),
            json!({"typesize": 2, "cname": "lz4", "clevel": 5, "shuffle": "shuffle", "blocksize": 0})
        );
        // Too big a chunk is refused by the check.
        let a = V2Array::parse(&doc(|d| {
            d.insert("chunks".into(), json!([1u64 << 32, 1u64 << 32]));
        }))
        .unwrap();
        assert!(matches!(a.chunk_spec(), Err(CodecError::TooLarge { .. })));
    }
}
