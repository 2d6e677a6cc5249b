//! Zarr data types and their fill values: the fixed-size core v3 types (with their
//! numpy spellings, which v2 uses) and, in [`fill_value`], the JSON `fill_value` of
//! an array turned into one element's bytes and back. Codecs, the v2 translation
//! and the views all take their types from here.

pub mod fill_value;

use serde_json::Value;

use crate::zarr::error::DataTypeError;
use crate::zarr::json::name_and_config;

/// Every core v3 data type: name, numpy kind character, itemsize. v2 spells
/// them as numpy type strings (`<i4`, `|b1`, ...).
pub const CORE_TYPES: [(&str, char, usize); 14] = [
    ("bool", 'b', 1),
    ("int8", 'i', 1),
    ("int16", 'i', 2),
    ("int32", 'i', 4),
    ("int64", 'i', 8),
    ("uint8", 'u', 1),
    ("uint16", 'u', 2),
    ("uint32", 'u', 4),
    ("uint64", 'u', 8),
    ("float16", 'f', 2),
    ("float32", 'f', 4),
    ("float64", 'f', 8),
    ("complex64", 'c', 8),
    ("complex128", 'c', 16),
];

/// A fixed-size v3 data type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataType {
    /// Bytes per element.
    pub itemsize: usize,
    /// The v3 name, e.g. `"int32"`.
    pub name: String,
}

impl DataType {
    /// Parse the `data_type` field of a v3 array document: a core type name, or
    /// `{"name": <core type>}` without configuration.
    pub fn from_json(v: &Value) -> Result<Self, DataTypeError> {
        let unsupported = || DataTypeError::Unsupported(v.to_string());
        let named = name_and_config(v, "data_type").map_err(|_| unsupported())?;
        if named.config.is_some_and(|c| !c.is_empty()) {
            return Err(unsupported());
        }
        Self::from_name(&named.name)
    }

    /// A core v3 data type by name.
    pub fn from_name(name: &str) -> Result<Self, DataTypeError> {
        let &(_, _, itemsize) = CORE_TYPES
            .iter()
            .find(|(n, _, _)| *n == name)
            .ok_or_else(|| DataTypeError::Unsupported(name.to_string()))?;
        Ok(DataType { itemsize, name: name.to_string() })
    }

    /// The numpy kind character (`b`, `i`, `u`, `f`, `c`) of a core type whose
    /// itemsize is consistent with its name; `None` otherwise (the fields are
    /// public, so a hand-built value may be anything).
    pub fn numpy_kind(&self) -> Option<char> {
        CORE_TYPES
            .iter()
            .find(|&&(n, _, size)| n == self.name && size == self.itemsize)
            .map(|&(_, kind, _)| kind)
    }

    /// The unit whose bytes an endianness change reverses: the whole item, except
    /// for complex types, whose real and imaginary parts are swapped separately.
    pub fn swap_size(&self) -> usize {
        match self.name.as_str() {
            "complex64" | "complex128" => self.itemsize / 2,
            _ => self.itemsize,
        }
    }
}

/// The v2 dtype string for a v3 data type, e.g. `("int32", false)` -> `"<i4"`,
/// `("uint8", _)` -> `"|u1"`, `("bool", _)` -> `"|b1"`; `None` for types v2
/// cannot express.
pub fn v2_dtype(data_type: &DataType, big_endian: bool) -> Option<String> {
    let kind = data_type.numpy_kind()?;
    let size = data_type.itemsize;
    let order = if size == 1 {
        '|'
    } else if big_endian {
        '>'
    } else {
        '<'
    };
    Some(format!("{order}{kind}{size}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn data_types() {
        for (name, size) in [
            ("bool", 1),
            ("int8", 1),
            ("uint8", 1),
            ("int16", 2),
            ("uint16", 2),
            ("float16", 2),
            ("int32", 4),
            ("uint32", 4),
            ("float32", 4),
            ("int64", 8),
            ("uint64", 8),
            ("float64", 8),
            ("complex64", 8),
            ("complex128", 16),
        ] {
            assert_eq!(DataType::from_json(&json!(name)).unwrap().itemsize, size);
        }
        assert_eq!(DataType::from_json(&json!({"name": "int32"})).unwrap().itemsize, 4);
        assert_eq!(DataType::from_name("complex128").unwrap().swap_size(), 8);
        assert_eq!(DataType::from_name("complex64").unwrap().swap_size(), 4);
        for bad in [
            json!("string"),
            json!("r16"),
            json!(3),
            json!({"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 1}}),
            json!({"configuration": {}}),
        ] {
            assert!(matches!(DataType::from_json(&bad), Err(DataTypeError::Unsupported(_))));
        }
    }
}
