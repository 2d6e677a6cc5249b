//! `--view decoded`: every chunk file holds its decoded elements (C order, little-endian), and
//! metadata says so (v3 `codecs: [bytes little]`; v2 no compressor or filters, `<` dtype, order
//! C). Applied on top of the unsharded view, so inner chunks of shards are decoded too. Arrays
//! whose codecs cannot be decoded pass through untouched, with a log line.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::{ArrayShow, DirDocs, DirShow, Files, KeyMap, Presenter};
use crate::python_json;
use crate::views::unsharded::mapping::rewrite_consolidated_arrays;
use crate::zarr::chunk_specs::ChunkSpecs;
use crate::zarr::chunk_tree::grid;
use crate::zarr::codecs::{ChunkSpec, CodecError};
use crate::zarr::metadata::{parse_zarr_json, ArrayMetadata, NodeMetadata};
use crate::zarr::v2::{v2_dtype, V2Array};

pub struct DecodedPresenter;

impl Presenter for DecodedPresenter {
    fn present(&self, dir: &str, docs: &DirDocs) -> DirShow {
        if let Some(doc) = &docs.zarr_json {
            return present_v3(dir, doc);
        }
        if let Some(doc) = &docs.zarray {
            return match decoded_v2_array(doc) {
                Ok((zarray, keys, spec)) => {
                    let files = Files {
                        generated: vec![(".zarray".into(), pretty(zarray))],
                        hidden: vec![],
                    };
                    let decode = Some(ChunkSpecs::single(spec));
                    DirShow::Array(Arc::new(ArrayShow::with_stored(files, keys, decode, None)))
                }
                Err(why) => pass_through(dir, &why),
            };
        }
        if let (Some(_), Some(doc)) = (&docs.zgroup, &docs.zmetadata) {
            if let Some(rewritten) = rewrite_zmetadata(doc) {
                return DirShow::Group(Files {
                    generated: vec![(".zmetadata".into(), rewritten)],
                    hidden: vec![],
                });
            }
        }
        DirShow::PassThrough
    }

    fn may_hide(&self) -> bool {
        false
    }
}

fn pass_through(dir: &str, why: &str) -> DirShow {
    tracing::info!(array = ?dir, reason = %why, "array passed through undecoded");
    DirShow::PassThrough
}

/// A document the view writes, as zarr-python writes one (2-space indent, Python's NaN tokens).
pub(crate) fn pretty(v: Map<String, Value>) -> Bytes {
    Bytes::from(python_json::to_vec_pretty(&Value::Object(v)))
}

fn present_v3(dir: &str, doc: &[u8]) -> DirShow {
    match parse_zarr_json(doc) {
        Ok(NodeMetadata::Array(meta)) => match decoded_v3_array(&meta) {
            Ok((json, specs)) => {
                let files =
                    Files { generated: vec![("zarr.json".into(), pretty(json))], hidden: vec![] };
                // Known: only arrays on a known grid decode.
                let grid = meta.chunk_counts().unwrap_or_default();
                let keys = KeyMap::identity(meta.key_encoding, grid);
                DirShow::Array(Arc::new(ArrayShow::with_stored(files, keys, Some(specs), None)))
            }
            Err(e) => pass_through(dir, &e.to_string()),
        },
        Ok(NodeMetadata::Group(group)) => {
            let mut json = group.json;
            if rewrite_consolidated(&mut json) {
                DirShow::Group(Files {
                    generated: vec![("zarr.json".into(), pretty(json))],
                    hidden: vec![],
                })
            } else {
                DirShow::PassThrough
            }
        }
        Err(_) => DirShow::PassThrough, // the view below already logged it
    }
}

/// A v3 array document as the decoded view shows it (a rectilinear grid kept), and how to
/// decode its chunks.
pub fn decoded_v3_array(
    meta: &ArrayMetadata,
) -> Result<(Map<String, Value>, ChunkSpecs), CodecError> {
    let spec = ChunkSpecs::from_v3(meta)?;
    let mut json = meta.json.clone();
    json.insert("codecs".into(), json!([{"name": "bytes", "configuration": {"endian": "little"}}]));
    Ok((json, spec))
}

/// Rewrite inline consolidated metadata (nested groups too) to the decoded form of each array.
pub fn rewrite_consolidated(group: &mut Map<String, Value>) -> bool {
    rewrite_consolidated_arrays(group, &|meta| decoded_v3_array(&meta).ok().map(|(json, _)| json))
}

/// A v2 `.zarray` as the decoded view shows it, its keys and its decoding.
fn decoded_v2_array(doc: &[u8]) -> Result<(Map<String, Value>, KeyMap, ChunkSpec), String> {
    let array = V2Array::parse(doc).map_err(|e| e.to_string())?;
    let spec = array.chunk_spec().map_err(|e| e.to_string())?;
    let zarray = decoded_zarray(&array)?;
    let keys = KeyMap::identity(array.key_encoding(), grid(&array.shape, &array.chunks));
    Ok((zarray, keys, spec))
}

