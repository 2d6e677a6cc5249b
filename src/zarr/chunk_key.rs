//! Zarr v3 chunk key encodings: turning chunk-grid coordinates into store keys
//! (relative to the array directory) and back.

use serde_json::Value;

use crate::zarr::error::MetadataError;
use crate::zarr::json::{name_and_config, Named};

/// How chunk-grid coordinates become keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKeyEncoding {
    /// `c/1/0/2` (or `c.1.0.2`); a 0-d array's single chunk is `c`.
    Default { separator: char },
    /// `1.0.2` (or `1/0/2`); a 0-d array's single chunk is `0`.
    V2 { separator: char },
}

impl ChunkKeyEncoding {
    /// Parse the `chunk_key_encoding` member of a v3 array document.
    /// Absent means `default` with `/`, as the spec's defaults imply.
    pub fn from_json(v: Option<&Value>) -> Result<Self, MetadataError> {
        let Some(v) = v else {
            return Ok(ChunkKeyEncoding::Default { separator: '/' });
        };
        // Extension points may be given as a bare name string.
        let Named { name, config } = name_and_config(v, "chunk_key_encoding")?;
        let separator = |default: char| -> Result<char, MetadataError> {
            match config.and_then(|c| c.get("separator")) {
                None => Ok(default),
                Some(Value::String(s)) if s == "/" => Ok('/'),
                Some(Value::String(s)) if s == "." => Ok('.'),
                Some(other) => Err(MetadataError::InvalidSeparator(other.to_string())),
            }
        };
        match name.as_str() {
            "default" => Ok(ChunkKeyEncoding::Default { separator: separator('/')? }),
            "v2" => Ok(ChunkKeyEncoding::V2 { separator: separator('.')? }),
            _ => Err(MetadataError::UnsupportedChunkKeyEncoding(name)),
        }
    }

    pub fn separator(&self) -> char {
        match *self {
            ChunkKeyEncoding::Default { separator } | ChunkKeyEncoding::V2 { separator } => {
                separator
            }
        }
    }

    /// The key of the chunk at `coords`, relative to the array directory.
    pub fn encode(&self, coords: &[u64]) -> String {
        let sep = self.separator();
        let mut key = String::new();
        match self {
            ChunkKeyEncoding::Default { .. } => {
                key.push('c');
                for c in coords {
                    key.push(sep);
                    key.push_str(&c.to_string());
                }
            }
            ChunkKeyEncoding::V2 { .. } => {
                if coords.is_empty() {
                    key.push('0');
                }
                for (i, c) in coords.iter().enumerate() {
                    if i > 0 {
                        key.push(sep);
                    }
                    key.push_str(&c.to_string());
                }
            }
        }
        key
    }

    /// Inverse of [`encode`](Self::encode) for an array of rank `ndim`.
    /// Only the canonical spelling is accepted (no leading zeros, signs or empty
    /// parts), so that every chunk has exactly one key.
    pub fn decode(&self, key: &str, ndim: usize) -> Option<Vec<u64>> {
        let sep = self.separator();
        let rest = match self {
            ChunkKeyEncoding::Default { .. } => {
                let rest = key.strip_prefix('c')?;
                if ndim == 0 {
                    return rest.is_empty().then(Vec::new);
                }
                rest.strip_prefix(sep)?
            }
            ChunkKeyEncoding::V2 { .. } => {
                if ndim == 0 {
                    return (key == "0").then(Vec::new);
                }
                key
            }
        };
        let coords = rest.split(sep).map(parse_coord).collect::<Option<Vec<u64>>>()?;
        (coords.len() == ndim).then_some(coords)
    }
}

