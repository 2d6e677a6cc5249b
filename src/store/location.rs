//! Where a store's bytes are: a local path or an object-store URL (the SOURCE's location, and
//! the target URLs of reference stores). Pure: no I/O here.

use std::path::PathBuf;

/// An object-store URL scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cloud {
    S3,
    Gcs,
    Azure,
    Http,
}

/// Where the store's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A local directory or file (absolute or relative path).
    Local(PathBuf),
    /// An object-store URL, e.g. `s3://bucket/prefix`.
    Remote { cloud: Cloud, url: String },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LocationError {
    #[error("unsupported URL scheme {0:?} (use a path, file://, s3://, gs://, az://, http(s):// zip+<url>, reference+<url> or icechunk+<url>)")]
    UnknownScheme(String),
    #[error("file:// URLs must be absolute (file:///path)")]
    RelativeFileUrl,
    #[error("{0} has no bucket or host")]
    NoBucket(String),
}

/// A path or URL as a location (also used for the target URLs of reference stores).
pub fn parse_location(s: &str) -> Result<Location, LocationError> {
    let Some((scheme, rest)) = s.split_once("://") else {
        return Ok(Location::Local(PathBuf::from(s)));
    };
    let cloud = match scheme.to_ascii_lowercase().as_str() {
        "file" => {
            if !rest.starts_with('/') {
                return Err(LocationError::RelativeFileUrl);
            }
            return Ok(Location::Local(percent_decode(rest)));
        }
        "s3" | "s3a" => Cloud::S3,
        "gs" | "gcs" => Cloud::Gcs,
        "az" | "azure" | "abfs" | "abfss" | "adl" => Cloud::Azure,
        "http" | "https" => Cloud::Http,
        other => return Err(LocationError::UnknownScheme(other.to_string())),
    };
    if rest.split('/').next().unwrap_or("").is_empty() {
        return Err(LocationError::NoBucket(s.to_string()));
    }
    Ok(Location::Remote { cloud, url: s.to_string() })
}

/// `%20` and friends in file:// URLs, decoded to the path's bytes (which need not be UTF-8);
/// a `%` not followed by two hex digits stays as it is.
fn percent_decode(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(s).collect();
    PathBuf::from(std::ffi::OsString::from_vec(bytes))
}
