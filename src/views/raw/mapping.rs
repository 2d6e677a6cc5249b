//! Lookups inside an array's chunk tree, decided from the array's metadata alone. Once the
//! array's `zarr.json` (or `.zarray`) is known, a name under the array that the chunk tree
//! calls a directory is one without asking the store (on an object store a directory is only
//! a prefix: if no chunk lies below, it lists empty), and a chunk file needs only its own
//! metadata, not a directory probe as well. Names the tree does not own, or owns outside the
//! grid, are looked up as usual. Pure: the fs layer keeps the trees and asks the store.

use crate::zarr::chunk_tree::ChunkTree;

/// What the chunk tree says a path under an array is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeLookup {
    /// A directory of the tree inside the grid: a directory, no request needed.
    Dir,
    /// A chunk key inside the grid: a file if its object exists, else absent.
    ChunkFile,
    /// Not the tree's (metadata, stray keys, coordinates outside the grid): ask as usual.
    Outside,
}

/// Classify `rel`, a path relative to the array directory (non-empty, no leading `/`).
pub fn classify(tree: &ChunkTree, rel: &str) -> TreeLookup {
    if rel.is_empty() {
        return TreeLookup::Outside;
    }
    if tree.chunk(rel).is_some() {
        TreeLookup::ChunkFile
    } else if tree.dir(rel).is_some() {
        TreeLookup::Dir
    } else {
        TreeLookup::Outside
    }
}

/// The directories that may hold `path` inside their chunk tree, nearest first, each with
/// the rest of the path relative to it (`""` for the root). A chunk tree is at most as deep
/// as the array's rank plus one (`c/`), so `max_depth` bounds how far up to look.
pub fn ancestors(path: &str, max_depth: usize) -> impl Iterator<Item = (&str, &str)> {
    let mut end = Some(path.len());
    let mut steps = 0;
    std::iter::from_fn(move || {
        let e = end?;
        if steps >= max_depth {
            return None;
        }
        steps += 1;
        match path[..e].rfind('/') {
            Some(i) => {
                end = Some(i);
                Some((&path[..i], &path[i + 1..]))
            }
            None => {
                end = None;
                (e > 0).then_some(("", path))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::chunk_key::ChunkKeyEncoding;

    const D_SLASH: ChunkKeyEncoding = ChunkKeyEncoding::Default { separator: '/' };
    const V2_SLASH: ChunkKeyEncoding = ChunkKeyEncoding::V2 { separator: '/' };
    const V2_DOT: ChunkKeyEncoding = ChunkKeyEncoding::V2 { separator: '.' };

    #[test]
    fn tree_names_inside_the_grid_only() {
        let t = ChunkTree::new(D_SLASH, vec![2, 3]);
        assert_eq!(classify(&t, "c"), TreeLookup::Dir);
        assert_eq!(classify(&t, "c/1"), TreeLookup::Dir);
        assert_eq!(classify(&t, "c/1/2"), TreeLookup::ChunkFile);
        for other in ["", "c/2", "c/1/3", "c/1/2/0", "c/x", "zarr.json", "d", "c/01"] {
            assert_eq!(classify(&t, other), TreeLookup::Outside, "{other}");
        }
        let v2 = ChunkTree::new(V2_SLASH, vec![2, 2]);
        assert_eq!(classify(&v2, "1"), TreeLookup::Dir);
        assert_eq!(classify(&v2, "1/0"), TreeLookup::ChunkFile);
        assert_eq!(classify(&v2, ".zarray"), TreeLookup::Outside);
        assert_eq!(classify(&v2, "2"), TreeLookup::Outside);
        let flat = ChunkTree::new(V2_DOT, vec![2, 2]);
        assert_eq!(classify(&flat, "1.1"), TreeLookup::ChunkFile);
        assert_eq!(classify(&flat, "1"), TreeLookup::Outside);
    }

    #[test]
    fn ancestors_nearest_first() {
        let all: Vec<_> = ancestors("g/a/c/0/1", 10).collect();
        assert_eq!(
            all,
            [
                ("g/a/c/0", "1"),
                ("g/a/c", "0/1"),
                ("g/a", "c/0/1"),
                ("g", "a/c/0/1"),
                ("", "g/a/c/0/1")
            ]
        );
        assert_eq!(ancestors("g/a/c/0/1", 2).count(), 2);
        assert_eq!(ancestors("x", 5).collect::<Vec<_>>(), [("", "x")]);
        assert_eq!(ancestors("", 5).count(), 0);
    }
}
