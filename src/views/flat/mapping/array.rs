//! An array as the flat view's formats see it: shape, element type, chunk grid and how to
//! decode each chunk, from its v3 `zarr.json` or v2 `.zarray` (as the unsharded view shows
//! them: inner chunks of shards are chunks). Only fixed-size element types.

use serde_json::{Map, Value};

use crate::views::presented::mapping::v2::decode_spec;
use crate::zarr::chunk_grid::RectilinearGrid;
use crate::zarr::chunk_specs::ChunkSpecs;
use crate::zarr::chunk_tree::ChunkTree;
use crate::zarr::metadata::ArrayMetadata;
use crate::zarr::v2::{v2_dtype, v3_type_to_v2, V2Array};

/// A fixed-size array whose chunks the view can decode.
#[derive(Debug, Clone, PartialEq)]
pub struct FlatArray {
    pub shape: Vec<u64>,
    /// The chunks' boundaries (regular or rectilinear).
    pub grid: RectilinearGrid,
    /// The chunks' keys in the array directory below.
    pub keys: ChunkTree,
    /// How to decode each chunk: C order, little-endian.
    pub specs: ChunkSpecs,
    /// Bytes per element.
    pub item: usize,
    /// The unit a byte order change reverses: the item, half of it for complex types, 1
    /// for bytes and bool, 4 for UTF-32 strings.
    pub swap: usize,
    /// The numpy type string, little-endian: `<u2`, `|b1`, `<M8[10ms]`, `|S5`, `<U3`.
    pub descr: String,
    /// One element of the fill value, little-endian (`item` bytes).
    pub fill: Vec<u8>,
    /// Per dimension: v3 `dimension_names`, or v2 `_ARRAY_DIMENSIONS`.
    pub dimension_names: Vec<Option<String>>,
    /// v3 `attributes`, or v2 `.zattrs`.
    pub attributes: Map<String, Value>,
    /// Changes when the metadata does.
    pub version: String,
}

impl FlatArray {
    /// The numpy kind character: `b i u f c M m S U`.
    pub fn kind(&self) -> char {
        self.descr.chars().nth(1).unwrap_or('V')
    }

    /// An array from its v3 metadata, or why the flat view cannot show it.
    pub fn from_v3(meta: &ArrayMetadata) -> Result<FlatArray, String> {
        let fill = meta.json.get("fill_value").cloned().unwrap_or(Value::Null);
        let (descr, _) = v3_type_to_v2(&meta.data_type, &fill, false, None)?;
        let grid = meta
            .chunk_grid
            .boundaries(&meta.shape)
            .ok_or_else(|| format!("chunk grid {} is not known", meta.chunk_grid.name()))?;
        let specs = decode_spec(meta).map_err(|e| format!("cannot decode its chunks: {e}"))?;
        let names = match meta.json.get("dimension_names") {
            Some(Value::Array(names)) => {
                names.iter().map(|n| n.as_str().map(String::from)).collect()
            }
            _ => vec![None; meta.shape.len()],
        };
        let attributes = match meta.json.get("attributes") {
            Some(Value::Object(a)) => a.clone(),
            _ => Map::new(),
        };
        let doc = serde_json::to_vec(&meta.json).unwrap_or_default();
        let keys = ChunkTree::new(meta.key_encoding, grid.counts());
        FlatArray::new(meta.shape.clone(), grid, keys, specs, descr, names, attributes, &doc)
    }

