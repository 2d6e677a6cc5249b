//! `--view v2`: Zarr v3 groups and arrays shown as Zarr v2 (`.zgroup`, `.zarray`, `.zattrs`,
//! and `.zmetadata` for groups with inline consolidated metadata), over the unsharded view.
//! Codec chains v2 can write keep their stored chunks; other chains are served decoded.
//! Arrays v2 cannot describe (e.g. a data type without a v2 dtype) are left out with a log
//! line. v2 nodes pass through as they are (in `v2-decoded`: decoded, as `decoded` shows them).

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::decoded::pretty;
use super::ome::{group_attributes, OmeInV2};
use super::retile::Retiling;
use super::{ArrayShow, ChunkShow, DirDocs, DirShow, Files, KeyMap, Presenter, StoredChunks};
use crate::zarr::chunk_grid::RectilinearGrid;
use crate::zarr::chunk_key::ChunkKeyEncoding;
use crate::zarr::chunk_specs::ChunkSpecs;
use crate::zarr::chunk_tree::grid;
use crate::zarr::codecs::BytesChain;
use crate::zarr::metadata::{parse_node, parse_zarr_json, ArrayMetadata, NodeMetadata};
use crate::zarr::v2::{v3_codecs_to_v2, v3_type_to_v2};

#[derive(Default)]
pub struct V2Presenter {
    pub ome: OmeInV2,
}

/// `--view v2-decoded`: the v2 view with every chunk decoded (no compressor or filters,
/// little-endian, order C), so a v2 reader that implements no codec reads every fixed-size
/// array. Variable-length arrays keep only their `vlen-*` filter.
#[derive(Default)]
pub struct V2DecodedPresenter {
    pub ome: OmeInV2,
}

const HIDDEN: [&str; 1] = ["zarr.json"];

impl Presenter for V2Presenter {
    fn present(&self, dir: &str, docs: &DirDocs) -> DirShow {
        present(dir, docs, false, self.ome)
    }

    fn may_hide(&self) -> bool {
        true
    }
}

impl Presenter for V2DecodedPresenter {
    fn present(&self, dir: &str, docs: &DirDocs) -> DirShow {
        if docs.zarr_json.is_none() {
            // v2 nodes are already v2: decoded as the decoded view decodes them.
            return super::decoded::DecodedPresenter.present(dir, docs);
        }
        present(dir, docs, true, self.ome)
    }

    fn may_hide(&self) -> bool {
        true
    }
}

fn present(dir: &str, docs: &DirDocs, decoded: bool, ome: OmeInV2) -> DirShow {
    let Some(doc) = &docs.zarr_json else { return DirShow::PassThrough };
    match parse_zarr_json(doc) {
        Ok(NodeMetadata::Array(meta)) => match v2_array_as(&meta, decoded) {
            Ok(array) => {
                if let Some(why) = &array.not_decoded {
                    tracing::info!(array = ?dir, reason = %why, "array shown with its codecs");
                }
                DirShow::Array(Arc::new(ArrayShow {
                    files: Files {
                        generated: vec![
                            (".zarray".into(), pretty(array.zarray)),
                            (".zattrs".into(), pretty(array.zattrs)),
                        ],
                        hidden: HIDDEN.to_vec(),
                    },
                    chunks: array.chunks,
                }))
            }
            Err(why) => {
                tracing::warn!(array = ?dir, reason = %why, "array left out of the v2 view");
                DirShow::Hidden
            }
        },
        Ok(NodeMetadata::Group(group)) => DirShow::Group(Files {
            generated: group_files(dir, &group.json, decoded, ome),
            hidden: HIDDEN.to_vec(),
        }),
        Err(_) => DirShow::PassThrough, // the view below already logged it
    }
}

/// One v3 array in v2 form.
#[derive(Debug)]
pub struct V2Form {
    pub zarray: Map<String, Value>,
    pub zattrs: Map<String, Value>,
    /// The stored chunks (decoded when v2 cannot express the codecs, or in the v2-decoded
    /// view; unwrapped of a trailing crc32c, or in the v2-decoded view of everything after a
    /// vlen codec), or tiles of a rectilinear array.
    pub chunks: ChunkShow,
    /// The chain ends in `crc32c`, which the v2 form leaves out: chunks are served
    /// checked and without their 4 checksum bytes.
    pub strip_crc32c: bool,
    /// v2-decoded only: why this array is shown with its codecs after all.
    pub not_decoded: Option<String>,
}

