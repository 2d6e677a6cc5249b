//! Parsing of node metadata documents: v3 `zarr.json` (arrays and groups) into the
//! fields this crate needs, keeping the whole document for faithful rewriting, and a
//! minimal v2 `.zarray` check (v2 nodes are passed through, never rewritten).

use serde_json::{Map, Value};

use crate::python_json;
use crate::zarr::chunk_grid::ChunkGrid;
use crate::zarr::chunk_key::ChunkKeyEncoding;
use crate::zarr::error::MetadataError;
use crate::zarr::json::{name_and_config, u64_list};

/// A parsed v3 `zarr.json`.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeMetadata {
    Array(ArrayMetadata),
    Group(GroupMetadata),
}

/// A v3 array document.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayMetadata {
    /// The whole document, in its original key order, so a rewrite changes only
    /// what it must.
    pub json: Map<String, Value>,
    pub shape: Vec<u64>,
    /// The grid of chunks (= shards, when sharded).
    pub chunk_grid: ChunkGrid,
    pub key_encoding: ChunkKeyEncoding,
    pub codecs: Vec<Codec>,
    pub data_type: Value,
}

/// One entry of a codec chain. Unknown codecs are kept as they are.
#[derive(Debug, Clone, PartialEq)]
pub struct Codec {
    pub name: String,
    /// Empty when the document gave no configuration (or the string shorthand).
    pub configuration: Map<String, Value>,
}

/// A v3 group document.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupMetadata {
    pub json: Map<String, Value>,
}

/// The most JSON objects and arrays a metadata document (`zarr.json`, `.zarray`, `.zattrs`,
/// consolidated metadata) may hold: parsed, each takes about 500 bytes however short its text,
/// so a document takes at most about 50 MB (and the v2 view's translation of it as much again).
/// zarr-python's consolidated metadata holds about 23 per sharded array: a hierarchy of 4,000
/// arrays fits.
pub const MAX_DOCUMENT_CONTAINERS: usize = 100_000;

/// A metadata document's bytes as JSON, within [`MAX_DOCUMENT_CONTAINERS`].
pub fn parse_document_json(bytes: &[u8]) -> Result<Value, MetadataError> {
    Ok(python_json::parse_bounded(bytes, MAX_DOCUMENT_CONTAINERS)?)
}

/// Parse the bytes of a v3 `zarr.json`.
pub fn parse_zarr_json(bytes: &[u8]) -> Result<NodeMetadata, MetadataError> {
    parse_node(parse_document_json(bytes)?)
}

/// Parse an already-decoded v3 node document (e.g. an entry of inline consolidated
/// metadata).
pub fn parse_node(v: Value) -> Result<NodeMetadata, MetadataError> {
    let Value::Object(json) = v else {
        return Err(MetadataError::NotAnObject);
    };
    match json.get("zarr_format") {
        Some(f) if f.as_u64() == Some(3) => {}
        Some(f) => return Err(MetadataError::UnsupportedZarrFormat(python_json::to_string(f))),
        None => return Err(MetadataError::MissingField("zarr_format")),
    }
    match json.get("node_type").and_then(Value::as_str) {
        Some("array") => Ok(NodeMetadata::Array(ArrayMetadata::from_map(json)?)),
        Some("group") => Ok(NodeMetadata::Group(GroupMetadata { json })),
        Some(other) => Err(MetadataError::UnknownNodeType(other.to_string())),
        None => Err(MetadataError::MissingField("node_type")),
    }
}

impl ArrayMetadata {
    /// Extract the fields of an array document (`zarr_format`/`node_type` are
    /// checked by [`parse_node`]).
    pub fn from_map(json: Map<String, Value>) -> Result<Self, MetadataError> {
        let shape =
            u64_list(json.get("shape").ok_or(MetadataError::MissingField("shape"))?, "shape")?;
        let data_type =
            json.get("data_type").cloned().ok_or(MetadataError::MissingField("data_type"))?;
        let chunk_grid = ChunkGrid::parse(
            json.get("chunk_grid").ok_or(MetadataError::MissingField("chunk_grid"))?,
            &shape,
        )?;
        let key_encoding = ChunkKeyEncoding::from_json(json.get("chunk_key_encoding"))?;
        let codecs = parse_codecs(
            json.get("codecs").ok_or(MetadataError::MissingField("codecs"))?,
            "codecs",
        )?;
        Ok(ArrayMetadata { json, shape, chunk_grid, key_encoding, codecs, data_type })
    }

    /// The shape every chunk (shard) has, if they share one: a `regular` grid, or a
    /// rectilinear one with a single length per dimension.
    pub fn chunk_shape(&self) -> Option<Vec<u64>> {
        self.chunk_grid.regular_shape()
    }

