//! The error types for malformed or unsupported Zarr metadata documents and for data
//! types and fill values (kept here, below every other module, so none imports in a circle).

use thiserror::Error;

/// Why a `zarr.json` / `.zarray` document (or a part of it) could not be parsed.
///
/// The caller normally reacts by passing the node through untouched, so these
/// describe the problem for a log line rather than for recovery.
#[derive(Debug, Error)]
pub enum MetadataError {
    #[error("invalid JSON: {0}")]
    InvalidJson(#[from] crate::python_json::Error),
    #[error("metadata document is not a JSON object")]
    NotAnObject,
    #[error("missing required field `{0}`")]
    MissingField(&'static str),
    #[error("field `{field}` is invalid: expected {expected}")]
    InvalidField { field: &'static str, expected: &'static str },
    #[error("unsupported zarr_format {0}")]
    UnsupportedZarrFormat(String),
    #[error("unknown node_type {0}")]
    UnknownNodeType(String),
    #[error("shape has rank {shape} but chunk_shape has rank {chunk_shape}")]
    RankMismatch { shape: usize, chunk_shape: usize },
    #[error("unsupported chunk_key_encoding {0}")]
    UnsupportedChunkKeyEncoding(String),
    #[error(transparent)]
    DataType(#[from] DataTypeError),
    #[error("invalid chunk key separator {0}")]
    InvalidSeparator(String),
    #[error("rectilinear chunk grid: {0}")]
    Rectilinear(#[from] GridError),
    /// Consolidated metadata (v3 inline or v2 `.zmetadata`) that does not describe a hierarchy.
    #[error("consolidated metadata: {0}")]
    Consolidated(String),
}

/// What is wrong with a `rectilinear` chunk grid's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GridError {
    #[error("kind {0} is not \"inline\"")]
    Kind(String),
    #[error("{grid} dimensions in chunk_shapes, {shape} in the array's shape")]
    Rank { grid: usize, shape: usize },
    #[error("dimension {dim}: invalid chunk length {value} (expected a positive integer or a [length, count] pair of them)")]
    BadLength { dim: usize, value: String },
    #[error("dimension {dim}: no chunk lengths")]
    NoLengths { dim: usize },
    #[error("dimension {dim}: the chunk lengths sum to {sum}, short of the extent {extent}")]
    Short { dim: usize, sum: u64, extent: u64 },
}

/// Why a data type or a fill value cannot be used. Every message is one line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DataTypeError {
    #[error("unsupported data type {0}")]
    Unsupported(String),
    #[error("invalid fill value for {data_type}: {reason}")]
    InvalidFillValue { data_type: String, reason: String },
}