/// True for a numcodecs `crc32c` configuration whose checksum trails the data.
fn is_trailing_crc32c(numcodec: &Value) -> bool {
    numcodec.get("id").and_then(Value::as_str) == Some("crc32c")
        && numcodec.get("location").is_none_or(|l| l.is_null() || l == "end")
}

/// The v2 form of a v3 array (as the unsharded view shows it), or why there is none.
pub fn v2_array(meta: &ArrayMetadata) -> Result<V2Form, String> {
    v2_array_as(meta, false)
}

/// How a v3 array's chunks can be decoded for the v2-decoded view: its own chain, with a
/// core stand-in for data types the decoder does not know (datetimes are int64; fixed-size
/// strings get a trailing axis of their bytes or UTF-32 code units).
pub(crate) fn decode_spec(meta: &ArrayMetadata) -> Result<ChunkSpecs, String> {
    let stand_in = |ty: &str, extra: Option<u64>| {
        let mut m = meta.clone();
        m.data_type = json!(ty);
        let zero = if ty == "int64" { meta.json.get("fill_value").cloned() } else { None };
        let fill = match zero {
            Some(Value::String(s)) if s == "NaT" => json!(i64::MIN),
            Some(v) => v,
            None => json!(0),
        };
        m.json.insert("fill_value".into(), fill);
        if extra.is_some() {
            // The extra axis is only right where nothing reorders or regroups elements.
            if m.codecs.iter().any(|c| matches!(c.name.as_str(), "transpose" | "sharding_indexed"))
            {
                return Err("fixed-size strings decode only without transpose or sharding".into());
            }
        }
        let specs = ChunkSpecs::from_v3(&m).map_err(|e| e.to_string())?;
        match extra {
            Some(n) => specs.with_trailing_axis(n).map_err(|e| e.to_string()),
            None => Ok(specs),
        }
    };
    let name = match &meta.data_type {
        Value::String(s) => s.as_str(),
        v => v.get("name").and_then(Value::as_str).unwrap_or(""),
    };
    let length = || meta.data_type.get("configuration")?.get("length_bytes")?.as_u64();
    match name {
        "numpy.datetime64" | "numpy.timedelta64" => stand_in("int64", None),
        "fixed_length_utf32" => match length() {
            Some(n) if n % 4 == 0 && n > 0 => stand_in("uint32", Some(n / 4)),
            _ => Err("bad length_bytes".into()),
        },
        "null_terminated_bytes" => match length() {
            Some(n) if n > 0 => stand_in("uint8", Some(n)),
            _ => Err("bad length_bytes".into()),
        },
        _ => ChunkSpecs::from_v3(meta).map_err(|e| e.to_string()),
    }
}

/// The parts of a `.zarray` that say how its chunks are encoded.
struct V2Encoding {
    dtype: String,
    fill_value: Value,
    compressor: Value,
    filters: Value,
    order: &'static str,
}

/// The `.zarray` of a v3 array with chunks of `chunks` encoded as `enc`.
fn zarray_doc(meta: &ArrayMetadata, chunks: &[u64], enc: V2Encoding) -> Map<String, Value> {
    let mut zarray = Map::new();
    zarray.insert("zarr_format".into(), json!(2));
    zarray.insert("shape".into(), json!(meta.shape));
    zarray.insert("chunks".into(), json!(chunks));
    zarray.insert("dtype".into(), Value::String(enc.dtype));
    zarray.insert("compressor".into(), enc.compressor);
    zarray.insert("fill_value".into(), enc.fill_value);
    zarray.insert("order".into(), Value::String(enc.order.into()));
    zarray.insert("filters".into(), enc.filters);
    let separator = meta.key_encoding.separator().to_string();
    zarray.insert("dimension_separator".into(), Value::String(separator));
    zarray
}

