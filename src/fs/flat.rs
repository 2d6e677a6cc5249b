//! `--view flat` on the fs side: a namespace over the unsharded view where every array
//! directory is replaced by its files (`view::flat`: `NAME.npy` and the other formats) in
//! its parent, groups and other directories stay directories without their Zarr documents,
//! and a flat file's read assembles the chunks under the bytes asked (`fs::flat_read`).
//! Read-only.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{self, StreamExt};
use serde_json::{Map, Value};

use super::decoded_cache::DecodedCache;
use super::error::{FsError, FsResult};
use super::namespace::{slice_for_read, Namespace};
use super::presented::read_doc;
use super::regions::ChunkSource;
use super::walk::{self, DirWalk, Step};
use crate::store::{join_key, split_key};
use crate::ttl_cache::TtlCache;
use crate::view::flat::{array_files, FlatArray, FlatFile, GROUP_FORMATS};
use crate::view::node::{Backing, Node};
use crate::zarr::metadata::{parse_zarr_json, NodeMetadata};
use crate::zarr::v2::V2Array;

const KIND_CACHE: usize = 65_536;
/// Child directories classified at once when listing.
const CHECK_CONCURRENCY: usize = 16;
const READ_ONLY: FsError = FsError::ReadOnly("this view is read-only");
/// Zarr documents, not shown: the files say what they hold.
const ZARR_DOCS: [&str; 5] = ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"];
/// The name of the files of an array at the root of the mount (it has no name of its own).
pub const ROOT_ARRAY_NAME: &str = "array";

/// What a directory of the view below is to this view.
#[derive(Clone)]
pub(super) struct Kind {
    /// An array (its directory is not shown) and whether the view can read it.
    array: Option<Option<Arc<FlatArray>>>,
    /// The files shown beside the directory (in its parent): an array's, or a group's.
    files: Arc<Vec<(String, Arc<FlatFile>)>>,
    modified: SystemTime,
}

type Place = walk::Place<Kind, ()>;

pub struct FlatNamespace {
    below: Arc<dyn Namespace>,
    kinds: TtlCache<Kind>,
    decoded: DecodedCache,
}

#[async_trait]
impl DirWalk for FlatNamespace {
    type Kind = Kind;
    type Array = ();

    fn kinds(&self) -> &TtlCache<Kind> {
        &self.kinds
    }

    async fn read_kind(&self, dir: &str) -> FsResult<Kind> {
        let below = self.below.as_ref();
        let name = match split_key(dir).1 {
            "" => ROOT_ARRAY_NAME,
            name => name,
        };
        let mut kind =
            Kind { array: None, files: Arc::default(), modified: SystemTime::UNIX_EPOCH };
        let attrs_of = |doc: Option<(Bytes, SystemTime)>| match doc {
            Some((b, _)) => match serde_json::from_slice(&b) {
                Ok(Value::Object(m)) => m,
                _ => Map::new(),
            },
            None => Map::new(),
        };
        let (array, group) =
            if let Some((doc, modified)) = read_doc(below, dir, "zarr.json").await? {
                kind.modified = modified;
                match parse_zarr_json(&doc) {
                    Ok(NodeMetadata::Array(meta)) => (Some(FlatArray::from_v3(&meta)), None),
                    Ok(NodeMetadata::Group(g)) => (None, Some(g.json)),
                    Err(_) => (None, None), // the view below already logged it
                }
            } else if let Some((doc, modified)) = read_doc(below, dir, ".zarray").await? {
                kind.modified = modified;
                let zattrs = attrs_of(read_doc(below, dir, ".zattrs").await?);
                let array = V2Array::parse(&doc).map_err(|e| e.to_string());
                (Some(array.and_then(|a| FlatArray::from_v2(&a, zattrs))), None)
            } else if let Some((_, modified)) = read_doc(below, dir, ".zgroup").await? {
                kind.modified = modified;
                (None, Some(attrs_of(read_doc(below, dir, ".zattrs").await?)))
            } else {
                (None, None)
            };
        match array {
            Some(Ok(array)) => {
                let array = Arc::new(array);
                let files = array_files(dir, name, &array);
                kind.files = Arc::new(files.into_iter().map(|(n, f)| (n, Arc::new(f))).collect());
                kind.array = Some(Some(array));
            }
            Some(Err(why)) => {
                tracing::info!(array = ?dir, reason = %why, "array left out of the flat view");
                kind.array = Some(None);
            }
            None => {}
        }
        if let Some(group) = group {
            kind.files = Arc::new(self.group_files(dir, name, &group).await?);
        }
        Ok(kind)
    }