    /// An array from its v2 `.zarray` (parsed) and `.zattrs` (`{}` when absent).
    pub fn from_v2(array: &V2Array, zattrs: Map<String, Value>) -> Result<FlatArray, String> {
        let descr = v2_dtype(&array.data_type, false)
            .ok_or_else(|| format!("data type {} has no numpy form", array.data_type.name))?;
        let spec = array.chunk_spec().map_err(|e| format!("cannot decode its chunks: {e}"))?;
        let grid = RectilinearGrid::regular(&array.shape, &array.chunks);
        let keys = ChunkTree::new(array.key_encoding(), grid.counts());
        let names = match zattrs.get("_ARRAY_DIMENSIONS") {
            Some(Value::Array(names)) => {
                names.iter().map(|n| n.as_str().map(String::from)).collect()
            }
            _ => vec![None; array.shape.len()],
        };
        let mut doc = serde_json::to_vec(&array.json).unwrap_or_default();
        doc.extend(serde_json::to_vec(&zattrs).unwrap_or_default());
        let specs = ChunkSpecs::single(spec);
        FlatArray::new(array.shape.clone(), grid, keys, specs, descr, names, zattrs, &doc)
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        shape: Vec<u64>,
        grid: RectilinearGrid,
        keys: ChunkTree,
        specs: ChunkSpecs,
        descr: String,
        mut dimension_names: Vec<Option<String>>,
        attributes: Map<String, Value>,
        doc: &[u8],
    ) -> Result<FlatArray, String> {
        let base = specs.base();
        // Trailing axes of the spec (fixed-size strings) widen the element.
        let extra: u64 =
            base.chunk_shape[shape.len().min(base.chunk_shape.len())..].iter().product();
        let item = usize::try_from(extra)
            .ok()
            .and_then(|e| e.checked_mul(base.data_type.itemsize))
            .filter(|&i| i > 0)
            .ok_or("an element of no bytes")?;
        let fill = base.fill_value.repeat(item / base.fill_value.len().max(1));
        if fill.len() != item {
            return Err(format!("a fill value of {} bytes for elements of {item}", fill.len()));
        }
        dimension_names.resize(shape.len(), None);
        let swap = match descr.chars().nth(1) {
            Some('S' | 'b') => 1,
            Some('U') => 4,
            Some('c') => item / 2,
            _ => item,
        };
        let version = format!("{:08x}-{}", crc32c::crc32c(doc), doc.len());
        Ok(FlatArray {
            shape,
            grid,
            keys,
            specs,
            item,
            swap,
            descr,
            fill,
            dimension_names,
            attributes,
            version,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};
    use serde_json::json;

    fn v3(doc: Value) -> Result<FlatArray, String> {
        match parse_zarr_json(&serde_json::to_vec(&doc).unwrap()).unwrap() {
            NodeMetadata::Array(meta) => FlatArray::from_v3(&meta),
            NodeMetadata::Group(_) => panic!("a group"),
        }
    }

    fn doc(data_type: Value, fill: Value, shape: &[u64], chunks: &[u64]) -> Value {
        json!({
            "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": fill,
            "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}],
            "dimension_names": ["y", null], "attributes": {"a": 1}
        })
    }

    /// A uint16 array (fill value 7) and its document.
    pub(crate) fn u16_array(shape: &[u64], chunks: &[u64]) -> (FlatArray, Value) {
        let d = doc(json!("uint16"), json!(7), shape, chunks);
        (v3(d.clone()).unwrap(), d)
    }

    #[test]
    fn numpy_types_of_v3_arrays() {
        let (a, _) = u16_array(&[100, 70], &[30, 20]);
        assert_eq!((a.descr.as_str(), a.item, a.swap, a.kind()), ("<u2", 2, 2, 'u'));
        assert_eq!(a.fill, 7u16.to_le_bytes());
        assert_eq!(a.dimension_names, [Some("y".to_string()), None]);
        assert_eq!(a.grid.counts(), [4, 4]);
        assert_eq!(a.keys.key(&[1, 2]), "c/1/2");
        let cases = [
            (json!("complex64"), json!([1.0, 2.0]), "<c8", 8, 4),
            (json!("bool"), json!(false), "|b1", 1, 1),
            (
                json!({"name": "numpy.datetime64", "configuration": {"unit": "ms", "scale_factor": 10}}),
                json!("NaT"),
                "<M8[10ms]",
                8,
                8,
            ),
            (
                json!({"name": "fixed_length_utf32", "configuration": {"length_bytes": 12}}),
                json!(""),
                "<U3",
                12,
                4,
            ),
            (
                json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": 5}}),
                json!(""),
                "|S5",
                5,
                1,
            ),
        ];
        for (ty, fill, descr, item, swap) in cases {
            let mut d = doc(ty, fill, &[4], &[3]);
            d["codecs"] = json!([{"name": "bytes", "configuration": {"endian": "little"}}]);
            d["dimension_names"] = Value::Null;
            let a = v3(d).unwrap();
            assert_eq!((a.descr.as_str(), a.item, a.swap), (descr, item, swap));
            assert_eq!(a.fill.len(), item);
        }
        let nat = v3({
            let mut d = doc(
                json!({"name": "numpy.datetime64", "configuration": {"unit": "s"}}),
                json!("NaT"),
                &[4],
                &[3],
            );
            d["dimension_names"] = Value::Null;
            d
        })
        .unwrap();
        assert_eq!(nat.fill, i64::MIN.to_le_bytes());
    }

    #[test]
    fn variable_length_types_are_left_out() {
        let mut d = doc(json!("string"), json!(""), &[4], &[3]);
        d["codecs"] = json!([{"name": "vlen-utf8"}]);
        d["dimension_names"] = Value::Null;
        assert!(v3(d).is_err());
    }

    #[test]
    fn v2_arrays() {
        let zarray = json!({"zarr_format": 2, "shape": [10, 6], "chunks": [4, 4], "dtype": ">i2",
            "compressor": null, "fill_value": 3, "order": "F", "filters": null});
        let parsed = V2Array::parse(&serde_json::to_vec(&zarray).unwrap()).unwrap();
        let mut attrs = Map::new();
        attrs.insert("_ARRAY_DIMENSIONS".into(), json!(["y", "x"]));
        let a = FlatArray::from_v2(&parsed, attrs).unwrap();
        assert_eq!((a.descr.as_str(), a.item), ("<i2", 2));
        assert_eq!(a.fill, 3i16.to_le_bytes());
        assert_eq!(a.dimension_names, [Some("y".into()), Some("x".into())]);
        assert_eq!(a.keys.key(&[2, 1]), "2.1");
    }
}