    /// Chunks (shards) per dimension; `None` for an unknown grid.
    pub fn chunk_counts(&self) -> Option<Vec<u64>> {
        self.chunk_grid.boundaries(&self.shape).map(|g| g.counts())
    }
}

/// Parse a codec chain; `field` names it in errors.
pub fn parse_codecs(v: &Value, field: &'static str) -> Result<Vec<Codec>, MetadataError> {
    let Value::Array(items) = v else {
        return Err(MetadataError::InvalidField { field, expected: "an array of codecs" });
    };
    items
        .iter()
        .map(|item| {
            let named = name_and_config(item, field)?;
            Ok(Codec { name: named.name, configuration: named.config.cloned().unwrap_or_default() })
        })
        .collect()
}

/// Check and return a v2 `.zarray` document. v2 arrays are never sharded, so the
/// mount only needs to know the document is what it claims to be.
pub fn parse_zarray(bytes: &[u8]) -> Result<Map<String, Value>, MetadataError> {
    let Value::Object(json) = parse_document_json(bytes)? else {
        return Err(MetadataError::NotAnObject);
    };
    match json.get("zarr_format") {
        Some(f) if f.as_u64() == Some(2) => Ok(json),
        Some(f) => Err(MetadataError::UnsupportedZarrFormat(python_json::to_string(f))),
        None => Err(MetadataError::MissingField("zarr_format")),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A real zarr-python 3 sharded array document.
    pub(crate) const FIXTURE: &str = r#"{"shape":[100,100],"data_type":"int32","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[50,50]}},"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},"fill_value":0,"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[10,10],"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":0,"checksum":false}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"end"}}],"attributes":{"a":1},"zarr_format":3,"node_type":"array","storage_transformers":[],"dimension_names":["y","x"]}"#;

    pub(crate) fn fixture() -> ArrayMetadata {
        match parse_zarr_json(FIXTURE.as_bytes()).unwrap() {
            NodeMetadata::Array(a) => a,
            NodeMetadata::Group(_) => panic!("fixture is an array"),
        }
    }

    #[test]
    fn parses_fixture() {
        let a = fixture();
        assert_eq!(a.shape, vec![100, 100]);
        assert_eq!(a.chunk_shape(), Some(vec![50, 50]));
        assert_eq!(a.chunk_grid.name(), "regular");
        assert_eq!(a.key_encoding, ChunkKeyEncoding::Default { separator: '/' });
        assert_eq!(a.data_type, json!("int32"));
        assert_eq!(a.codecs.len(), 1);
        assert_eq!(a.codecs[0].name, "sharding_indexed");
        assert_eq!(a.codecs[0].configuration["chunk_shape"], json!([10, 10]));
        // Key order of the original document is kept.
        let keys: Vec<&str> = a.json.keys().map(String::as_str).collect();
        assert_eq!(keys[0], "shape");
        assert_eq!(keys[keys.len() - 1], "dimension_names");
    }

    #[test]
    fn codec_string_shorthand_and_missing_config() {
        let v =
            json!(["bytes", {"name": "crc32c"}, {"name": "zstd", "configuration": {"level": 3}}]);
        let c = parse_codecs(&v, "codecs").unwrap();
        assert_eq!(c[0].name, "bytes");
        assert!(c[0].configuration.is_empty());
        assert_eq!(c[1].name, "crc32c");
        assert_eq!(c[2].configuration["level"], json!(3));
        assert!(parse_codecs(&json!([1]), "codecs").is_err());
        assert!(parse_codecs(&json!({"name": "bytes"}), "codecs").is_err());
        assert!(parse_codecs(&json!([{"configuration": {}}]), "codecs").is_err());
    }

    #[test]
    fn parses_group() {
        let g =
            parse_zarr_json(br#"{"zarr_format":3,"node_type":"group","attributes":{}}"#).unwrap();
        assert!(matches!(g, NodeMetadata::Group(_)));
    }

    #[test]
    fn irregular_grid_parses() {
        let doc = json!({"zarr_format":3,"node_type":"array","shape":[10],"data_type":"uint8",
            "chunk_grid":{"name":"rectilinear","configuration":{"kind":"inline","chunk_shapes":[[3,7]]}},
            "codecs":[{"name":"bytes"}],"fill_value":0});
        let NodeMetadata::Array(a) = parse_node(doc).unwrap() else { panic!() };
        assert_eq!(a.chunk_shape(), None);
        assert_eq!(a.chunk_grid.name(), "rectilinear");
        assert_eq!(a.chunk_grid.truly_rectilinear().unwrap().counts(), [2]);
        // Absent chunk_key_encoding defaults to `default` with '/'.
        assert_eq!(a.key_encoding, ChunkKeyEncoding::Default { separator: '/' });
    }

    #[test]
    fn rejects_bad_documents() {
        let base = serde_json::from_str::<Value>(FIXTURE).unwrap();
        let with = |k: &str, v: Value| {
            let mut d = base.clone();
            d.as_object_mut().unwrap().insert(k.to_string(), v);
            serde_json::to_vec(&d).unwrap()
        };
        let without = |k: &str| {
            let mut d = base.clone();
            d.as_object_mut().unwrap().remove(k);
            serde_json::to_vec(&d).unwrap()
        };
        let bad: Vec<Vec<u8>> = vec![
            b"not json".to_vec(),
            b"[1,2]".to_vec(),
            with("zarr_format", json!(2)),
            with("node_type", json!("table")),
            with("shape", json!([100, -1])),
            with("shape", json!([100.5, 1])),
            with("shape", json!([100])), // rank mismatch with the grid
            with("chunk_grid", json!({"name":"regular","configuration":{"chunk_shape":[0,50]}})),
            with("chunk_grid", json!({"name":"regular"})),
            with(
                "chunk_grid",
                json!({"name":"rectilinear","configuration":{"kind":"inline","chunk_shapes":[[50],[100]]}}),
            ),
            with("chunk_key_encoding", json!({"name":"hashed"})),
            with("codecs", json!("bytes")),
            without("zarr_format"),
            without("node_type"),
            without("shape"),
            without("codecs"),
            without("data_type"),
            without("chunk_grid"),
        ];
        for b in bad {
            assert!(parse_zarr_json(&b).is_err(), "{}", String::from_utf8_lossy(&b));
        }
    }

    /// Numbers survive a parse and re-serialization unchanged (the views rewrite documents):
    /// a long float literal is read correctly rounded, as Python reads it, not 1 ulp off.
    #[test]
    fn long_float_literals_round_trip() {
        let long = format!("7{}", "6".repeat(105));
        let doc = FIXTURE.replace(r#""fill_value":0"#, &format!(r#""fill_value":{long}"#));
        let NodeMetadata::Array(a) = parse_zarr_json(doc.as_bytes()).unwrap() else { panic!() };
        let fill = a.json["fill_value"].as_f64().unwrap();
        assert_eq!(fill, long.parse::<f64>().unwrap());
        let again = parse_zarr_json(&serde_json::to_vec(&a.json).unwrap()).unwrap();
        assert_eq!(again, NodeMetadata::Array(a));
    }

    /// zarr-python writes attributes with Python's json: bare NaN and Infinity. A bare token is
    /// kept as it is (the views write it back), also as a fill value.
    #[test]
    fn python_nan_tokens() {
        let doc = FIXTURE
            .replace(
                r#""attributes":{"a":1}"#,
                r#""attributes":{"a":NaN,"r":[Infinity,-Infinity]}"#,
            )
            .replace(r#""fill_value":0"#, r#""fill_value":NaN"#);
        let NodeMetadata::Array(a) = parse_zarr_json(doc.as_bytes()).unwrap() else { panic!() };
        assert!(python_json::non_finite(&a.json["attributes"]["a"]).unwrap().is_nan());
        assert!(python_json::non_finite(&a.json["fill_value"]).unwrap().is_nan());
        assert_eq!(
            python_json::to_string(&a.json["attributes"]),
            r#"{"a":NaN,"r":[Infinity,-Infinity]}"#
        );
        let z = parse_zarray(br#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<f8","compressor":null,"fill_value":NaN,"order":"C","filters":null}"#).unwrap();
        assert!(python_json::non_finite(&z["fill_value"]).unwrap().is_nan());
        let e = parse_zarr_json(br#"{"zarr_format":NaN}"#).unwrap_err().to_string();
        assert_eq!(e, "unsupported zarr_format NaN");
        let e = parse_zarr_json(br#"{"zarr_format":nan}"#).unwrap_err().to_string();
        assert_eq!(e, "invalid JSON: expected ident at line 1 column 17");
    }

    #[test]
    fn zarray() {
        let z = parse_zarray(br#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<i4","compressor":null,"fill_value":0,"order":"C","filters":null}"#).unwrap();
        assert_eq!(z["dtype"], json!("<i4"));
        assert!(parse_zarray(br#"{"zarr_format":3}"#).is_err());
        assert!(parse_zarray(br#"{"shape":[4]}"#).is_err());
        assert!(parse_zarray(b"[]").is_err());
        assert!(parse_zarray(b"{").is_err());
    }
}