    /// Nothing inside an array directory is shown.
    fn step(kind: &Kind) -> FsResult<Step<()>> {
        Ok(if kind.array.is_some() { Step::Enter(()) } else { Step::Descend })
    }
}

impl FlatNamespace {
    /// `cache_bytes` bounds the decoded chunks kept (see docs/VIEWS.md for the budget).
    pub fn new(below: Arc<dyn Namespace>, ttl: Duration, cache_bytes: usize) -> Self {
        FlatNamespace {
            below,
            kinds: TtlCache::new(KIND_CACHE, ttl),
            decoded: DecodedCache::new(cache_bytes),
        }
    }

    fn source(&self) -> ChunkSource<'_> {
        ChunkSource { below: self.below.as_ref(), cache: &self.decoded }
    }

    /// The files of the group formats of group `dir` (named `name`) with attributes `group`.
    async fn group_files(
        &self,
        dir: &str,
        name: &str,
        group: &Map<String, Value>,
    ) -> FsResult<Vec<(String, Arc<FlatFile>)>> {
        let mut out = Vec::new();
        'formats: for format in GROUP_FORMATS {
            let rels = format.arrays(group);
            if rels.is_empty() {
                continue;
            }
            let (mut dirs, mut arrays) = (Vec::new(), Vec::new());
            for rel in rels {
                let array_dir = join_key(dir, &rel);
                match self.dir_kind(&array_dir).await?.array {
                    Some(Some(array)) => arrays.push(array),
                    _ => {
                        tracing::info!(group = ?dir, format = format.suffix(), array = ?rel,
                            "no flat file: an array it needs cannot be read");
                        continue 'formats;
                    }
                }
                dirs.push(array_dir);
            }
            match format.layout(group, &arrays) {
                Ok(Some(layout)) => {
                    let file = FlatFile { layout, dirs, arrays };
                    out.push((format!("{name}{}", format.suffix()), Arc::new(file)));
                }
                Ok(None) => {}
                Err(why) => {
                    tracing::info!(group = ?dir, format = format.suffix(), reason = %why, "no flat file")
                }
            }
        }
        Ok(out)
    }

    /// The flat file `name` of directory `dir`, if one of its children shows it.
    async fn flat_file(&self, dir: &str, name: &str) -> FsResult<Option<Node>> {
        for owner in crate::view::flat::owners(name) {
            let kind = self.dir_kind(&join_key(dir, owner)).await?;
            if let Some((_, file)) = kind.files.iter().find(|(n, _)| n == name) {
                return Ok(Some(file_node(file, kind.modified)));
            }
        }
        Ok(None)
    }

    /// Whether the root of the mount is an array (shown as the files of [`ROOT_ARRAY_NAME`]).
    async fn root_array(&self) -> FsResult<Option<Kind>> {
        let kind = self.dir_kind("").await?;
        Ok(kind.array.is_some().then_some(kind))
    }

    /// Drop Zarr documents and array directories from a listing of `dir` and add the files
    /// of its children.
    async fn flatten(
        &self,
        dir: &str,
        entries: Vec<(String, Node)>,
    ) -> FsResult<Vec<(String, Node)>> {
        let checked: Vec<FsResult<Vec<(String, Node)>>> = stream::iter(entries)
            .filter(|(name, _)| std::future::ready(!ZARR_DOCS.contains(&name.as_str())))
            .map(|(name, node)| async move {
                if !node.is_dir() {
                    return Ok(vec![(name, node)]);
                }
                let kind = self.dir_kind(&join_key(dir, &name)).await?;
                let mut out: Vec<(String, Node)> = kind
                    .files
                    .iter()
                    .map(|(n, f)| (n.clone(), file_node(f, kind.modified)))
                    .collect();
                if kind.array.is_none() {
                    out.push((name, node));
                }
                Ok(out)
            })
            .buffered(CHECK_CONCURRENCY)
            .collect()
            .await;
        let mut out: Vec<(String, Node)> =
            checked.into_iter().collect::<FsResult<Vec<_>>>()?.into_iter().flatten().collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.dedup_by(|a, b| a.0 == b.0);
        Ok(out)
    }
}