/// Parse one canonical decimal coordinate ("0", "17"; not "01", "+1", "").
pub fn parse_coord(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if s.len() > 1 && s.starts_with('0') {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) const D_SLASH: ChunkKeyEncoding = ChunkKeyEncoding::Default { separator: '/' };
    pub(crate) const D_DOT: ChunkKeyEncoding = ChunkKeyEncoding::Default { separator: '.' };
    pub(crate) const V2_DOT: ChunkKeyEncoding = ChunkKeyEncoding::V2 { separator: '.' };
    pub(crate) const V2_SLASH: ChunkKeyEncoding = ChunkKeyEncoding::V2 { separator: '/' };

    #[test]
    fn from_json_defaults_and_forms() {
        assert_eq!(ChunkKeyEncoding::from_json(None).unwrap(), D_SLASH);
        let cases = [
            (json!({"name": "default"}), D_SLASH),
            (json!("default"), D_SLASH),
            (json!({"name": "default", "configuration": {"separator": "."}}), D_DOT),
            (json!({"name": "v2"}), V2_DOT),
            (json!("v2"), V2_DOT),
            (json!({"name": "v2", "configuration": {"separator": "/"}}), V2_SLASH),
        ];
        for (v, want) in cases {
            assert_eq!(ChunkKeyEncoding::from_json(Some(&v)).unwrap(), want, "{v}");
        }
    }

    #[test]
    fn from_json_rejects_bad() {
        for v in [
            json!({"name": "default", "configuration": {"separator": "-"}}),
            json!({"name": "default", "configuration": {"separator": 1}}),
            json!({"name": "fancy"}),
            json!({"configuration": {}}),
            json!(3),
            json!({"name": "v2", "configuration": []}),
        ] {
            assert!(ChunkKeyEncoding::from_json(Some(&v)).is_err(), "{v}");
        }
    }

    #[test]
    fn encode_all_forms() {
        assert_eq!(D_SLASH.encode(&[1, 0, 2]), "c/1/0/2");
        assert_eq!(D_DOT.encode(&[1, 0, 2]), "c.1.0.2");
        assert_eq!(V2_DOT.encode(&[1, 0, 2]), "1.0.2");
        assert_eq!(V2_SLASH.encode(&[1, 0, 2]), "1/0/2");
        assert_eq!(D_SLASH.encode(&[]), "c");
        assert_eq!(D_DOT.encode(&[]), "c");
        assert_eq!(V2_DOT.encode(&[]), "0");
        assert_eq!(V2_SLASH.encode(&[]), "0");
        assert_eq!(D_SLASH.encode(&[u64::MAX]), format!("c/{}", u64::MAX));
    }

    #[test]
    fn decode_all_forms() {
        assert_eq!(D_SLASH.decode("c/1/0/2", 3), Some(vec![1, 0, 2]));
        assert_eq!(D_DOT.decode("c.1.0.2", 3), Some(vec![1, 0, 2]));
        assert_eq!(V2_DOT.decode("1.0.2", 3), Some(vec![1, 0, 2]));
        assert_eq!(V2_SLASH.decode("1/0/2", 3), Some(vec![1, 0, 2]));
        assert_eq!(D_SLASH.decode("c", 0), Some(vec![]));
        assert_eq!(V2_DOT.decode("0", 0), Some(vec![]));
        assert_eq!(D_SLASH.decode("c/10", 1), Some(vec![10]));
    }

    #[test]
    fn decode_rejects_non_keys() {
        let bad: &[(ChunkKeyEncoding, &str, usize)] = &[
            (D_SLASH, "c/01/0", 2),  // leading zero
            (D_SLASH, "c/+1/0", 2),  // sign
            (D_SLASH, "c/-1/0", 2),  // sign
            (D_SLASH, "c//0", 2),    // empty part
            (D_SLASH, "c/1/0/", 2),  // trailing separator
            (D_SLASH, "c/1", 2),     // too few
            (D_SLASH, "c/1/2/3", 2), // too many
            (D_SLASH, "c.1.2", 2),   // wrong separator
            (D_SLASH, "1/2", 2),     // missing prefix
            (D_SLASH, "d/1/2", 2),   // wrong prefix
            (D_SLASH, "c/", 0),
            (D_SLASH, "c", 1),
            (D_SLASH, "c/18446744073709551616", 1), // 2^64 overflows
            (D_SLASH, "zarr.json", 1),
            (D_DOT, "c/1/2", 2),
            (D_DOT, "c1.2", 2),
            (V2_DOT, "1.2.", 2),
            (V2_DOT, "1", 2),
            (V2_DOT, "00", 0),
            (V2_DOT, "", 1),
            (V2_DOT, "c.1", 1),
            (V2_DOT, " 1", 1),
            (V2_SLASH, "1.2", 2),
            (V2_DOT, "１", 1), // non-ASCII digit
        ];
        for (enc, key, ndim) in bad {
            assert_eq!(enc.decode(key, *ndim), None, "{enc:?} {key:?} {ndim}");
        }
    }

    proptest::proptest! {
        #[test]
        fn roundtrip(coords in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..6)) {
            for enc in [D_SLASH, D_DOT, V2_DOT, V2_SLASH] {
                let key = enc.encode(&coords);
                proptest::prop_assert_eq!(enc.decode(&key, coords.len()), Some(coords.clone()));
            }
        }
    }
}