/// The v2 form of an array on a truly rectilinear grid, in both v2 views: tiles of the regular grid
/// of its longest chunks (see `views::presented::mapping::retile`), each assembled decoded and
/// stored uncompressed.
fn retiled_v2_array(meta: &ArrayMetadata, source: &RectilinearGrid) -> Result<V2Form, String> {
    let specs = decode_spec(meta).map_err(|e| {
        format!("rectilinear chunks that cannot be decoded cannot be re-tiled: {e}")
    })?;
    let fill = meta.json.get("fill_value").cloned().unwrap_or(Value::Null);
    let (dtype, fill_value) = v3_type_to_v2(&meta.data_type, &fill, false, None)?;
    let shown = ChunkKeyEncoding::V2 { separator: meta.key_encoding.separator() };
    let retiling = Retiling::new(&meta.shape, source, specs, meta.key_encoding, shown);
    let enc =
        V2Encoding { dtype, fill_value, compressor: Value::Null, filters: Value::Null, order: "C" };
    Ok(V2Form {
        zarray: zarray_doc(meta, &retiling.tile, enc),
        zattrs: array_attributes(&meta.json),
        chunks: ChunkShow::Retiled(Arc::new(retiling)),
        strip_crc32c: false,
        not_decoded: None,
    })
}

/// The v2 form of a v3 array in the v2 view, or (`decoded`) in the v2-decoded view.
pub fn v2_array_as(meta: &ArrayMetadata, decoded: bool) -> Result<V2Form, String> {
    if let Some(source) = meta.chunk_grid.truly_rectilinear() {
        return retiled_v2_array(meta, source);
    }
    let chunks = meta
        .chunk_shape()
        .ok_or_else(|| format!("chunk grid {} has no v2 form", meta.chunk_grid.name()))?;
    let fill = meta.json.get("fill_value").cloned().unwrap_or(Value::Null);
    let mut expressed = v3_codecs_to_v2(&meta.codecs, meta.shape.len(), &meta.data_type);
    let mut strip_crc32c = false;
    if let Some(c) = &mut expressed {
        // numcodecs registers `crc32c` only when an optional package is installed, so a
        // trailing checksum is checked by the daemon and cut off instead.
        if c.compressor.as_ref().is_some_and(is_trailing_crc32c) {
            c.compressor = c.filters.pop();
            strip_crc32c = true;
        }
        if c.filters.iter().any(|f| f.get("id").and_then(Value::as_str) == Some("crc32c")) {
            expressed = None; // a checksum inside the chain: serve it decoded
            strip_crc32c = false;
        }
    }
    let mut unwrap = strip_crc32c.then(|| BytesChain::new(&[crc32c_codec()]).expect("known"));
    let mut not_decoded = None;
    let mut decode_all = None;
    if decoded {
        match expressed.as_mut().and_then(|c| c.vlen.map(|v| (c, v))) {
            Some((c, vlen)) => {
                // Keep only the vlen filter: undo what follows the vlen codec.
                let at = meta.codecs.iter().position(|x| x.name == vlen).unwrap_or(0);
                match BytesChain::new(&meta.codecs[at + 1..]) {
                    Ok(chain) => {
                        c.filters = vec![json!({ "id": vlen })];
                        c.compressor = None;
                        unwrap = Some(chain);
                    }
                    Err(e) => not_decoded = Some(format!("cannot decode its codecs: {e}")),
                }
            }
            None => match decode_spec(meta) {
                Ok(spec) => decode_all = Some(spec),
                Err(e) => not_decoded = Some(format!("cannot decode its codecs: {e}")),
            },
        }
    }
    let (enc, decode) = match (decode_all, expressed) {
        (None, Some(c)) => {
            let (dtype, fill_value) = v3_type_to_v2(&meta.data_type, &fill, c.big_endian, c.vlen)?;
            let filters = if c.filters.is_empty() { Value::Null } else { Value::Array(c.filters) };
            let order = if c.order_f { "F" } else { "C" };
            let compressor = c.compressor.unwrap_or(Value::Null);
            (V2Encoding { dtype, fill_value, compressor, filters, order }, None)
        }
        (spec, _) => {
            let spec = match spec {
                Some(spec) => spec,
                None => ChunkSpecs::from_v3(meta)
                    .map_err(|e| format!("codecs neither v2-expressible nor decodable: {e}"))?,
            };
            unwrap = None;
            strip_crc32c = false;
            let (dtype, fill_value) = v3_type_to_v2(&meta.data_type, &fill, false, None)?;
            let (compressor, filters) = (Value::Null, Value::Null);
            (V2Encoding { dtype, fill_value, compressor, filters, order: "C" }, Some(spec))
        }
    };
    let separator = meta.key_encoding.separator();
    let grid = grid(&meta.shape, &chunks);
    let keys = match meta.key_encoding {
        ChunkKeyEncoding::Default { .. } => {
            KeyMap::new(ChunkKeyEncoding::V2 { separator }, meta.key_encoding, grid)
        }
        ChunkKeyEncoding::V2 { .. } => KeyMap::identity(meta.key_encoding, grid),
    };
    Ok(V2Form {
        zarray: zarray_doc(meta, &chunks, enc),
        zattrs: array_attributes(&meta.json),
        chunks: ChunkShow::Stored(StoredChunks { keys, decode, unwrap: unwrap.map(Arc::new) }),
        strip_crc32c,
        not_decoded,
    })
}

