//! The walk both view namespaces (`unsharded`, `presented`) make from the root towards a
//! path: each directory on the way is classified from its metadata documents (once per
//! metadata TTL, kept in a `TtlCache`), and the walk stops at the first array, where the rest
//! of the path is inside it, or where the namespace says no array can lie further down.

use async_trait::async_trait;

use super::error::FsResult;
use crate::store::join_key;
use crate::ttl_cache::TtlCache;

/// What the walk does at a directory of a given kind.
pub(super) enum Step<A> {
    /// Go on towards the path.
    Descend,
    /// The directory is this array: the rest of the path is inside it.
    Enter(A),
    /// Nothing below can be an array: the path is outside every array.
    Stop,
}

/// Where a path sits relative to the arrays of a view.
pub(super) enum Place<K, A> {
    /// Inside the array at `dir`, at `rel` (relative to the array directory, non-empty).
    InArray { dir: String, array: A, rel: String },
    /// Anywhere else; `parent` is the kind of the path's parent directory (or of the
    /// directory where the walk stopped).
    Outside { parent: K },
}

/// A namespace whose directories have kinds (what their metadata makes them), walked to
/// place paths. Implementors give the cache, how to read a kind and what a kind means to the
/// walk; `dir_kind` and `place` are the shared machinery.
#[async_trait]
pub(super) trait DirWalk: Sync {
    type Kind: Clone + Send + Sync;
    type Array: Send;

    /// Kinds read lately, trusted for the metadata TTL.
    fn kinds(&self) -> &TtlCache<Self::Kind>;

    /// Read what `dir` is (uncached).
    async fn read_kind(&self, dir: &str) -> FsResult<Self::Kind>;

    /// What the walk does at a directory of this kind.
    fn step(kind: &Self::Kind) -> FsResult<Step<Self::Array>>;

    /// What `dir` is (cached for the metadata TTL).
    async fn dir_kind(&self, dir: &str) -> FsResult<Self::Kind> {
        if let Some(kind) = self.kinds().get(dir) {
            return Ok(kind);
        }
        let kind = self.read_kind(dir).await?;
        self.kinds().put(dir.to_string(), kind.clone());
        Ok(kind)
    }

    /// Walk from the root towards `path` (non-empty), stopping at the first array on the way.
    async fn place(&self, path: &str) -> FsResult<Place<Self::Kind, Self::Array>> {
        let mut dir = String::new();
        let mut kind = self.dir_kind("").await?;
        let comps: Vec<&str> = path.split('/').collect();
        for (i, comp) in comps.iter().enumerate() {
            match Self::step(&kind)? {
                Step::Enter(array) => {
                    return Ok(Place::InArray { dir, array, rel: comps[i..].join("/") });
                }
                Step::Stop => break,
                Step::Descend => {}
            }
            if i + 1 == comps.len() {
                break;
            }
            dir = join_key(&dir, comp);
            kind = self.dir_kind(&dir).await?;
        }
        Ok(Place::Outside { parent: kind })
    }
}
