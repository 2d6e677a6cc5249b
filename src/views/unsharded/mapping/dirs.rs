//! The unsharded view's decisions about directories of the store, as pure logic: what a directory
//! with a given `zarr.json` is ([`classify`]), and which changes inside a sharded array the view
//! accepts ([`ShardedArray::may_change`], [`ShardedArray::attributes_update`]).
//! `views::unsharded::namespace` reads the documents these decide on and does the writes they
//! allow.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::{rewrite_consolidated_v3, ArrayEntry, UnshardedArray};
use crate::perms::Perms;
use crate::python_json;
use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};
use crate::zarr::sharding::NotUnpackable;

/// What a directory of the store is, as far as the unsharded view cares.
#[derive(Debug, Clone)]
pub enum DirKind {
    /// Not a Zarr node (or not one we can read): look further down.
    Other,
    /// An array we do not unpack: nothing below it can be a sharded array.
    PlainArray,
    /// A group whose `zarr.json` is presented rewritten (consolidated metadata of sharded arrays).
    Group {
        rewritten: Option<Bytes>,
        modified: SystemTime,
        /// Those of the stored `zarr.json`, which the rewritten one shows.
        perms: Option<Perms>,
    },
    Sharded(Arc<ShardedArray>),
}

/// A sharded array of the store, as the view serves it.
#[derive(Debug)]
pub struct ShardedArray {
    /// The array directory.
    pub dir: String,
    pub array: UnshardedArray,
    /// The presented (unsharded) `zarr.json`.
    pub zarr_json: Bytes,
    pub modified: SystemTime,
    /// Those of the stored `zarr.json`, which the presented one shows.
    pub perms: Option<Perms>,
    /// An upper estimate of a stored shard's size, from the metadata (`stored_chunk_bound`).
    pub shard_bound: Option<u64>,
}

/// Why a new `zarr.json` for a sharded array is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttributesRefused {
    NotJson,
    NotAnObject,
    /// It changes more than the attributes of the presented document.
    MoreThanAttributes,
}

impl AttributesRefused {
    pub fn reason(self) -> &'static str {
        match self {
            AttributesRefused::NotJson => "zarr.json of a sharded array: not valid JSON",
            AttributesRefused::NotAnObject => "zarr.json of a sharded array: not an object",
            AttributesRefused::MoreThanAttributes => {
                "only the attributes of a sharded array's zarr.json can change"
            }
        }
    }
}

impl ShardedArray {
    /// May the path `rel` (relative to the array directory) be created, replaced or removed?
    /// Only inner-chunk keys, `zarr.json` (attribute changes), staged temp files (`staged`),
    /// directories of the chunk tree and names outside the chunk tree may.
    pub fn may_change(&self, rel: &str, staged: bool) -> bool {
        staged || self.array.entry(rel) != ArrayEntry::Hidden
    }

    /// The real `zarr.json` to write for a new presented one (`data`): accepted only when it
    /// differs from the presented (unsharded) metadata in its attributes; those are put into
    /// the real document, everything else of it stays.
    pub fn attributes_update(&self, data: &[u8]) -> Result<Vec<u8>, AttributesRefused> {
        let new = python_json::parse(data).map_err(|_| AttributesRefused::NotJson)?;
        let new = new.as_object().ok_or(AttributesRefused::NotAnObject)?;
        if !same_except_attributes(new, &self.array.rewritten_metadata()) {
            return Err(AttributesRefused::MoreThanAttributes);
        }
        let mut real = self.array.meta.json.clone();
        match new.get("attributes") {
            Some(attrs) => {
                real.insert("attributes".into(), attrs.clone());
            }
            None => {
                real.remove("attributes");
            }
        }
        Ok(python_json::to_vec_pretty(&Value::Object(real)))
    }
}