fn crc32c_codec() -> crate::zarr::metadata::Codec {
    crate::zarr::metadata::Codec { name: "crc32c".into(), configuration: Map::new() }
}

fn attributes(json: &Map<String, Value>) -> Map<String, Value> {
    json.get("attributes").and_then(Value::as_object).cloned().unwrap_or_default()
}

/// The attributes, plus `_ARRAY_DIMENSIONS` (xarray's convention) when every dimension is named.
fn array_attributes(json: &Map<String, Value>) -> Map<String, Value> {
    let mut attrs = attributes(json);
    if let Some(names) = json.get("dimension_names").and_then(Value::as_array) {
        if !names.is_empty()
            && names.iter().all(Value::is_string)
            && !attrs.contains_key("_ARRAY_DIMENSIONS")
        {
            attrs.insert("_ARRAY_DIMENSIONS".into(), Value::Array(names.clone()));
        }
    }
    attrs
}

fn zgroup() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("zarr_format".into(), json!(2));
    m
}

/// A v3 group's attributes in the v2 views: OME-Zarr metadata as 0.4 (unless `ome` keeps it),
/// anything else as it is. `path` names the group in the log line of an untranslated one.
fn v2_group_attributes(path: &str, json: &Map<String, Value>, ome: OmeInV2) -> Map<String, Value> {
    group_attributes(attributes(json), ome).unwrap_or_else(|(attrs, why)| {
        tracing::warn!(group = ?path, reason = %why, "OME-Zarr metadata shown untranslated");
        attrs
    })
}

fn group_files(
    dir: &str,
    json: &Map<String, Value>,
    decoded: bool,
    ome: OmeInV2,
) -> Vec<(String, bytes::Bytes)> {
    let mut files = vec![
        (".zgroup".into(), pretty(zgroup())),
        (".zattrs".into(), pretty(v2_group_attributes(dir, json, ome))),
    ];
    if let Some(zmetadata) = consolidated(dir, json, decoded, ome) {
        files.push((".zmetadata".into(), pretty(zmetadata)));
    }
    files
}

