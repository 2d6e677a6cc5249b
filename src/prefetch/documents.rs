//! A Zarr node's metadata documents, fetched while its directory is looked up (the root's while
//! the mount starts): a reader opening the node asks for them next, and then finds them in the
//! cache below.

use std::sync::Arc;

use crate::metrics::Ahead;
use crate::store::{join_key, Store};

/// How much of a metadata document is fetched (a larger one is read as any file is).
pub const DOCUMENT_BYTES: u64 = 1 << 20;

/// Fetch the Zarr metadata documents of the node at `dir` (`""`: the root) into the caches
/// of `store` (see `zarr::METADATA_NAMES`), all at once, each whole up to `DOCUMENT_BYTES`:
/// their lookups and reads are then answered from there, present or absent. Nothing is
/// reported; the reads that follow meet any error themselves.
pub async fn fetch_documents(store: Arc<dyn Store>, dir: String) {
    let fetches = crate::zarr::METADATA_NAMES.iter().map(|name| {
        let key = join_key(&dir, name);
        let store = &store;
        async move { store.prefetch(&key, DOCUMENT_BYTES, Ahead::Documents).await }
    });
    futures::future::join_all(fetches).await;
}

/// A directory name that says "Zarr hierarchy here" (`data.zarr`, `image.ome.zarr`): its
/// lookup also fetches its metadata documents.
pub fn names_zarr_node(name: &str) -> bool {
    name.len() > 5 && name.get(name.len() - 5..).is_some_and(|s| s.eq_ignore_ascii_case(".zarr"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zarr_node_names() {
        assert!(!names_zarr_node(".zarr") && names_zarr_node("x.ome.ZARR"));
        assert!(names_zarr_node("data.zarr") && !names_zarr_node("data.zarr.json"));
    }
}
