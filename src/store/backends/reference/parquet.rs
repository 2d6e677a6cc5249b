//! Parquet reference sets as kerchunk's `refs_to_dataframe` and VirtualiZarr write them:
//!
//! ```text
//! refs.parq/.zmetadata           {"metadata": {KEY: JSON, ...}, "record_size": N}
//! refs.parq/FIELD/refs.R.parq    rows path, offset, size, raw for the chunks R*N .. R*N+N-1
//! ```
//!
//! A chunk's row is its C-order index in the array's chunk grid. A row with `raw` is inline
//! data; one with `path` (and `offset`/`size` both 0 meaning the whole object) a reference; one
//! with neither a chunk that is not stored. A missing `refs.R.parq` means none of its chunks is
//! stored. Records are loaded on first use and kept (one parse per record file).
//!
//! The metadata keys are served as files, plus a standard consolidated `.zmetadata` (the
//! kerchunk one is not a valid Zarr consolidated document).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use serde_json::{Map, Value};
use tokio::sync::OnceCell;

use super::{Ref, Targets, Tree};
use crate::python_json;
use crate::store::{ObjectMeta, Store, StoreError};

/// Listing an array loads all its records; refuse arrays needing more record files than this.
const MAX_LISTED_RECORDS: u64 = 100_000;

type Record = Arc<Vec<Option<Ref>>>;

/// One array (`FIELD`) of the reference set.
struct FieldRefs {
    /// Chunks along each axis.
    grid: Vec<u64>,
    chunks: u64,
    records: Mutex<HashMap<u64, Arc<OnceCell<Record>>>>,
}

pub struct ParquetRefs {
    store: Arc<dyn Store>,
    record_size: u64,
    fields: HashMap<String, FieldRefs>,
}

impl ParquetRefs {
    /// Read `.zmetadata` from `store` (the reference directory), put the metadata keys into
    /// `tree` and note the arrays whose chunks live in record files.
    pub async fn open(
        store: Arc<dyn Store>,
        _targets: &Targets,
        tree: &mut Tree,
    ) -> Result<(ParquetRefs, ObjectMeta), String> {
        let (doc, meta) =
            match store.get_ranged(".zmetadata", crate::store::ByteRange::Range(0..u64::MAX)).await
            {
                Ok(Some(got)) => got,
                Ok(None) => {
                    return Err("neither a reference JSON file nor a Parquet reference directory \
                            (no .zmetadata)"
                        .into())
                }
                Err(e) => return Err(format!(".zmetadata: {e}")),
            };
        let (record_size, fields) = parse_zmetadata(&doc, tree)?;
        Ok((ParquetRefs { store, record_size, fields }, meta))
    }

    /// The reference of chunk key `key` (`FIELD/i.j.k`), loading its record when needed.
    pub async fn find(&self, key: &str, targets: &Targets) -> Result<Option<Ref>, String> {
        let (field, name) = crate::store::split_key(key);
        let Some(f) = self.fields.get(field) else { return Ok(None) };
        let Some(index) = chunk_index(name, &f.grid) else { return Ok(None) };
        let record = self.record(field, f, index / self.record_size, targets).await?;
        Ok(record.get((index % self.record_size) as usize).cloned().flatten())
    }

    /// The chunk files of `dir` when it is an array of the set (all its records loaded).
    pub async fn list(&self, dir: &str, targets: &Targets) -> Result<Vec<(String, Ref)>, String> {
        let Some(f) = self.fields.get(dir) else { return Ok(Vec::new()) };
        let records = f.chunks.div_ceil(self.record_size);
        if records > MAX_LISTED_RECORDS {
            return Err(format!("{records} record files are too many to list"));
        }
        let mut out = Vec::new();
        for r in 0..records {
            let record = self.record(dir, f, r, targets).await?;
            for (i, row) in record.iter().enumerate() {
                let index = r * self.record_size + i as u64;
                if let (Some(row), true) = (row, index < f.chunks) {
                    out.push((chunk_name(index, &f.grid), row.clone()));
                }
            }
        }
        Ok(out)
    }

    async fn record(
        &self,
        field: &str,
        f: &FieldRefs,
        r: u64,
        targets: &Targets,
    ) -> Result<Record, String> {
        let cell = crate::locks::lock(&f.records).entry(r).or_default().clone();
        cell.get_or_try_init(|| self.load(field, r, targets)).await.cloned()
    }

