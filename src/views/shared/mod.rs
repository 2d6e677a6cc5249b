//! What every view uses: the `Namespace` trait the filesystem and the HTTP front door reach
//! views through, its error type and write body, the walk from the root, decoded chunks and
//! the regions assembled from them; `mapping` holds the pure pieces (nodes, region geometry).

pub mod body;
pub mod decoded_cache;
pub mod error;
pub mod mapping;
pub mod namespace;
pub mod regions;
pub mod walk;
