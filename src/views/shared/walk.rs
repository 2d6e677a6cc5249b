//! The walk both view namespaces (`unsharded`, `presented`) make from the root towards a
//! path: each directory on the way is classified from its metadata documents (once per
//! metadata TTL, kept in a `TtlCache`), and the walk stops at the first array, where the rest
//! of the path is inside it, or where the namespace says no array can lie further down.

use std::future::Future;

use async_trait::async_trait;
use futures::stream::{self, StreamExt};

use crate::store::join_key;
use crate::ttl_cache::TtlCache;
use crate::views::shared::error::FsResult;
use crate::views::shared::mapping::node::Node;

/// Child directories of a listing classified at once.
const CHECK_CONCURRENCY: usize = 16;

/// The entries of a listing, each replaced by what `check` makes of it (often from the kind of
/// a child directory), a few checked at once, in the listing's order; the first error fails
/// the listing.
pub(in crate::views) async fn check_entries<F, Fut>(
    entries: impl IntoIterator<Item = (String, Node)>,
    check: F,
) -> FsResult<Vec<(String, Node)>>
where
    F: FnMut((String, Node)) -> Fut,
    Fut: Future<Output = FsResult<Vec<(String, Node)>>>,
{
    let checked: Vec<FsResult<Vec<(String, Node)>>> =
        stream::iter(entries).map(check).buffered(CHECK_CONCURRENCY).collect().await;
    Ok(checked.into_iter().collect::<FsResult<Vec<_>>>()?.into_iter().flatten().collect())
}

/// What the walk does at a directory of a given kind.
pub(in crate::views) enum Step<A> {
    /// Go on towards the path.
    Descend,
    /// The directory is this array: the rest of the path is inside it.
    Enter(A),
    /// Nothing below can be an array: the path is outside every array.
    Stop,
}

/// Where a path sits relative to the arrays of a view.
pub(in crate::views) enum Place<K, A> {
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
pub(in crate::views) trait DirWalk: Sync {
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::views::shared::error::FsError;

    /// Directories of a made-up store: `A` an array, `P` an array not entered, `H` hidden.
    struct Fake {
        kinds: TtlCache<char>,
        dirs: HashMap<&'static str, char>,
        reads: AtomicUsize,
    }

    #[async_trait]
    impl DirWalk for Fake {
        type Kind = char;
        type Array = ();

        fn kinds(&self) -> &TtlCache<char> {
            &self.kinds
        }

        async fn read_kind(&self, dir: &str) -> FsResult<char> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            Ok(self.dirs.get(dir).copied().unwrap_or('-'))
        }

        fn step(kind: &char) -> FsResult<Step<()>> {
            match kind {
                'A' => Ok(Step::Enter(())),
                'P' => Ok(Step::Stop),
                'H' => Err(FsError::NotFound),
                _ => Ok(Step::Descend),
            }
        }
    }

    fn fake(ttl: Duration) -> Fake {
        let dirs = HashMap::from([("g", 'g'), ("g/arr", 'A'), ("p", 'P'), ("h", 'H')]);
        Fake { kinds: TtlCache::new(16, ttl), dirs, reads: AtomicUsize::new(0) }
    }

    fn in_array(place: Place<char, ()>) -> Option<(String, String)> {
        match place {
            Place::InArray { dir, rel, .. } => Some((dir, rel)),
            Place::Outside { .. } => None,
        }
    }

    fn parent(place: Place<char, ()>) -> Option<char> {
        match place {
            Place::Outside { parent } => Some(parent),
            Place::InArray { .. } => None,
        }
    }

    #[tokio::test]
    async fn stops_at_the_first_array() {
        let f = fake(Duration::from_secs(3600));
        let placed = in_array(f.place("g/arr/c/1/2").await.unwrap());
        assert_eq!(placed, Some(("g/arr".into(), "c/1/2".into())));
        assert_eq!(parent(f.place("g/arr").await.unwrap()), Some('g'), "the array dir itself");
        assert_eq!(parent(f.place("g/x").await.unwrap()), Some('g'));
        assert_eq!(parent(f.place("x").await.unwrap()), Some('-'));
        // Below an array not entered the walk stops: its kind is the parent's.
        assert_eq!(parent(f.place("p/q/r").await.unwrap()), Some('P'));
        assert!(matches!(f.place("h/x").await, Err(FsError::NotFound)));
        assert!(matches!(f.place("h").await, Ok(Place::Outside { parent: '-' })));
    }

    #[tokio::test]
    async fn kinds_are_read_once_per_ttl() {
        let f = fake(Duration::from_secs(3600));
        f.place("g/arr/c/1").await.unwrap();
        assert_eq!(f.reads.load(Ordering::SeqCst), 3, "root, g, g/arr");
        f.place("g/arr/c/2").await.unwrap();
        assert_eq!(f.reads.load(Ordering::SeqCst), 3, "all cached");
        f.kinds().forget("g/arr");
        f.place("g/arr/c/2").await.unwrap();
        assert_eq!(f.reads.load(Ordering::SeqCst), 4, "only the forgotten one again");
        let uncached = fake(Duration::ZERO);
        uncached.place("g/arr/c/1").await.unwrap();
        uncached.place("g/arr/c/1").await.unwrap();
        assert_eq!(uncached.reads.load(Ordering::SeqCst), 6);
    }
}