    async fn load(&self, field: &str, r: u64, targets: &Targets) -> Result<Record, String> {
        let key = format!("{field}/refs.{r}.parq");
        let data = match self.store.get(&key).await {
            Ok(d) => d,
            // No record file: none of its chunks is stored.
            Err(StoreError::NotFound(_)) => return Ok(Arc::new(Vec::new())),
            Err(e) => return Err(format!("{key}: {e}")),
        };
        let limit = self.record_size as usize;
        let rows = tokio::task::spawn_blocking(move || read_rows(data, limit))
            .await
            .map_err(|e| format!("{key}: parse task failed: {e}"))?
            .map_err(|e| format!("{key}: {e}"))?;
        let refs = rows
            .into_iter()
            .map(|row| match row {
                Row::Missing => None,
                Row::Raw(b) => Some(Ref::Inline(b)),
                Row::Path(p, 0, 0) => Some(targets.make_ref(&p, None)),
                Row::Path(p, offset, size) => Some(targets.make_ref(&p, Some((offset, size)))),
            })
            .collect();
        Ok(Arc::new(refs))
    }
}

/// Put the metadata keys of a `.zmetadata` into `tree`; the record size and the arrays.
fn parse_zmetadata(
    doc: &[u8],
    tree: &mut Tree,
) -> Result<(u64, HashMap<String, FieldRefs>), String> {
    let json = python_json::parse(doc).map_err(|e| format!(".zmetadata is not JSON: {e}"))?;
    let record_size = json
        .get("record_size")
        .and_then(Value::as_u64)
        .filter(|&n| n > 0)
        .ok_or(".zmetadata has no positive \"record_size\" (not a Parquet reference set)")?;
    let Some(Value::Object(metadata)) = json.get("metadata") else {
        return Err(".zmetadata has no \"metadata\" object".into());
    };
    let mut fields = HashMap::new();
    for (key, v) in metadata {
        let bytes = match v {
            Value::String(s) => Bytes::from(s.clone().into_bytes()),
            v => Bytes::from(python_json::to_vec(v)),
        };
        tree.insert(key, Ref::Inline(bytes));
        let Some(field) = key.strip_suffix("/.zarray") else {
            if key == ".zarray" {
                return Err(
                    "an array at the root of a Parquet reference set is not supported".into()
                );
            }
            continue;
        };
        let zarray: Value = match v {
            Value::String(s) => {
                python_json::parse(s.as_bytes()).map_err(|e| format!("{key}: {e}"))?
            }
            v => v.clone(),
        };
        fields.insert(field.to_string(), field_of(key, &zarray)?);
    }
    // The standard consolidated form, so Zarr readers can open the hierarchy in one read.
    let mut consolidated = Map::new();
    consolidated.insert("zarr_consolidated_format".into(), Value::from(1));
    consolidated.insert("metadata".into(), Value::Object(metadata.clone()));
    tree.files.remove(".zmetadata");
    tree.insert(
        ".zmetadata",
        Ref::Inline(Bytes::from(python_json::to_vec(&Value::Object(consolidated)))),
    );
    for f in fields.keys() {
        tree.add_dir(f);
    }
    Ok((record_size, fields))
}

/// Check a `.zmetadata` document the way `ParquetRefs::open` reads it.
pub fn check_zmetadata(doc: &[u8]) -> Result<(), String> {
    parse_zmetadata(doc, &mut Tree::new()).map(|_| ())
}

/// The chunk grid of an array from its `.zarray`.
fn field_of(key: &str, zarray: &Value) -> Result<FieldRefs, String> {
    let dims = |name: &str| -> Result<Vec<u64>, String> {
        zarray
            .get(name)
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<_>>>())
            .ok_or_else(|| format!("{key}: no usable \"{name}\""))
    };
    let (shape, chunks) = (dims("shape")?, dims("chunks")?);
    if shape.len() != chunks.len() || chunks.contains(&0) {
        return Err(format!("{key}: \"shape\" and \"chunks\" do not match"));
    }
    match zarray.get("dimension_separator") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "." => {}
        Some(_) => {
            return Err(format!("{key}: only '.' chunk keys are supported in Parquet references"))
        }
    }
    // A 0-d array has one chunk, named "0" (as kerchunk numbers it).
    let grid: Vec<u64> = if shape.is_empty() {
        vec![1]
    } else {
        shape.iter().zip(&chunks).map(|(s, c)| s.div_ceil(*c)).collect()
    };
    let total = grid.iter().try_fold(1u64, |acc, &n| acc.checked_mul(n));
    let chunks = total.ok_or_else(|| format!("{key}: too many chunks"))?;
    Ok(FieldRefs { grid, chunks, records: Mutex::new(HashMap::new()) })
}

/// `i.j.k` -> C-order chunk index; `None` unless it is a canonical key inside the grid.
fn chunk_index(name: &str, grid: &[u64]) -> Option<u64> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() != grid.len() {
        return None;
    }
    let mut index = 0u64;
    for (p, &n) in parts.iter().zip(grid) {
        if p.is_empty()
            || (p.len() > 1 && p.starts_with('0'))
            || !p.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let i: u64 = p.parse().ok()?;
        if i >= n {
            return None;
        }
        index = index * n + i;
    }
    Some(index)
}

