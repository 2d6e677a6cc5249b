//! JSON shapes shared by the Zarr documents' fields (extension points, integer lists), kept
//! apart from `metadata` so that `chunk_key` and `metadata` do not import each other.

use serde_json::{Map, Value};

use crate::zarr::error::MetadataError;

/// An extension point's name and optional configuration object.
pub(crate) struct Named<'a> {
    pub name: String,
    pub config: Option<&'a Map<String, Value>>,
}

/// The `{"name": .., "configuration": {..}}` form shared by extension points, which
/// may also be written as a bare name string.
pub(crate) fn name_and_config<'a>(
    v: &'a Value,
    field: &'static str,
) -> Result<Named<'a>, MetadataError> {
    match v {
        Value::String(s) => Ok(Named { name: s.clone(), config: None }),
        Value::Object(m) => {
            let name = m
                .get("name")
                .and_then(Value::as_str)
                .ok_or(MetadataError::InvalidField { field, expected: "a `name` string" })?;
            let config = match m.get("configuration") {
                None | Some(Value::Null) => None,
                Some(Value::Object(c)) => Some(c),
                Some(_) => {
                    return Err(MetadataError::InvalidField {
                        field,
                        expected: "`configuration` to be an object",
                    })
                }
            };
            Ok(Named { name: name.to_string(), config })
        }
        _ => Err(MetadataError::InvalidField { field, expected: "an object or a string" }),
    }
}

/// A JSON array of non-negative integers.
pub fn u64_list(v: &Value, field: &'static str) -> Result<Vec<u64>, MetadataError> {
    let err = MetadataError::InvalidField { field, expected: "an array of non-negative integers" };
    let Value::Array(items) = v else {
        return Err(err);
    };
    items.iter().map(|x| x.as_u64()).collect::<Option<Vec<u64>>>().ok_or(err)
}