/// A v2 `.zmetadata` from a v3 group's inline consolidated metadata (arrays v2 cannot show
/// are left out, as they are from the tree).
fn consolidated(
    dir: &str,
    group: &Map<String, Value>,
    decoded: bool,
    ome: OmeInV2,
) -> Option<Map<String, Value>> {
    let entries = group.get("consolidated_metadata")?.get("metadata")?.as_object()?;
    let mut md = Map::new();
    md.insert(".zgroup".into(), Value::Object(zgroup()));
    md.insert(".zattrs".into(), Value::Object(v2_group_attributes(dir, group, ome)));
    for (path, node) in entries {
        match parse_node(node.clone()) {
            Ok(NodeMetadata::Group(g)) => {
                let at = if dir.is_empty() { path.clone() } else { format!("{dir}/{path}") };
                let attrs = v2_group_attributes(&at, &g.json, ome);
                md.insert(format!("{path}/.zgroup"), Value::Object(zgroup()));
                md.insert(format!("{path}/.zattrs"), Value::Object(attrs));
            }
            Ok(NodeMetadata::Array(a)) => {
                if let Ok(form) = v2_array_as(&a, decoded) {
                    md.insert(format!("{path}/.zarray"), Value::Object(form.zarray));
                    md.insert(format!("{path}/.zattrs"), Value::Object(form.zattrs));
                }
            }
            Err(_) => {}
        }
    }
    let mut doc = Map::new();
    doc.insert("metadata".into(), Value::Object(md));
    doc.insert("zarr_consolidated_format".into(), json!(1));
    Some(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::presented::mapping::ArrayPath;
    use bytes::Bytes;

    /// The stored chunks of a form that has them.
    fn stored(form: &V2Form) -> &StoredChunks {
        match &form.chunks {
            ChunkShow::Stored(s) => s,
            ChunkShow::Retiled(_) => panic!("re-tiled"),
        }
    }

    fn array(extra: Value) -> ArrayMetadata {
        let mut doc = json!({"zarr_format": 3, "node_type": "array", "shape": [5, 4], "data_type": "int16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 4]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 3,
            "codecs": [{"name": "bytes", "configuration": {"endian": "big"}},
                       {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 2, "blocksize": 0}}],
            "attributes": {"units": "m"}, "dimension_names": ["y", "x"]});
        for (k, v) in extra.as_object().unwrap() {
            doc[k] = v.clone();
        }
        match parse_node(doc).unwrap() {
            NodeMetadata::Array(a) => a,
            NodeMetadata::Group(_) => panic!(),
        }
    }

    /// A numcodecs configuration compared with the one zarr-python 3 wrote: the same keys
    /// and values (no key zarr-python leaves out, such as zstd's `checksum`, which strict v2
    /// readers reject), except that ours may leave out settings at numcodecs' defaults
    /// (`astype` = `dtype`, lzma's `format`, `check` and `filters`), which zarr-python 3
    /// fills in.
    fn same_numcodec(ours: &Value, reference: &Value) -> bool {
        let (Some(o), Some(r)) = (ours.as_object(), reference.as_object()) else {
            return ours == reference;
        };
        o.iter().all(|(k, v)| r.get(k) == Some(v))
            && r.iter().all(|(k, v)| {
                let default = match k.as_str() {
                    "astype" => r.get("dtype").cloned(),
                    "format" => Some(json!(1)),     // lzma
                    "check" => Some(json!(-1)),     // lzma
                    "filters" => Some(Value::Null), // lzma
                    _ => None,
                };
                o.get(k) == Some(v) || (!o.contains_key(k) && default.as_ref() == Some(v))
            })
    }

    /// The cases of testdata/v2forms: name, the v3 array, and the `.zarray` zarr-python 3
    /// writes for it with `zarr_format=2`.
    fn v2form_cases() -> Vec<(String, ArrayMetadata, Value)> {
        let dir = crate::zarr::codecs::tests::testdata("v2forms");
        let mut cases = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let case = entry.unwrap().path();
            let name = case.file_name().unwrap().to_string_lossy().into_owned();
            let doc = std::fs::read(case.join("zarr.json")).unwrap();
            let Ok(NodeMetadata::Array(meta)) = parse_zarr_json(&doc) else { panic!("{name}") };
            let want: Value =
                serde_json::from_slice(&std::fs::read(case.join(".zarray")).unwrap()).unwrap();
            cases.push((name, meta, want));
        }
        cases
    }

    /// Every v3 array of testdata/v2forms (written by zarr-python 3) shows as the `.zarray`
    /// zarr-python 3 writes for the same array with `zarr_format=2` (see make_v2forms.py).
    #[test]
    fn zarr_python_3_v2_forms() {
        let mut n = 0;
        for (name, meta, want) in v2form_cases() {
            let form = v2_array(&meta).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(stored(&form).decode.is_none(), "{name}: served decoded");
            assert_eq!(form.strip_crc32c, name.contains("crc32c"), "{name}");
            let got = &form.zarray;
            for key in ["zarr_format", "shape", "chunks", "dtype", "fill_value", "order"] {
                assert_eq!(got.get(key), want.get(key), "{name}: {key}");
            }
            assert!(same_numcodec(&got["compressor"], &want["compressor"]), "{name}: {got:?}");
            match (&got["filters"], &want["filters"]) {
                (Value::Array(a), Value::Array(b)) => {
                    assert_eq!(a.len(), b.len(), "{name}");
                    assert!(a.iter().zip(b).all(|(x, y)| same_numcodec(x, y)), "{name}: {a:?}");
                }
                (a, b) => assert_eq!(a, b, "{name}: filters"),
            }
            n += 1;
        }
        assert_eq!(n, 28);
    }

    /// The v2-decoded view over the same vectors: fixed-size arrays decoded (no codecs,
    /// little-endian, order C) wherever the decoder knows the codecs, vlen arrays with only
    /// their vlen filter.
    #[test]
    fn v2_decoded_forms() {
        let (mut decoded, mut vlen, mut kept) = (0, 0, vec![]);
        for (name, meta, want) in v2form_cases() {
            let form = v2_array_as(&meta, true).unwrap_or_else(|e| panic!("{name}: {e}"));
            let z = &form.zarray;
            assert_eq!(z["fill_value"], want["fill_value"], "{name}");
            if want["dtype"] == "|O" {
                vlen += 1;
                assert_eq!(z["filters"], json!([want["filters"][0]]), "{name}");
                assert_eq!(z["compressor"], Value::Null, "{name}");
                assert!(stored(&form).unwrap.is_some() && stored(&form).decode.is_none(), "{name}");
            } else if let Some(spec) = &stored(&form).decode {
                decoded += 1;
                assert_eq!((&z["compressor"], &z["filters"]), (&Value::Null, &Value::Null));
                assert_eq!(z["order"], "C");
                let dtype = want["dtype"].as_str().unwrap().replacen('>', "<", 1);
                assert_eq!(z["dtype"], json!(dtype), "{name}");
                // The decoded chunk holds exactly the elements numpy's dtype describes.
                let per_item: u64 = match &dtype[1..2] {
                    "U" => 4 * dtype[2..].parse::<u64>().unwrap(),
                    "S" => dtype[2..].parse::<u64>().unwrap(),
                    _ => dtype[2..].split('[').next().unwrap().parse().unwrap(),
                };
                assert_eq!(spec.base().decoded_size().unwrap(), 3 * 2 * per_item, "{name}");
            } else {
                assert!(form.not_decoded.is_some(), "{name}");
                kept.push(name);
            }
        }
        assert_eq!((decoded, vlen), (25, 3));
        // The decoder knows every codec of these vectors (none shown with its codecs).
        assert!(kept.is_empty(), "{kept:?}");
    }

    /// v2-decoded decodes v2 arrays too (here numcodecs' packbits), and rewrites `.zmetadata`.
    #[test]
    fn v2_decoded_decodes_v2_arrays() {
        let zarray = json!({"zarr_format": 2, "shape": [10], "chunks": [10], "dtype": "|b1",
            "compressor": {"id": "zlib", "level": 1}, "fill_value": false, "order": "C",
            "filters": [{"id": "packbits"}]});
        let docs = DirDocs {
            zarray: Some(Bytes::from(serde_json::to_vec(&zarray).unwrap())),
            ..Default::default()
        };
        let DirShow::Array(show) = V2DecodedPresenter::default().present("a", &docs) else {
            panic!()
        };
        let spec = show.stored().unwrap().decode.as_ref().expect("decoded");
        assert_eq!(spec.base().decoded_size().unwrap(), 10);
        let shown: Value = serde_json::from_slice(&show.files.generated[0].1).unwrap();
        assert_eq!((&shown["compressor"], &shown["filters"]), (&Value::Null, &Value::Null));
        // The v2 view keeps it as stored.
        assert!(matches!(V2Presenter::default().present("a", &docs), DirShow::PassThrough));
        let zmetadata = json!({"zarr_consolidated_format": 1, "metadata": {".zgroup":
            {"zarr_format": 2}, "a/.zarray": zarray}});
        let docs = DirDocs {
            zgroup: Some(Bytes::from_static(br#"{"zarr_format": 2}"#)),
            zmetadata: Some(Bytes::from(serde_json::to_vec(&zmetadata).unwrap())),
            ..Default::default()
        };
        let DirShow::Group(files) = V2DecodedPresenter::default().present("", &docs) else {
            panic!()
        };
        let shown: Value = serde_json::from_slice(&files.generated[0].1).unwrap();
        assert_eq!(shown["metadata"]["a/.zarray"]["filters"], Value::Null);
    }

    #[test]
    fn left_out_with_reasons() {
        let why = |extra: Value| v2_array(&array(extra)).unwrap_err();
        assert!(why(json!({"data_type": {"name": "optional", "configuration": {}}}))
            .contains("no Zarr v2 equivalent"));
        // A string type needs its vlen codec; a vlen codec needs a string type.
        assert!(why(json!({"data_type": "string", "fill_value": ""})).contains("vlen-utf8"));
        assert!(why(json!({"codecs": ["vlen-utf8"]})).contains("vlen-utf8"));
        assert!(why(json!({"data_type": {"name": "numpy.datetime64",
            "configuration": {"unit": "fortnight", "scale_factor": 1}}, "fill_value": 0}))
        .contains("no Zarr v2 equivalent"));
        assert!(why(json!({"data_type": {"name": "numpy.datetime64",
            "configuration": {"unit": "s", "scale_factor": 1}}, "fill_value": 1.5}))
        .contains("fill value"));
        assert!(why(json!({"codecs": ["bytes", "numcodecs.delta"]})).contains("decodable"));
    }

    #[test]
    fn checksums_inside_the_chain_are_decoded() {
        let le = json!({"name": "bytes", "configuration": {"endian": "little"}});
        let form = v2_array(&array(json!({"codecs": [le, "crc32c", "zstd"]}))).unwrap();
        assert!(stored(&form).decode.is_some() && !form.strip_crc32c);
        assert_eq!(form.zarray["compressor"], Value::Null);
        let form = v2_array(&array(json!({"codecs": [le, "zstd", "crc32c"]}))).unwrap();
        assert!(stored(&form).decode.is_none() && form.strip_crc32c);
        assert_eq!(form.zarray["compressor"]["id"], "zstd");
        assert_eq!(form.zarray["filters"], Value::Null);
        // numcodecs' crc32c with the checksum at the start cannot be cut off the end.
        let start = json!({"name": "numcodecs.crc32c", "configuration": {"location": "start"}});
        let form = v2_array(&array(json!({"codecs": [le, start]}))).unwrap();
        assert!(!form.strip_crc32c);
        assert_eq!(form.zarray["compressor"], json!({"id": "crc32c", "location": "start"}));
    }

    #[test]
    fn expressible_chain_keeps_chunks() {
        let form = v2_array(&array(json!({}))).unwrap();
        assert!(stored(&form).decode.is_none());
        let z = &form.zarray;
        assert_eq!(z["dtype"], ">i2");
        assert_eq!(z["compressor"]["id"], "blosc");
        assert_eq!(z["compressor"]["shuffle"], 1);
        assert_eq!(z["filters"], Value::Null);
        assert_eq!(z["order"], "C");
        assert_eq!(z["fill_value"], 3);
        assert_eq!(z["chunks"], json!([2, 4]));
        assert_eq!(z["dimension_separator"], "/");
        assert_eq!(
            form.zattrs,
            json!({"units": "m", "_ARRAY_DIMENSIONS": ["y", "x"]}).as_object().unwrap().clone()
        );
        assert_eq!(stored(&form).keys.resolve("2/0"), ArrayPath::Chunk("c/2/0".into()));
    }

    #[test]
    fn inexpressible_chain_is_decoded() {
        let form = v2_array(&array(json!({"codecs": [
            {"name": "transpose", "configuration": {"order": [1, 0]}},
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "gzip", "configuration": {"level": 1}}], "shape": [5, 4, 3],
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 4, 3]}}, "dimension_names": ["a", null, "c"]})));
        // A 2-d permutation on a 3-d array is invalid: neither expressible nor decodable.
        assert!(form.is_err());
        let form = v2_array(&array(json!({"codecs": [
            {"name": "transpose", "configuration": {"order": [0, 2, 1]}},
            {"name": "bytes", "configuration": {"endian": "little"}}], "shape": [5, 4, 3],
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 4, 3]}}, "dimension_names": ["a", null, "c"]})))
        .unwrap();
        assert!(stored(&form).decode.is_some());
        assert_eq!(form.zarray["dtype"], "<i2");
        assert_eq!(form.zarray["compressor"], Value::Null);
        assert!(!form.zattrs.contains_key("_ARRAY_DIMENSIONS")); // one name is null
    }

    #[test]
    fn full_reversal_is_order_f() {
        let form = v2_array(&array(json!({"codecs": [
            {"name": "transpose", "configuration": {"order": [1, 0]}},
            {"name": "bytes", "configuration": {"endian": "little"}}]})))
        .unwrap();
        assert_eq!(form.zarray["order"], "F");
        assert!(stored(&form).decode.is_none());
    }

    #[test]
    fn key_encodings() {
        let dot = v2_array(&array(
            json!({"chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}}}),
        ))
        .unwrap();
        assert_eq!(dot.zarray["dimension_separator"], ".");
        assert_eq!(stored(&dot).keys.resolve("1.0"), ArrayPath::Chunk("c.1.0".into()));
        let v2 = v2_array(&array(json!({"chunk_key_encoding": {"name": "v2"}}))).unwrap();
        assert_eq!(stored(&v2).keys.resolve("1.0"), ArrayPath::Chunk("1.0".into()));
    }

    #[test]
    fn unrepresentable_arrays_hidden() {
        let docs = |m: Value| DirDocs {
            zarr_json: Some(Bytes::from(m.to_string())),
            ..Default::default()
        };
        let mut doc = Value::Object(array(json!({})).json);
        doc["data_type"] = json!("string");
        assert_eq!(V2Presenter::default().present("a", &docs(doc.clone())), DirShow::Hidden);
        // Rectilinear chunks are re-tiled only where they decode (strings do not).
        doc["chunk_grid"] = json!({"name": "rectilinear",
            "configuration": {"kind": "inline", "chunk_shapes": [[2, 3], 4]}});
        assert_eq!(V2Presenter::default().present("a", &docs(doc.clone())), DirShow::Hidden);
        doc["data_type"] = json!("int16");
        let DirShow::Array(show) = V2Presenter::default().present("a", &docs(doc)) else {
            panic!()
        };
        assert!(matches!(&show.chunks, ChunkShow::Retiled(r) if r.tile == [3, 4]));
    }

    /// zarr-python 3.4's rectilinear arrays (tests/fixtures/rectilinear): tiles of the longest
    /// chunks, decoded and uncompressed, in both v2 views; a rectilinear grid of one length per
    /// dimension keeps its stored chunks.
    #[test]
    fn rectilinear_arrays_retiled() {
        use crate::zarr::chunk_grid::tests::fixture_meta;
        for decoded in [false, true] {
            let form = v2_array_as(&fixture_meta("chunks2d"), decoded).unwrap();
            let z = &form.zarray;
            assert_eq!(z["chunks"], json!([60, 30]));
            assert_eq!(
                (&z["compressor"], &z["filters"], &z["order"]),
                (&Value::Null, &Value::Null, &json!("C"))
            );
            assert_eq!((&z["dtype"], &z["fill_value"]), (&json!("<i4"), &json!(-1)));
            assert_eq!(form.zattrs["_ARRAY_DIMENSIONS"], json!(["y", "x"]));
            assert!(matches!(&form.chunks, ChunkShow::Retiled(r) if r.shown.grid() == [2, 3]));
            // A big-endian chain: the tiles are decoded, so little-endian.
            let form = v2_array_as(&fixture_meta("chunks1d_v2keys"), decoded).unwrap();
            assert_eq!(
                (&form.zarray["dtype"], &form.zarray["chunks"]),
                (&json!("<u2"), &json!([70]))
            );
            assert_eq!(form.zarray["dimension_separator"], ".");
            let uniform = v2_array_as(&fixture_meta("chunks_uniform"), decoded).unwrap();
            assert_eq!(uniform.zarray["chunks"], json!([4, 5]));
            assert!(matches!(uniform.chunks, ChunkShow::Stored(_)));
            for left_out in ["strings", "shards_nodivide"] {
                assert!(v2_array_as(&fixture_meta(left_out), decoded).is_err(), "{left_out}");
            }
        }
    }

    #[test]
    fn group_and_consolidated() {
        let arr = Value::Object(array(json!({})).json);
        let mut bad = arr.clone();
        bad["data_type"] = json!("string");
        let group = json!({"zarr_format": 3, "node_type": "group", "attributes": {"title": "t"},
            "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {
                "a": arr, "bad": bad, "sub": {"zarr_format": 3, "node_type": "group", "attributes": {"s": 1}}}}});
        let docs =
            DirDocs { zarr_json: Some(Bytes::from(group.to_string())), ..Default::default() };
        let DirShow::Group(files) = V2Presenter::default().present("", &docs) else { panic!() };
        assert!(files.hides("zarr.json"));
        let get = |n: &str| serde_json::from_slice::<Value>(files.get(n).unwrap()).unwrap();
        assert_eq!(get(".zgroup"), json!({"zarr_format": 2}));
        assert_eq!(get(".zattrs"), json!({"title": "t"}));
        let zm = get(".zmetadata");
        assert_eq!(zm["zarr_consolidated_format"], 1);
        let md = zm["metadata"].as_object().unwrap();
        let keys: Vec<&str> = md.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [".zgroup", ".zattrs", "a/.zarray", "a/.zattrs", "sub/.zgroup", "sub/.zattrs"]
        );
        assert_eq!(md["a/.zarray"]["dtype"], ">i2");
        // No consolidated metadata: no .zmetadata.
        let plain = json!({"zarr_format": 3, "node_type": "group"});
        let docs =
            DirDocs { zarr_json: Some(Bytes::from(plain.to_string())), ..Default::default() };
        let DirShow::Group(files) = V2Presenter::default().present("", &docs) else { panic!() };
        assert!(files.get(".zmetadata").is_none());
        assert_eq!(files.get(".zattrs").unwrap().as_ref(), b"{}");
    }
}