fn file_node(file: &Arc<FlatFile>, modified: SystemTime) -> Node {
    Node { size: file.layout.size, modified, backing: Backing::Flat(file.clone()) }
}

#[async_trait]
impl Namespace for FlatNamespace {
    async fn lookup(&self, path: &str) -> FsResult<Option<Node>> {
        if path.is_empty() {
            return self.below.lookup(path).await;
        }
        let (dir, name) = split_key(path);
        if let Some(root) = self.root_array().await? {
            let file = root.files.iter().find(|(n, _)| dir.is_empty() && n == name);
            return Ok(file.map(|(_, f)| file_node(f, root.modified)));
        }
        let place = match self.place(path).await {
            Err(FsError::NotFound) => return Ok(None),
            other => other?,
        };
        if let Place::InArray { .. } = place {
            return Ok(None);
        }
        if ZARR_DOCS.contains(&name) {
            return Ok(None);
        }
        if let Some(node) = self.flat_file(dir, name).await? {
            return Ok(Some(node));
        }
        match self.below.lookup(path).await? {
            Some(node) if node.is_dir() && self.dir_kind(path).await?.array.is_some() => Ok(None),
            other => Ok(other),
        }
    }

    async fn list(&self, dir: &str) -> FsResult<Vec<(String, Node)>> {
        if let Some(root) = self.root_array().await? {
            if !dir.is_empty() {
                return Err(FsError::NotFound);
            }
            let files = root.files.iter().map(|(n, f)| (n.clone(), file_node(f, root.modified)));
            return Ok(files.collect());
        }
        if !dir.is_empty() {
            match self.place(dir).await? {
                Place::InArray { .. } => return Err(FsError::NotFound),
                Place::Outside { .. } if self.dir_kind(dir).await?.array.is_some() => {
                    return Err(FsError::NotFound)
                }
                Place::Outside { .. } => {}
            }
        }
        let entries = self.below.list(dir).await?;
        self.flatten(dir, entries).await
    }

    async fn read(&self, path: &str, node: &Node, offset: u64, size: u32) -> FsResult<Bytes> {
        match &node.backing {
            Backing::Flat(file) => self.source().read_flat(path, file, offset, size).await,
            Backing::Generated(bytes) => Ok(slice_for_read(bytes, offset, size)),
            _ => self.below.read(path, node, offset, size).await,
        }
    }

    async fn check_writable(&self, _path: &str) -> FsResult<()> {
        Err(READ_ONLY)
    }

    async fn write_file(&self, _path: &str, _data: Bytes) -> FsResult<()> {
        Err(READ_ONLY)
    }

    async fn create_file(&self, _path: &str, _data: Bytes) -> FsResult<()> {
        Err(READ_ONLY)
    }

    async fn remove_file(&self, _path: &str) -> FsResult<()> {
        Err(READ_ONLY)
    }

    async fn rename(&self, _from: &str, _to: &str, _is_dir: bool) -> FsResult<()> {
        Err(READ_ONLY)
    }

    async fn mkdir(&self, _path: &str) -> FsResult<()> {
        Err(READ_ONLY)
    }

    async fn rmdir(&self, _path: &str) -> FsResult<()> {
        Err(READ_ONLY)
    }

    fn capacity(&self) -> Option<(u64, u64)> {
        self.below.capacity()
    }
}
