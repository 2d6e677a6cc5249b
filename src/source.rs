//! SOURCE argument parsing: where the store lives. Pure: no I/O here; `cli` checks that a
//! local source exists and the store layer opens it.

use crate::store::location::{parse_location, LocationError};
pub use crate::store::location::{Cloud, Location};

/// A parsed SOURCE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A directory store (a local directory or a prefix of an object store).
    Directory(Location),
    /// A zip archive holding the store.
    Zip(Location),
    /// Virtual references: a kerchunk JSON file, or a directory holding a Parquet reference
    /// set (`.zmetadata` + `FIELD/refs.N.parq`). Chosen by a `.json`, `.parq` or `.parquet`
    /// name or a `reference+` prefix.
    Reference(Location),
    /// An Icechunk repository (`icechunk+<path or URL>`, or a local directory laid out as
    /// one: see `cli`), shown at one branch, tag or snapshot.
    Icechunk(Location),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SourceError {
    #[error("SOURCE is empty")]
    Empty,
    #[error(transparent)]
    Location(#[from] LocationError),
}

const ZIP_SUFFIXES: [&str; 2] = [".zip", ".ozx"];
/// Names that are reference sets (kerchunk JSON files, Parquet reference directories).
const REFERENCE_SUFFIXES: [&str; 3] = [".json", ".parq", ".parquet"];

impl Source {
    pub fn parse(s: &str) -> Result<Source, SourceError> {
        if s.is_empty() {
            return Err(SourceError::Empty);
        }
        if let Some(rest) = s.strip_prefix("zip+") {
            return Ok(Source::Zip(parse_location(rest)?));
        }
        if let Some(rest) = s.strip_prefix("reference+") {
            return Ok(Source::Reference(parse_location(rest)?));
        }
        if let Some(rest) = s.strip_prefix("icechunk+") {
            return Ok(Source::Icechunk(parse_location(rest)?));
        }
        let loc = parse_location(s)?;
        let path_part = match &loc {
            Location::Local(p) => p.to_string_lossy().to_lowercase(),
            Location::Remote { url, .. } => {
                url.split(['?', '#']).next().unwrap_or("").to_lowercase()
            }
        };
        let path_part = path_part.trim_end_matches('/');
        if ZIP_SUFFIXES.iter().any(|z| path_part.ends_with(z)) {
            Ok(Source::Zip(loc))
        } else if REFERENCE_SUFFIXES.iter().any(|z| path_part.ends_with(z)) {
            Ok(Source::Reference(loc))
        } else {
            Ok(Source::Directory(loc))
        }
    }

    pub fn location(&self) -> &Location {
        match self {
            Source::Directory(l) | Source::Zip(l) | Source::Reference(l) | Source::Icechunk(l) => l,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_of_source() {
        assert_eq!(
            Source::parse("data.zarr").unwrap(),
            Source::Directory(Location::Local("data.zarr".into()))
        );
        assert_eq!(
            Source::parse("file:///a/b%20c").unwrap(),
            Source::Directory(Location::Local("/a/b c".into()))
        );
        assert_eq!(Source::parse("file://rel"), Err(LocationError::RelativeFileUrl.into()));
        // A stray '%' stays; an escaped byte that is not UTF-8 is kept as that byte.
        assert_eq!(
            Source::parse("file:///a/100%/x%zz%4").unwrap(),
            Source::Directory(Location::Local("/a/100%/x%zz%4".into()))
        );
        use std::os::unix::ffi::OsStrExt;
        let latin1 = std::ffi::OsStr::from_bytes(b"/d/caf\xe9");
        assert_eq!(
            Source::parse("file:///d/caf%E9").unwrap(),
            Source::Directory(Location::Local(latin1.into()))
        );
        assert_eq!(
            Source::parse("/x/y.zarr.zip").unwrap(),
            Source::Zip(Location::Local("/x/y.zarr.zip".into()))
        );
        assert_eq!(Source::parse("a.OZX").unwrap(), Source::Zip(Location::Local("a.OZX".into())));
        assert!(matches!(
            Source::parse("s3://b/p.zarr").unwrap(),
            Source::Directory(Location::Remote { cloud: Cloud::S3, .. })
        ));
        assert!(matches!(
            Source::parse("gs://b/x.zip").unwrap(),
            Source::Zip(Location::Remote { cloud: Cloud::Gcs, .. })
        ));
        assert!(matches!(
            Source::parse("zip+https://h/data").unwrap(),
            Source::Zip(Location::Remote { cloud: Cloud::Http, .. })
        ));
        assert!(matches!(
            Source::parse("az://c/p").unwrap(),
            Source::Directory(Location::Remote { cloud: Cloud::Azure, .. })
        ));
        assert_eq!(
            Source::parse("ftp://h/x"),
            Err(LocationError::UnknownScheme("ftp".into()).into())
        );
        assert!(matches!(
            Source::parse("s3:///x"),
            Err(SourceError::Location(LocationError::NoBucket(_)))
        ));
        assert_eq!(Source::parse(""), Err(SourceError::Empty));
        assert_eq!(
            Source::parse("refs/combined.JSON").unwrap(),
            Source::Reference(Location::Local("refs/combined.JSON".into()))
        );
        assert_eq!(
            Source::parse("/d/refs.parq/").unwrap(),
            Source::Reference(Location::Local("/d/refs.parq/".into()))
        );
        assert!(matches!(
            Source::parse("s3://b/x/refs.parquet").unwrap(),
            Source::Reference(Location::Remote { cloud: Cloud::S3, .. })
        ));
        assert_eq!(
            Source::parse("icechunk+file:///r/repo").unwrap(),
            Source::Icechunk(Location::Local("/r/repo".into()))
        );
        assert!(matches!(
            Source::parse("icechunk+s3://b/repo").unwrap(),
            Source::Icechunk(Location::Remote { cloud: Cloud::S3, .. })
        ));
        assert!(matches!(
            Source::parse("reference+gs://b/kerchunk_refs").unwrap(),
            Source::Reference(Location::Remote { cloud: Cloud::Gcs, .. })
        ));
    }
}
