//! An array as the flat view's formats see it: shape, element type, chunk grid and how to
//! decode each chunk, from its v3 `zarr.json` or v2 `.zarray` (as the unsharded view shows
//! them: inner chunks of shards are chunks). Only fixed-size element types.

use serde_json::{Map, Value};

use crate::view::v2::decode_spec;
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