fn decoded_zarray(array: &V2Array) -> Result<Map<String, Value>, String> {
    let dtype = v2_dtype(&array.data_type, false)
        .ok_or_else(|| format!("data type {} has no v2 form", array.data_type.name))?;
    let mut json = array.json.clone();
    json.insert("dtype".into(), Value::String(dtype));
    json.insert("compressor".into(), Value::Null);
    json.insert("filters".into(), Value::Null);
    json.insert("order".into(), Value::String("C".into()));
    Ok(json)
}

/// Rewrite a v2 `.zmetadata` so its `.zarray` entries match the decoded arrays.
fn rewrite_zmetadata(doc: &[u8]) -> Option<Bytes> {
    let Ok(Value::Object(mut doc)) = python_json::parse(doc) else { return None };
    let entries = doc.get_mut("metadata").and_then(Value::as_object_mut)?;
    let mut changed = false;
    for (key, value) in entries.iter_mut() {
        if key != ".zarray" && !key.ends_with("/.zarray") {
            continue;
        }
        let decoded =
            V2Array::parse(&python_json::to_vec(value)).map_err(|e| e.to_string()).and_then(|a| {
                a.chunk_spec().map_err(|e| e.to_string()).and_then(|_| decoded_zarray(&a))
            });
        if let Ok(json) = decoded {
            *value = Value::Object(json);
            changed = true;
        }
    }
    changed.then(|| pretty(doc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::metadata::tests::FIXTURE;

    fn docs_v3(doc: &str) -> DirDocs {
        DirDocs { zarr_json: Some(Bytes::from(doc.to_string())), ..Default::default() }
    }

    const PLAIN: &str = r#"{"zarr_format":3,"node_type":"array","shape":[5,4],"data_type":"int16",
        "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2,4]}},
        "chunk_key_encoding":{"name":"default"},"fill_value":0,
        "codecs":[{"name":"bytes","configuration":{"endian":"big"}},{"name":"zstd","configuration":{"level":1}}],
        "attributes":{"k":1}}"#;

    #[test]
    fn v3_array_rewritten() {
        let DirShow::Array(show) = DecodedPresenter.present("a", &docs_v3(PLAIN)) else { panic!() };
        let doc: Value = serde_json::from_slice(show.files.get("zarr.json").unwrap()).unwrap();
        assert_eq!(
            doc["codecs"],
            json!([{"name": "bytes", "configuration": {"endian": "little"}}])
        );
        assert_eq!(doc["attributes"], json!({"k": 1}));
        assert_eq!(doc["chunk_grid"]["configuration"]["chunk_shape"], json!([2, 4]));
        let stored = show.stored().unwrap();
        assert_eq!(stored.keys.grid(), vec![3, 1]);
        assert_eq!(stored.decode.as_ref().unwrap().base().decoded_size().unwrap(), 16);
        // What it presents is itself decodable, with nothing left to do.
        let NodeMetadata::Array(m) = parse_zarr_json(show.files.get("zarr.json").unwrap()).unwrap()
        else {
            panic!()
        };
        assert_eq!(ChunkSpec::from_v3(&m).unwrap().codecs.len(), 1);
    }

    #[test]
    fn undecodable_passes_through() {
        let odd = PLAIN.replace("\"zstd\"", "\"lzma-unknown\"");
        assert_eq!(DecodedPresenter.present("a", &docs_v3(&odd)), DirShow::PassThrough);
        let group = r#"{"zarr_format":3,"node_type":"group","attributes":{}}"#;
        assert_eq!(DecodedPresenter.present("g", &docs_v3(group)), DirShow::PassThrough);
        assert_eq!(DecodedPresenter.present("x", &DirDocs::default()), DirShow::PassThrough);
    }

    #[test]
    fn consolidated_entries_rewritten() {
        let plain: Value = serde_json::from_str(PLAIN).unwrap();
        let sharded: Value = serde_json::from_str(FIXTURE).unwrap();
        let group = json!({"zarr_format": 3, "node_type": "group", "attributes": {},
            "consolidated_metadata": {"kind": "inline", "must_understand": false,
                "metadata": {"p": plain, "s": sharded, "sub": {"zarr_format": 3, "node_type": "group",
                    "consolidated_metadata": {"metadata": {"q": plain}}}}}});
        let DirShow::Group(files) = DecodedPresenter.present("g", &docs_v3(&group.to_string()))
        else {
            panic!()
        };
        let doc: Value = serde_json::from_slice(files.get("zarr.json").unwrap()).unwrap();
        let md = &doc["consolidated_metadata"]["metadata"];
        let little = json!([{"name": "bytes", "configuration": {"endian": "little"}}]);
        assert_eq!(md["p"]["codecs"], little);
        assert_eq!(md["s"]["codecs"], little); // sharding decodes whole shards
        assert_eq!(md["sub"]["consolidated_metadata"]["metadata"]["q"]["codecs"], little);
    }

    #[test]
    fn v2_array_rewritten() {
        let zarray = br#"{"zarr_format":2,"shape":[6,5],"chunks":[4,4],"dtype":">i2",
            "compressor":{"id":"zlib","level":1},"fill_value":7,"order":"F","filters":null,
            "dimension_separator":"/"}"#;
        let docs = DirDocs { zarray: Some(Bytes::from_static(zarray)), ..Default::default() };
        let DirShow::Array(show) = DecodedPresenter.present("v", &docs) else { panic!() };
        let doc: Value = serde_json::from_slice(show.files.get(".zarray").unwrap()).unwrap();
        assert_eq!(doc["dtype"], "<i2");
        assert_eq!(doc["compressor"], Value::Null);
        assert_eq!(doc["filters"], Value::Null);
        assert_eq!(doc["order"], "C");
        assert_eq!(doc["fill_value"], 7);
        assert_eq!(doc["dimension_separator"], "/");
        let keys = &show.stored().unwrap().keys;
        assert_eq!(keys.resolve("1/0"), super::super::ArrayPath::Chunk("1/0".into()));
        assert_eq!(keys.grid(), vec![2, 2]);
    }

    /// Python's bare NaN and Infinity (attributes, a v2 fill value) are written back as they
    /// were: rewritten documents keep the writer's tokens.
    #[test]
    fn python_nan_tokens_written_back() {
        let doc = PLAIN.replace(
            r#""attributes":{"k":1}"#,
            r#""attributes":{"k":NaN,"r":[Infinity,-Infinity]}"#,
        );
        let DirShow::Array(show) = DecodedPresenter.present("a", &docs_v3(&doc)) else { panic!() };
        let shown = String::from_utf8(show.files.get("zarr.json").unwrap().to_vec()).unwrap();
        assert!(
            shown.contains("\"k\": NaN,\n    \"r\": [\n      Infinity,\n      -Infinity\n    ]"),
            "{shown}"
        );

        let zarray = br#"{"zarr_format":2,"shape":[4],"chunks":[4],"dtype":"<f4","compressor":{"id":"zlib","level":1},"fill_value":NaN,"order":"C","filters":null}"#;
        let docs = DirDocs { zarray: Some(Bytes::from_static(zarray)), ..Default::default() };
        let DirShow::Array(show) = DecodedPresenter.present("v", &docs) else { panic!() };
        let specs = show.stored().unwrap().decode.as_ref().unwrap();
        assert_eq!(specs.base().fill_value, f32::NAN.to_le_bytes());
        let shown = String::from_utf8(show.files.get(".zarray").unwrap().to_vec()).unwrap();
        assert!(shown.contains("\"fill_value\": NaN,"), "{shown}");

        let zm = br#"{"zarr_consolidated_format": 1, "metadata": {".zgroup": {"zarr_format": 2},
            ".zattrs": {"missing": NaN},
            "a/.zarray": {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": ">f8",
                "compressor": {"id": "gzip", "level": 1}, "fill_value": NaN, "order": "C", "filters": null},
            "a/.zattrs": {"_FillValue": NaN}}}"#;
        let docs = DirDocs {
            zgroup: Some(Bytes::from_static(b"{\"zarr_format\":2}")),
            zmetadata: Some(Bytes::from_static(zm)),
            ..Default::default()
        };
        let DirShow::Group(files) = DecodedPresenter.present("", &docs) else { panic!() };
        let doc = python_json::parse(files.get(".zmetadata").unwrap()).unwrap();
        let md = &doc["metadata"];
        assert_eq!(md["a/.zarray"]["dtype"], "<f8");
        for v in [
            &md[".zattrs"]["missing"],
            &md["a/.zattrs"]["_FillValue"],
            &md["a/.zarray"]["fill_value"],
        ] {
            assert!(python_json::non_finite(v).unwrap().is_nan());
        }
    }

    #[test]
    fn zmetadata_rewritten() {
        let zm = json!({"zarr_consolidated_format": 1, "metadata": {
            ".zgroup": {"zarr_format": 2},
            "a/.zarray": {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": ">f8",
                "compressor": {"id": "gzip", "level": 1}, "fill_value": null, "order": "C", "filters": null},
            "a/.zattrs": {"x": 1}}});
        let docs = DirDocs {
            zgroup: Some(Bytes::from_static(b"{\"zarr_format\":2}")),
            zmetadata: Some(Bytes::from(zm.to_string())),
            ..Default::default()
        };
        let DirShow::Group(files) = DecodedPresenter.present("", &docs) else { panic!() };
        let doc: Value = serde_json::from_slice(files.get(".zmetadata").unwrap()).unwrap();
        assert_eq!(doc["metadata"]["a/.zarray"]["dtype"], "<f8");
        assert_eq!(doc["metadata"]["a/.zarray"]["compressor"], Value::Null);
        assert_eq!(doc["metadata"]["a/.zattrs"], json!({"x": 1}));
    }
}
