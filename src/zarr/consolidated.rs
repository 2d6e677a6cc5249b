//! The hierarchy that consolidated metadata describes, for stores that cannot list (static
//! HTTP): v3 inline `consolidated_metadata` in a group's `zarr.json`, or v2 `.zmetadata`.
//!
//! From one such document this module knows every group and array below the group, their
//! metadata files, and for each array the chunk keys its grid allows. It answers which names
//! are directories and what a directory holds; whether a chunk key that the grid allows was
//! ever written is for the caller to find out (a missing chunk is the fill value, so an array
//! need not have them all). Pure logic: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::zarr::chunk_key::ChunkKeyEncoding;
use crate::zarr::error::MetadataError;
use crate::zarr::json::u64_list;

/// The documents that may hold consolidated metadata of the group at a store's root, in the
/// order to try them (v3 first: zarr-python 3 writes `.zmetadata` only for v2 hierarchies).
pub const ROOT_DOCUMENTS: [&str; 2] = ["zarr.json", ".zmetadata"];

/// At most this many chunk keys are listed in one directory. Past it a directory shows its
/// metadata files only (its chunks can still be opened by name): a caller checks each listed
/// chunk with a request, and an array of a million chunks in one directory (`.` separator)
/// would cost a million.
pub const MAX_CHUNKS_LISTED: u64 = 10_000;

/// What a directory listing holds: (name, is a directory), sorted by name.
pub type Children = Vec<(String, bool)>;

#[derive(Debug, Clone, PartialEq)]
struct Grid {
    /// Chunks along each dimension (ceil(shape / chunk shape)).
    counts: Vec<u64>,
    encoding: ChunkKeyEncoding,
}

#[derive(Debug, Clone, PartialEq)]
enum NodeKind {
    Group,
    Array(Grid),
}

/// Every node the consolidated metadata names, by path (`""` for the group holding it).
#[derive(Debug, Clone, PartialEq)]
pub struct Hierarchy {
    nodes: BTreeMap<String, NodeKind>,
    /// Metadata files named by the document (and the document itself), by full key.
    files: BTreeSet<String>,
}