fn chunk_name(mut index: u64, grid: &[u64]) -> String {
    let mut parts = vec![0u64; grid.len()];
    for d in (0..grid.len()).rev() {
        parts[d] = index % grid[d];
        index /= grid[d];
    }
    parts.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
}

enum Row {
    Missing,
    Raw(Bytes),
    Path(String, i64, i64),
}

/// The rows of one record file (at most `limit`).
fn read_rows(data: Bytes, limit: usize) -> Result<Vec<Row>, String> {
    let reader = SerializedFileReader::new(data).map_err(|e| format!("not a Parquet file: {e}"))?;
    let rows = reader.metadata().file_metadata().num_rows();
    if rows < 0 || rows as usize > limit {
        return Err(format!("{rows} rows, more than the record size {limit}"));
    }
    let mut out = Vec::with_capacity(rows as usize);
    for row in reader.get_row_iter(None).map_err(|e| e.to_string())? {
        let row = row.map_err(|e| e.to_string())?;
        let (mut path, mut offset, mut size, mut raw) = (None, 0i64, 0i64, None);
        for (name, field) in row.get_column_iter() {
            match (name.as_str(), field) {
                ("path", Field::Str(s)) => path = Some(s.clone()),
                ("path", Field::Bytes(b)) => {
                    path = Some(
                        String::from_utf8(b.data().to_vec()).map_err(|_| "path is not UTF-8")?,
                    )
                }
                ("offset", f) => offset = int_of(f).ok_or("offset is not an integer")?,
                ("size", f) => size = int_of(f).ok_or("size is not an integer")?,
                ("raw", Field::Bytes(b)) => raw = Some(Bytes::copy_from_slice(b.data())),
                ("raw", Field::Str(s)) => raw = Some(Bytes::from(s.clone().into_bytes())),
                (_, Field::Null) => {}
                ("path" | "raw", _) => return Err(format!("column {name} has an unexpected type")),
                _ => {}
            }
        }
        out.push(match (raw, path) {
            (Some(b), _) => Row::Raw(b),
            (None, Some(p)) => Row::Path(p, offset, size),
            (None, None) => Row::Missing,
        });
    }
    Ok(out)
}

fn int_of(f: &Field) -> Option<i64> {
    match f {
        Field::Long(v) => Some(*v),
        Field::Int(v) => Some(i64::from(*v)),
        Field::ULong(v) => i64::try_from(*v).ok(),
        Field::UInt(v) => Some(i64::from(*v)),
        Field::Null => Some(0),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_keys_and_indexes() {
        let grid = [4, 2, 2];
        assert_eq!(chunk_index("0.0.0", &grid), Some(0));
        assert_eq!(chunk_index("1.0.1", &grid), Some(5));
        assert_eq!(chunk_index("3.1.1", &grid), Some(15));
        for bad in ["4.0.0", "0.0", "00.0.0", "a.0.0", "0.0.0.0", "", "-1.0.0", "+1.0.0"] {
            assert_eq!(chunk_index(bad, &grid), None, "{bad:?}");
        }
        for i in 0..16 {
            assert_eq!(chunk_index(&chunk_name(i, &grid), &grid), Some(i));
        }
        assert_eq!(chunk_name(0, &[1]), "0");
    }

    /// VirtualiZarr 2.8's `.zmetadata` (tests/fixtures/virtualizarr) holds Python's bare NaN
    /// and Infinity; the metadata files and the consolidated document keep them.
    #[test]
    fn virtualizarr_zmetadata_with_bare_nan() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/virtualizarr/refs.parq");
        let doc = std::fs::read(format!("{path}/.zmetadata")).unwrap();
        let mut tree = Tree::new();
        let (record_size, fields) = parse_zmetadata(&doc, &mut tree).unwrap();
        assert_eq!(record_size, 4);
        let mut names: Vec<&str> = fields.keys().map(String::as_str).collect();
        names.sort();
        assert_eq!(names, ["count", "day", "lat", "lon", "sst", "time"]);
        let inline = |key: &str| match tree.files.get(key) {
            Some(Ref::Inline(b)) => String::from_utf8(b.to_vec()).unwrap(),
            _ => panic!("{key} is not inline"),
        };
        assert_eq!(inline("lat/.zattrs"), r#"{"_FillValue":NaN,"_ARRAY_DIMENSIONS":["lat"]}"#);
        assert!(inline("sst/.zattrs").contains(r#""valid_max":Infinity"#));
        let consolidated = python_json::parse(inline(".zmetadata").as_bytes()).unwrap();
        let attrs = &consolidated["metadata"][".zattrs"];
        assert!(python_json::non_finite(&attrs["missing"]).unwrap().is_nan());
    }
}