/// Equal as Zarr metadata apart from `attributes`: numbers compare by value (0 == 0.0), and a
/// missing key equals null or an empty list (writers differ in what they spell out).
pub fn same_except_attributes(a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
    fn empty(v: Option<&Value>) -> bool {
        match v {
            None | Some(Value::Null) => true,
            Some(Value::Array(x)) => x.is_empty(),
            _ => false,
        }
    }
    fn eq(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(p, q)| eq(p, q))
            }
            (Value::Object(x), Value::Object(y)) => maps_eq(x, y, false),
            _ => a == b,
        }
    }
    fn maps_eq(a: &Map<String, Value>, b: &Map<String, Value>, skip_attrs: bool) -> bool {
        let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        keys.into_iter().filter(|k| !(skip_attrs && k.as_str() == "attributes")).all(|k| {
            match (a.get(k), b.get(k)) {
                (Some(x), Some(y)) => eq(x, y),
                (x, y) => empty(x) && empty(y),
            }
        })
    }
    maps_eq(a, b, true)
}

/// Decide what the directory `dir` with this `zarr.json` is.
/// `modified` and `perms` are the stored document's, for the documents presented in its place.
pub fn classify(dir: &str, bytes: &[u8], modified: SystemTime, perms: Option<Perms>) -> DirKind {
    match parse_zarr_json(bytes) {
        Ok(NodeMetadata::Array(meta)) => match UnshardedArray::new(meta) {
            Ok(array) => {
                let zarr_json = Bytes::from(array.rewritten_zarr_json());
                DirKind::Sharded(Arc::new(ShardedArray {
                    dir: dir.to_string(),
                    array,
                    zarr_json,
                    modified,
                    perms,
                    shard_bound: crate::zarr::chunk_tree::stored_chunk_bound("zarr.json", bytes),
                }))
            }
            Err(reason) => {
                if !matches!(reason, NotUnpackable::NotSharded) {
                    tracing::info!(array = ?dir, reason = %reason, "sharded array passed through untouched");
                }
                DirKind::PlainArray
            }
        },
        Ok(NodeMetadata::Group(group)) => {
            let mut json = group.json.clone();
            let rewritten = rewrite_consolidated_v3(&mut json).then(|| {
                let mut out = python_json::to_vec_pretty(&Value::Object(json));
                out.shrink_to_fit();
                Bytes::from(out)
            });
            DirKind::Group { rewritten, modified, perms }
        }
        Err(e) => {
            tracing::warn!(dir = ?dir, error = %e, "unreadable zarr.json: passed through untouched");
            DirKind::Other
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::metadata::tests::FIXTURE;
    use serde_json::json;

    fn sharded() -> Arc<ShardedArray> {
        match classify("a/arr", FIXTURE.as_bytes(), SystemTime::UNIX_EPOCH, None) {
            DirKind::Sharded(a) => a,
            other => panic!("{other:?}"),
        }
    }

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn classify_each_kind() {
        let a = sharded();
        assert_eq!(a.dir, "a/arr");
        assert_eq!(a.zarr_json, Bytes::from(a.array.rewritten_zarr_json()));
        let plain = json!({"zarr_format": 3, "node_type": "array", "shape": [4],
            "data_type": "uint8", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": ["bytes"]});
        let t = SystemTime::UNIX_EPOCH;
        assert!(matches!(
            classify("p", plain.to_string().as_bytes(), t, None),
            DirKind::PlainArray
        ));
        let group = json!({"zarr_format": 3, "node_type": "group", "attributes": {}});
        assert!(matches!(
            classify("g", group.to_string().as_bytes(), t, None),
            DirKind::Group { rewritten: None, .. }
        ));
        let sharded_doc: Value = serde_json::from_str(FIXTURE).unwrap();
        let consolidated = json!({"zarr_format": 3, "node_type": "group",
            "consolidated_metadata": {"kind": "inline", "metadata": {"arr": sharded_doc}}});
        let DirKind::Group { rewritten: Some(doc), .. } =
            classify("g", consolidated.to_string().as_bytes(), t, None)
        else {
            panic!("consolidated metadata of a sharded array is rewritten")
        };
        let doc: Value = serde_json::from_slice(&doc).unwrap();
        let inner = &doc["consolidated_metadata"]["metadata"]["arr"];
        assert_eq!(inner["chunk_grid"]["configuration"]["chunk_shape"], json!([10, 10]));
        for junk in [&b"not json"[..], b"{}", b"[1]", br#"{"zarr_format": 3, "node_type": "x"}"#] {
            assert!(matches!(classify("j", junk, t, None), DirKind::Other), "{junk:?}");
        }
    }

    #[test]
    fn what_may_change_inside_a_sharded_array() {
        let a = sharded(); // inner grid 10 x 10, `default` keys with `/`
        for ok in ["zarr.json", "c/9/9", "c", "c/3", "notes.txt", "sub/x", ".zattrs"] {
            assert!(a.may_change(ok, false), "{ok}");
        }
        for refused in ["c/10/0", "c/1/2/3", "c/x", "c/01/2"] {
            assert!(!a.may_change(refused, false), "{refused}");
            assert!(a.may_change(refused, true), "staged: {refused}");
        }
    }

    #[test]
    fn only_attributes_may_change() {
        let a = sharded();
        let mut presented = a.array.rewritten_metadata();
        presented.insert("attributes".into(), json!({"b": [1, 2]}));
        let real: Value = serde_json::from_slice(
            &a.attributes_update(&serde_json::to_vec(&presented).unwrap()).unwrap(),
        )
        .unwrap();
        assert_eq!(real["attributes"], json!({"b": [1, 2]}));
        // Everything but the attributes is the real (sharded) document.
        let mut want = a.array.meta.json.clone();
        want.insert("attributes".into(), json!({"b": [1, 2]}));
        assert_eq!(real, Value::Object(want));
        presented.remove("attributes");
        let real: Value = serde_json::from_slice(
            &a.attributes_update(&serde_json::to_vec(&presented).unwrap()).unwrap(),
        )
        .unwrap();
        assert!(real.get("attributes").is_none());
        let mut reshaped = a.array.rewritten_metadata();
        reshaped.insert("shape".into(), json!([100, 101]));
        let reshaped = serde_json::to_vec(&reshaped).unwrap();
        assert_eq!(a.attributes_update(&reshaped), Err(AttributesRefused::MoreThanAttributes));
        assert_eq!(a.attributes_update(b"{"), Err(AttributesRefused::NotJson));
        assert_eq!(a.attributes_update(b"[]"), Err(AttributesRefused::NotAnObject));
    }

    /// A new zarr.json as zarr-python writes it, attributes with bare NaN and Infinity: the
    /// real document gets the same tokens.
    #[test]
    fn attributes_with_python_nan_tokens() {
        let a = sharded();
        let mut presented = a.array.rewritten_metadata();
        let attributes = python_json::parse(br#"{"f": NaN, "r": [-Infinity]}"#).unwrap();
        presented.insert("attributes".into(), attributes.clone());
        let real = a.attributes_update(&python_json::to_vec(&Value::Object(presented))).unwrap();
        let text = String::from_utf8(real.clone()).unwrap();
        assert!(text.contains("\"f\": NaN,\n    \"r\": [\n      -Infinity\n    ]"), "{text}");
        assert_eq!(python_json::parse(&real).unwrap()["attributes"], attributes);
    }

    #[test]
    fn metadata_equality_ignores_spelling() {
        let base = map(json!({"shape": [4], "fill_value": 0, "attributes": {"a": 1},
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}));
        let same = [
            json!({"shape": [4.0], "fill_value": 0.0, "attributes": {"a": 2},
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}),
            json!({"shape": [4], "fill_value": 0, "storage_transformers": [], "dimension_names": null,
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}),
        ];
        for s in same {
            assert!(same_except_attributes(&map(s.clone()), &base), "{s}");
            assert!(same_except_attributes(&base, &map(s.clone())), "{s}");
        }
        let different = [
            json!({"shape": [5], "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}),
            json!({"shape": [4], "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}]}),
            json!({"shape": [4], "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "dimension_names": ["x"]}),
            json!({"shape": [4], "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {}}]}),
            json!({"shape": [4], "fill_value": "0", "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}),
        ];
        for d in different {
            assert!(!same_except_attributes(&map(d.clone()), &base), "{d}");
        }
        // Only the top-level `attributes` is skipped.
        let a = map(json!({"x": {"attributes": 1}}));
        let b = map(json!({"x": {"attributes": 2}}));
        assert!(!same_except_attributes(&a, &b));
    }
}