/// Parse the document read from `key` (one of [`ROOT_DOCUMENTS`], at the group's root):
/// `Ok(None)` when it holds no consolidated metadata (a plain `zarr.json`).
pub fn parse_document(key: &str, doc: &[u8]) -> Result<Option<Hierarchy>, MetadataError> {
    let v = crate::zarr::metadata::parse_document_json(doc)?;
    let Value::Object(map) = v else {
        return Err(MetadataError::Consolidated(format!("{key}: not a JSON object")));
    };
    match key {
        "zarr.json" => from_v3(&map),
        ".zmetadata" => from_v2(&map).map(Some),
        _ => Ok(None),
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Check a path named inside a document: relative, no empty, `.` or `..` segments (it becomes
/// a directory of the mount, so it must not step out of it).
fn checked_path(p: &str) -> Result<String, MetadataError> {
    let p = p.trim_matches('/');
    if p.split('/').any(|s| s.is_empty() || s == "." || s == "..") && !p.is_empty() {
        return Err(MetadataError::Consolidated(format!(
            "consolidated metadata names a bad path {p:?}"
        )));
    }
    Ok(p.to_string())
}

fn grid(
    shape: Vec<u64>,
    chunks: Vec<u64>,
    encoding: ChunkKeyEncoding,
    path: &str,
) -> Result<Grid, MetadataError> {
    if shape.len() != chunks.len() || chunks.contains(&0) {
        return Err(MetadataError::Consolidated(format!(
            "array {path:?}: chunk shape {chunks:?} does not fit shape {shape:?}"
        )));
    }
    let counts = shape.iter().zip(&chunks).map(|(s, c)| s.div_ceil(*c)).collect();
    Ok(Grid { counts, encoding })
}

fn from_v3(root: &Map<String, Value>) -> Result<Option<Hierarchy>, MetadataError> {
    if root.get("node_type").and_then(Value::as_str) != Some("group") {
        return Ok(None);
    }
    let Some(Value::Object(cm)) = root.get("consolidated_metadata") else { return Ok(None) };
    let Some(Value::Object(metadata)) = cm.get("metadata") else {
        return Err(MetadataError::Consolidated(
            "consolidated_metadata has no \"metadata\" object".into(),
        ));
    };
    let mut h = Hierarchy { nodes: BTreeMap::new(), files: BTreeSet::new() };
    h.nodes.insert(String::new(), NodeKind::Group);
    h.files.insert("zarr.json".into());
    for (path, doc) in metadata {
        let path = checked_path(path)?;
        if path.is_empty() {
            continue;
        }
        let Value::Object(doc) = doc else {
            return Err(MetadataError::Consolidated(format!(
                "{path:?}: metadata is not an object"
            )));
        };
        let kind = match doc.get("node_type").and_then(Value::as_str) {
            Some("array") => NodeKind::Array(v3_grid(doc, &path)?),
            Some("group") => NodeKind::Group,
            other => {
                return Err(MetadataError::Consolidated(format!("{path:?}: node_type {other:?}")));
            }
        };
        h.add_node(&path, kind);
        h.files.insert(join(&path, "zarr.json"));
    }
    Ok(Some(h))
}

fn v3_grid(doc: &Map<String, Value>, path: &str) -> Result<Grid, MetadataError> {
    let shape = u64_list(doc.get("shape").unwrap_or(&Value::Null), "shape")?;
    let chunks = doc
        .get("chunk_grid")
        .and_then(|g| g.get("configuration"))
        .and_then(|c| c.get("chunk_shape"))
        .ok_or_else(|| {
            MetadataError::Consolidated(format!("array {path:?}: no regular chunk grid"))
        })?;
    let chunks = u64_list(chunks, "chunk_shape")?;
    let encoding = ChunkKeyEncoding::from_json(doc.get("chunk_key_encoding"))?;
    grid(shape, chunks, encoding, path)
}

fn from_v2(root: &Map<String, Value>) -> Result<Hierarchy, MetadataError> {
    let Some(Value::Object(metadata)) = root.get("metadata") else {
        return Err(MetadataError::Consolidated(".zmetadata has no \"metadata\" object".into()));
    };
    let mut h = Hierarchy { nodes: BTreeMap::new(), files: BTreeSet::new() };
    h.nodes.insert(String::new(), NodeKind::Group);
    h.files.insert(".zmetadata".into());
    for (key, doc) in metadata {
        let key = checked_path(key)?;
        let (dir, name) = match key.rfind('/') {
            Some(i) => (&key[..i], &key[i + 1..]),
            None => ("", key.as_str()),
        };
        match name {
            ".zarray" => {
                let shape = u64_list(doc.get("shape").unwrap_or(&Value::Null), "shape")?;
                let chunks = u64_list(doc.get("chunks").unwrap_or(&Value::Null), "chunks")?;
                let separator = match doc.get("dimension_separator").and_then(Value::as_str) {
                    None | Some(".") => '.',
                    Some("/") => '/',
                    Some(other) => return Err(MetadataError::InvalidSeparator(other.into())),
                };
                let g = grid(shape, chunks, ChunkKeyEncoding::V2 { separator }, dir)?;
                h.add_node(dir, NodeKind::Array(g));
            }
            // A stray .zgroup beside a .zarray does not turn the array into a group.
            ".zgroup" if !matches!(h.nodes.get(dir), Some(NodeKind::Array(_))) => {
                h.add_node(dir, NodeKind::Group);
            }
            // .zattrs and anything else: a file of the node (which .zarray/.zgroup names).
            _ => {}
        }
        h.files.insert(key);
    }
    Ok(h)
}

/// A chunk coordinate as a key part spells it: canonical decimal only, below `count`.
fn coordinate(part: &str, count: u64) -> bool {
    let canonical = !part.is_empty()
        && part.bytes().all(|b| b.is_ascii_digit())
        && (part == "0" || !part.starts_with('0'));
    canonical && part.parse::<u64>().is_ok_and(|c| c < count)
}

impl Hierarchy {
    /// Add a node and every group above it (a document may leave implicit groups out).
    fn add_node(&mut self, path: &str, kind: NodeKind) {
        let mut p = path;
        while let Some(i) = p.rfind('/') {
            p = &p[..i];
            self.nodes.entry(p.to_string()).or_insert(NodeKind::Group);
        }
        self.nodes.insert(path.to_string(), kind);
    }

    /// The array `key` lies in and the rest of the key below the array (`None` outside any).
    fn array_of<'a>(&self, key: &'a str) -> Option<(&Grid, &'a str)> {
        let mut end = key.len();
        while let Some(i) = key[..end].rfind('/') {
            if let Some(NodeKind::Array(g)) = self.nodes.get(&key[..i]) {
                return Some((g, &key[i + 1..]));
            }
            end = i;
        }
        match self.nodes.get("") {
            Some(NodeKind::Array(g)) if !key.is_empty() => Some((g, key)),
            _ => None,
        }
    }

    /// Is `key` a directory: a group, an array, or a directory of chunk keys its grid allows?
    pub fn is_dir(&self, key: &str) -> bool {
        if self.nodes.contains_key(key) {
            return true;
        }
        let Some((g, rest)) = self.array_of(key) else { return false };
        let parts: Vec<&str> = rest.split('/').collect();
        match g.encoding {
            ChunkKeyEncoding::Default { separator: '/' } => {
                // c, c/i, c/i/j ... with fewer coordinates than dimensions
                parts[0] == "c"
                    && parts.len() - 1 < g.counts.len()
                    && parts[1..].iter().zip(&g.counts).all(|(p, n)| coordinate(p, *n))
            }
            ChunkKeyEncoding::V2 { separator: '/' } => {
                parts.len() < g.counts.len()
                    && parts.iter().zip(&g.counts).all(|(p, n)| coordinate(p, *n))
            }
            _ => false,
        }
    }

    /// What the directory `dir` holds as far as the document tells: `None` when `dir` is not
    /// a directory of the hierarchy. Chunk files are every key the grid allows, whether
    /// written or not (see the module comment), and none past [`MAX_CHUNKS_LISTED`].
    pub fn children(&self, dir: &str) -> Option<Children> {
        if !self.is_dir(dir) {
            return None;
        }
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        let mut out: BTreeMap<String, bool> = BTreeMap::new();
        for path in self.nodes.keys() {
            if let Some(name) = path.strip_prefix(&prefix).filter(|n| !n.is_empty()) {
                if !name.contains('/') {
                    out.insert(name.to_string(), true);
                }
            }
        }
        for f in &self.files {
            if let Some(name) = f.strip_prefix(&prefix) {
                if !name.contains('/') {
                    out.entry(name.to_string()).or_insert(false);
                }
            }
        }
        for (name, is_dir) in self.chunk_children(dir) {
            out.entry(name).or_insert(is_dir);
        }
        Some(out.into_iter().collect())
    }

    /// The chunk keys (or chunk directories) directly in `dir`.
    fn chunk_children(&self, dir: &str) -> Children {
        let (g, done, lead) = match self.nodes.get(dir) {
            Some(NodeKind::Array(g)) => (g, Vec::new(), true),
            Some(NodeKind::Group) => return Vec::new(),
            None => match self.array_of(dir) {
                Some((g, rest)) => {
                    let parts: Vec<&str> = rest.split('/').collect();
                    let coords = match g.encoding {
                        ChunkKeyEncoding::Default { .. } => parts[1..].to_vec(),
                        ChunkKeyEncoding::V2 { .. } => parts,
                    };
                    (g, coords, false)
                }
                None => return Vec::new(),
            },
        };
        let ndim = g.counts.len();
        match g.encoding {
            ChunkKeyEncoding::Default { separator } if lead => {
                if ndim == 0 || separator == '/' {
                    vec![("c".into(), ndim > 0)]
                } else {
                    flat_keys("c.", &g.counts, '.')
                }
            }
            ChunkKeyEncoding::V2 { separator } if lead => {
                if ndim == 0 {
                    vec![("0".into(), false)]
                } else if separator == '/' {
                    level(&g.counts[0], ndim > 1)
                } else {
                    flat_keys("", &g.counts, '.')
                }
            }
            // Below the first level only `/`-separated keys have directories.
            _ => level(&g.counts[done.len()], done.len() + 1 < ndim),
        }
    }
}

/// One level of a `/`-separated chunk tree: names `0..count`.
fn level(count: &u64, dirs: bool) -> Children {
    if *count > MAX_CHUNKS_LISTED {
        return Vec::new();
    }
    (0..*count).map(|i| (i.to_string(), dirs)).collect()
}

/// Every key of a grid in one directory (`.` separator): `prefix` + `i.j.k`.
fn flat_keys(prefix: &str, counts: &[u64], sep: char) -> Children {
    let total = counts.iter().try_fold(1u64, |a, c| a.checked_mul(*c));
    if total.is_none_or(|t| t > MAX_CHUNKS_LISTED) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut coords = vec![0u64; counts.len()];
    if counts.contains(&0) {
        return out;
    }
    loop {
        let key: Vec<String> = coords.iter().map(u64::to_string).collect();
        out.push((format!("{prefix}{}", key.join(&sep.to_string())), false));
        // Odometer: the last dimension turns fastest.
        let mut d = counts.len();
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            coords[d] += 1;
            if coords[d] < counts[d] {
                break;
            }
            coords[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v3_root() -> Vec<u8> {
        let arr = |shape: Value, chunks: Value, enc: Value| {
            json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "int32",
                   "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
                   "chunk_key_encoding": enc, "fill_value": 0, "codecs": []})
        };
        let doc = json!({
            "zarr_format": 3, "node_type": "group", "attributes": {},
            "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {
                "g": {"zarr_format": 3, "node_type": "group"},
                "g/a": arr(json!([10, 7]), json!([5, 3]), json!({"name": "default", "configuration": {"separator": "/"}})),
                "dots": arr(json!([4, 4]), json!([2, 2]), json!({"name": "default", "configuration": {"separator": "."}})),
                "scalar": arr(json!([]), json!([]), json!({"name": "default"})),
                "deep/x/y": {"zarr_format": 3, "node_type": "group"},
            }}
        });
        serde_json::to_vec(&doc).unwrap()
    }

    fn names(c: Option<Children>) -> Vec<String> {
        c.unwrap().into_iter().map(|(n, d)| if d { format!("{n}/") } else { n }).collect()
    }

    #[test]
    fn v3_inline_consolidated_metadata_lists_the_hierarchy() {
        let h = parse_document("zarr.json", &v3_root()).unwrap().unwrap();
        assert_eq!(names(h.children("")), ["deep/", "dots/", "g/", "scalar/", "zarr.json"]);
        assert_eq!(names(h.children("g")), ["a/", "zarr.json"]);
        // Implicit groups between named ones are directories too.
        assert_eq!(names(h.children("deep")), ["x/"]);
        assert_eq!(names(h.children("deep/x")), ["y/"]);
        // 10x7 in 5x3 chunks: a 2x3 grid under c/.
        assert_eq!(names(h.children("g/a")), ["c/", "zarr.json"]);
        assert_eq!(names(h.children("g/a/c")), ["0/", "1/"]);
        assert_eq!(names(h.children("g/a/c/1")), ["0", "1", "2"]);
        assert!(h.is_dir("g/a/c/1") && !h.is_dir("g/a/c/1/2") && !h.is_dir("g/a/c/2"));
        assert!(!h.is_dir("g/a/c/01") && !h.is_dir("g/a/d") && !h.is_dir("nothing"));
        assert_eq!(h.children("g/a/c/2"), None);
        assert_eq!(h.children("g/a/c/1/0"), None);
        assert_eq!(names(h.children("dots")), ["c.0.0", "c.0.1", "c.1.0", "c.1.1", "zarr.json"]);
        assert_eq!(names(h.children("scalar")), ["c", "zarr.json"]);
        assert!(!h.is_dir("scalar/c"));
    }

    #[test]
    fn a_plain_zarr_json_has_no_hierarchy() {
        let g = json!({"zarr_format": 3, "node_type": "group", "attributes": {}});
        assert_eq!(parse_document("zarr.json", g.to_string().as_bytes()).unwrap(), None);
        let a = json!({"zarr_format": 3, "node_type": "array"});
        assert_eq!(parse_document("zarr.json", a.to_string().as_bytes()).unwrap(), None);
        let g = json!({"zarr_format": 3, "node_type": "group", "consolidated_metadata": null});
        assert_eq!(parse_document("zarr.json", g.to_string().as_bytes()).unwrap(), None);
    }

    #[test]
    fn v2_zmetadata_lists_the_hierarchy() {
        let doc = json!({"zarr_consolidated_format": 1, "metadata": {
            ".zgroup": {"zarr_format": 2},
            ".zattrs": {"title": "x"},
            "g/.zgroup": {"zarr_format": 2},
            "g/a/.zarray": {"shape": [4, 5], "chunks": [2, 5], "dtype": "<i4", "zarr_format": 2},
            "g/a/.zattrs": {},
            "nested/.zarray": {"shape": [3, 3], "chunks": [2, 2], "dimension_separator": "/", "zarr_format": 2},
        }});
        let h = parse_document(".zmetadata", doc.to_string().as_bytes()).unwrap().unwrap();
        assert_eq!(names(h.children("")), [".zattrs", ".zgroup", ".zmetadata", "g/", "nested/"]);
        assert_eq!(names(h.children("g/a")), [".zarray", ".zattrs", "0.0", "1.0"]);
        assert_eq!(names(h.children("nested")), [".zarray", "0/", "1/"]);
        assert_eq!(names(h.children("nested/1")), ["0", "1"]);
        assert!(h.is_dir("nested/1") && !h.is_dir("nested/2") && !h.is_dir("g/a/0.0"));
    }

    /// Consolidated metadata as zarr-python writes it: attributes with bare NaN and Infinity.
    #[test]
    fn python_nan_tokens_in_attributes() {
        let v3 = br#"{"attributes": {"x": NaN}, "zarr_format": 3, "node_type": "group",
            "consolidated_metadata": {"kind": "inline", "must_understand": false, "metadata": {
                "a": {"shape": [2], "data_type": "float64", "zarr_format": 3, "node_type": "array",
                    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
                    "fill_value": "NaN", "codecs": [], "attributes": {"_FillValue": NaN}}}}}"#;
        let h = parse_document("zarr.json", v3).unwrap().unwrap();
        assert_eq!(names(h.children("a")), ["c/", "zarr.json"]);
        let v2 = br#"{"zarr_consolidated_format": 1, "metadata": {".zgroup": {"zarr_format": 2},
            ".zattrs": {"missing": NaN}, "a/.zattrs": {"valid_max": Infinity},
            "a/.zarray": {"shape": [4], "chunks": [2], "fill_value": NaN, "zarr_format": 2}}}"#;
        let h = parse_document(".zmetadata", v2).unwrap().unwrap();
        assert_eq!(names(h.children("a")), [".zarray", ".zattrs", "0", "1"]);
    }

    #[test]
    fn chunk_listings_are_bounded() {
        let doc = json!({"metadata": {
            "big/.zarray": {"shape": [1000, 1000], "chunks": [1, 1]},
            "wide/.zarray": {"shape": [20000, 2], "chunks": [1, 1], "dimension_separator": "/"},
        }});
        let h = parse_document(".zmetadata", doc.to_string().as_bytes()).unwrap().unwrap();
        // A million keys in one directory: only the metadata is listed.
        assert_eq!(names(h.children("big")), [".zarray"]);
        assert_eq!(names(h.children("wide")), [".zarray"]);
        assert_eq!(names(h.children("wide/19999")), ["0", "1"]);
    }

    #[test]
    fn bad_documents_are_errors_not_panics() {
        for bad in [
            json!({"metadata": {"../x/.zarray": {"shape": [1], "chunks": [1]}}}),
            json!({"metadata": {"a/.zarray": {"shape": [1, 2], "chunks": [1]}}}),
            json!({"metadata": {"a/.zarray": {"shape": [1], "chunks": [0]}}}),
            json!({"metadata": 3}),
        ] {
            assert!(parse_document(".zmetadata", bad.to_string().as_bytes()).is_err(), "{bad}");
        }
        assert!(parse_document(".zmetadata", b"not json").is_err());
        let bad = json!({"node_type": "group", "consolidated_metadata": {"metadata": {"a//b": {"node_type": "group"}}}});
        assert!(parse_document("zarr.json", bad.to_string().as_bytes()).is_err());
    }
}
