//! The async side of the re-presenting views (`decoded`, `v2`): reads each directory's metadata
//! documents from the view below, asks the `Presenter` what the directory shows, and serves
//! generated metadata, translated chunk keys and decoded chunks (through `views::shared::regions`),
//! or the tiles of a re-tiled array (`views::presented::namespace::retile`). Read-only: the mapping
//! back to stored bytes is not exact, so every change is EROFS.

mod retile;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

use crate::perms::Perms;
use crate::store::{join_key, split_key};
use crate::ttl_cache::TtlCache;
use crate::views::presented::mapping::{
    ArrayPath, ArrayShow, ChunkShow, DirDocs, DirShow, Files, Presenter, StoredChunks,
};
use crate::views::presented::namespace::retile::TilePath;
use crate::views::shared::decoded_cache::DecodedCache;
use crate::views::shared::error::{FsError, FsResult};
use crate::views::shared::mapping::node::{Backing, Node};
use crate::views::shared::namespace::{
    read_all, reads_last_byte, slice_for_read, Namespace, ReadOnlyView,
};
use crate::views::shared::regions::{is_absent, ChunkSource};
use crate::views::shared::walk::{self, DirWalk, Step};
use crate::zarr::codecs::{BytesChain, CodecError};

const SHOW_CACHE: usize = 65_536;

pub struct PresentedNamespace {
    below: Arc<dyn Namespace>,
    presenter: Box<dyn Presenter>,
    shows: TtlCache<Shown>,
    decoded: DecodedCache,
}

/// A directory's presentation and the time its metadata last changed (for generated files).
#[derive(Clone)]
pub(in crate::views) struct Shown {
    show: DirShow,
    modified: SystemTime,
    /// The mode, owner and group of the first metadata document read (`zarr.json`, else
    /// `.zarray` or `.zgroup`): the documents made from it, the tiles made of the array and
    /// the directories of its chunk tree show them (`inherit`).
    perms: Option<Perms>,
}

/// Where a path sits relative to the arrays of the view.
type Place = walk::Place<Shown, Arc<ArrayShow>>;

#[async_trait]
impl DirWalk for PresentedNamespace {
    type Kind = Shown;
    type Array = Arc<ArrayShow>;

    fn kinds(&self) -> &TtlCache<Shown> {
        &self.shows
    }

    /// How `dir` shows, from its metadata documents in the view below.
    async fn read_kind(&self, dir: &str) -> FsResult<Shown> {
        let mut docs = DirDocs::default();
        let mut modified = SystemTime::UNIX_EPOCH;
        let mut perms = None;
        let mut keep = |doc: Option<Doc>| {
            doc.map(|(bytes, m, p)| {
                modified = modified.max(m);
                perms = perms.or(p);
                bytes
            })
        };
        docs.zarr_json = keep(self.read_doc(dir, DirDocs::V3_NAME).await?);
        if docs.zarr_json.is_none() {
            let [zarray, zgroup, zmetadata] = DirDocs::V2_NAMES;
            docs.zarray = keep(self.read_doc(dir, zarray).await?);
            if docs.zarray.is_none() {
                docs.zgroup = keep(self.read_doc(dir, zgroup).await?);
                if docs.zgroup.is_some() {
                    docs.zmetadata = keep(self.read_doc(dir, zmetadata).await?);
                }
            }
        }
        Ok(Shown { show: self.presenter.present(dir, &docs), modified, perms })
    }

    /// Paths inside an array are the view's; a hidden directory and all below it is absent.
    fn step(shown: &Shown) -> FsResult<Step<Arc<ArrayShow>>> {
        Ok(match &shown.show {
            DirShow::Array(show) => Step::Enter(show.clone()),
            DirShow::Hidden => return Err(FsError::NotFound),
            DirShow::Group(_) | DirShow::PassThrough => Step::Descend,
        })
    }
}

impl PresentedNamespace {
    pub fn new(
        below: Arc<dyn Namespace>,
        presenter: Box<dyn Presenter>,
        ttl: Duration,
        cache_bytes: usize,
    ) -> Self {
        PresentedNamespace {
            below,
            presenter,
            shows: TtlCache::new(SHOW_CACHE, ttl),
            decoded: DecodedCache::new(cache_bytes),
        }
    }

    async fn read_doc(&self, dir: &str, name: &str) -> FsResult<Option<Doc>> {
        read_doc(self.below.as_ref(), dir, name).await
    }

    /// Stored chunks of the view below, decoded through this view's cache.
    fn source(&self) -> ChunkSource<'_> {
        ChunkSource { below: self.below.as_ref(), cache: &self.decoded }
    }

    /// The path of the view below that backs `path` (they differ for translated chunk keys).
    async fn below_path(&self, path: &str) -> FsResult<String> {
        if path.is_empty() {
            return Ok(String::new());
        }
        let Place::InArray { dir, array: show, rel } = self.place(path).await? else {
            return Ok(path.to_string());
        };
        Ok(match &show.chunks {
            ChunkShow::Stored(stored) => match stored.keys.resolve(&rel) {
                ArrayPath::Chunk(key) => join_key(&dir, &key),
                ArrayPath::ChunkDir(below) => join_key(&dir, &below),
                ArrayPath::Replaced => return Err(FsError::NotFound),
                ArrayPath::Other => path.to_string(),
            },
            // Tiles are read from their sources; only other names are the same path below.
            ChunkShow::Retiled(r) if r.shown.owns(&rel) || r.below.owns(&rel) => {
                return Err(FsError::NotFound)
            }
            ChunkShow::Retiled(_) => path.to_string(),
        })
    }

    /// A stored chunk (at `coords` of the grid) as this view serves it.
    async fn chunk_node(
        &self,
        show: &StoredChunks,
        coords: &[u64],
        below: String,
        node: Node,
    ) -> FsResult<Node> {
        if let (Some(chain), None) = (&show.unwrap, &show.decode) {
            let size = match chain.fixed_overhead() {
                // A chunk shorter than its checksums is corrupt: it shows empty, reads give EIO.
                Some(overhead) => node.size.saturating_sub(overhead),
                // The size depends on the data: decode now (cached for the reads).
                None => self.unwrapped(&below, &node, chain).await?.len() as u64,
            };
            return Ok(Node {
                size,
                modified: node.modified,
                perms: node.perms,
                backing: Backing::Unwrapped {
                    below,
                    encoded: Box::new(node),
                    chain: chain.clone(),
                },
            });
        }
        let Some(specs) = &show.decode else { return Ok(node) };
        let spec = specs.of(coords).ok_or(FsError::NotFound)?;
        let size = spec.decoded_size().map_err(|e| FsError::Corrupt(format!("{below}: {e}")))?;
        Ok(Node {
            size,
            modified: node.modified,
            perms: node.perms,
            backing: Backing::Decoded { below, encoded: Box::new(node), spec },
        })
    }

    /// An entry of a listing inside an array: chunk files get the chunk treatment.
    async fn array_entry(
        &self,
        show: &StoredChunks,
        shown_rel: &str,
        below: String,
        node: Node,
    ) -> FsResult<Node> {
        match show.keys.chunk_coords(shown_rel) {
            Some(coords) if !node.is_dir() => self.chunk_node(show, &coords, below, node).await,
            _ => Ok(node),
        }
    }

    async fn lookup_in_array(
        &self,
        dir: &str,
        show: &ArrayShow,
        rel: &str,
        modified: SystemTime,
    ) -> FsResult<Option<Node>> {
        if let Some(bytes) = show.files.get(rel) {
            return Ok(Some(Node::generated(bytes, modified)));
        }
        if show.files.hides(rel) {
            return Ok(None);
        }
        let show = match &show.chunks {
            ChunkShow::Stored(stored) => stored,
            ChunkShow::Retiled(r) => {
                return match self.source().tile_path(dir, r, rel, modified).await? {
                    TilePath::Tree(node) => Ok(node),
                    TilePath::Hidden => Ok(None),
                    TilePath::Other => self.below.lookup(&join_key(dir, rel)).await,
                };
            }
        };
        match show.keys.resolve(rel) {
            ArrayPath::Chunk(key) => {
                let below = join_key(dir, &key);
                match (self.below.lookup(&below).await?, show.keys.chunk_coords(rel)) {
                    (Some(node), Some(coords)) if !node.is_dir() => {
                        self.chunk_node(show, &coords, below, node).await.map(Some)
                    }
                    (other, _) => Ok(other),
                }
            }
            ArrayPath::ChunkDir(below) => self.below.lookup(&join_key(dir, &below)).await,
            ArrayPath::Replaced => Ok(None),
            ArrayPath::Other => self.below.lookup(&join_key(dir, rel)).await,
        }
    }

    /// The array directory itself: its own entries (chunk keys renamed, replaced names
    /// dropped), the chunk tree's top level, and the generated metadata.
    async fn list_array_dir(
        &self,
        dir: &str,
        show: &ArrayShow,
        modified: SystemTime,
    ) -> FsResult<Vec<(String, Node)>> {
        let mut out = Vec::new();
        let files = &show.files;
        let below = self.below.list(dir).await?;
        let below =
            below.into_iter().filter(|(name, _)| !files.hides(name) && files.get(name).is_none());
        let show = match &show.chunks {
            ChunkShow::Stored(stored) => stored,
            ChunkShow::Retiled(r) => {
                out.extend(below.filter(|(name, _)| !r.shown.owns(name) && !r.below.owns(name)));
                let tiles = self.source().list_tiles(dir, r, "", modified).await?;
                out.extend(tiles.unwrap_or_default());
                add_generated(&mut out, files, modified);
                return Ok(out);
            }
        };
        for (name, node) in below {
            let Some(shown) = show.keys.shown_root_name(&name) else { continue };
            let node = self.array_entry(show, &shown, join_key(dir, &name), node).await?;
            out.push((shown, node));
        }
        if let Some(chunk_dir) = show.keys.root_chunk_dir_below() {
            let below_dir = join_key(dir, chunk_dir);
            let entries = match self.below.list(&below_dir).await {
                Ok(entries) => entries,
                Err(e) if is_absent(&e) => Vec::new(),
                Err(e) => return Err(e),
            };
            for (name, node) in entries {
                let node = self.array_entry(show, &name, join_key(&below_dir, &name), node).await?;
                out.push((name, node));
            }
        }
        add_generated(&mut out, files, modified);
        Ok(out)
    }

    /// What this view shows in `dir`, in no particular order; what the view made shows the
    /// perms of the documents it is made from (`inherit`).
    async fn list_shown(&self, dir: &str) -> FsResult<Vec<(String, Node)>> {
        let (entries, perms) = self.list_made(dir).await?;
        Ok(entries.into_iter().map(|(name, node)| (name, inherit(node, perms))).collect())
    }

    /// `list_shown` before `inherit`, and the perms of the documents of the array or group.
    async fn list_made(&self, dir: &str) -> FsResult<(Vec<(String, Node)>, Option<Perms>)> {
        if !dir.is_empty() {
            if let Place::InArray { dir: array_dir, array: show, rel } = self.place(dir).await? {
                let shown = self.dir_kind(&array_dir).await?;
                let entries = self.list_in_array(&array_dir, &show, &rel, shown.modified).await?;
                return Ok((entries, shown.perms));
            }
        }
        let shown = self.dir_kind(dir).await?;
        let entries = self.list_at(dir, &shown).await?;
        Ok((entries, shown.perms))
    }

    async fn list_at(&self, dir: &str, shown: &Shown) -> FsResult<Vec<(String, Node)>> {
        match &shown.show {
            DirShow::Array(show) => self.list_array_dir(dir, show, shown.modified).await,
            DirShow::Hidden => Err(FsError::NotFound),
            DirShow::Group(files) => {
                let mut entries = self.below.list(dir).await?;
                add_generated(&mut entries, files, shown.modified);
                if self.presenter.may_hide() {
                    entries = self.drop_hidden(dir, entries).await?;
                }
                Ok(entries)
            }
            DirShow::PassThrough => self.below.list(dir).await,
        }
    }

    async fn list_in_array(
        &self,
        dir: &str,
        show: &ArrayShow,
        rel: &str,
        modified: SystemTime,
    ) -> FsResult<Vec<(String, Node)>> {
        let show = match &show.chunks {
            ChunkShow::Stored(stored) => stored,
            ChunkShow::Retiled(r) => {
                if let Some(tiles) = self.source().list_tiles(dir, r, rel, modified).await? {
                    return Ok(tiles);
                }
                return match self.source().tile_path(dir, r, rel, modified).await? {
                    TilePath::Tree(Some(_)) => Err(FsError::NotADirectory),
                    TilePath::Tree(None) | TilePath::Hidden => Err(FsError::NotFound),
                    TilePath::Other => self.below.list(&join_key(dir, rel)).await,
                };
            }
        };
        let below_dir = match show.keys.resolve(rel) {
            ArrayPath::ChunkDir(below) => join_key(dir, &below),
            ArrayPath::Chunk(_) => return Err(FsError::NotADirectory),
            ArrayPath::Replaced => return Err(FsError::NotFound),
            ArrayPath::Other => join_key(dir, rel),
        };
        let mut out = Vec::new();
        for (name, node) in self.below.list(&below_dir).await? {
            let node = self
                .array_entry(show, &join_key(rel, &name), join_key(&below_dir, &name), node)
                .await?;
            out.push((name, node));
        }
        Ok(out)
    }

    /// Drop child directories that this view leaves out.
    async fn drop_hidden(
        &self,
        dir: &str,
        entries: Vec<(String, Node)>,
    ) -> FsResult<Vec<(String, Node)>> {
        walk::check_entries(entries, |(name, node)| async move {
            if node.is_dir() && self.dir_kind(&join_key(dir, &name)).await?.show == DirShow::Hidden
            {
                return Ok(vec![]);
            }
            Ok(vec![(name, node)])
        })
        .await
    }
}

impl PresentedNamespace {
    /// Bytes `offset .. offset + size` of `data`, the decoded-cache entry `key`, which leaves
    /// the cache once reads have covered its last byte and as many bytes as it has.
    fn read_and_let_go(&self, key: &str, data: &Bytes, offset: u64, size: u32) -> Bytes {
        let out = slice_for_read(data, offset, size);
        let len = data.len() as u64;
        self.decoded.note_read(key, out.len() as u64, len, reads_last_byte(offset, size, len));
        out
    }

    /// A stored chunk with its bytes->bytes chain undone: one read of the whole chunk, kept
    /// in the decoded cache. A chain of checksums only gives a slice of that read, no copy.
    async fn unwrapped(&self, below: &str, encoded: &Node, chain: &BytesChain) -> FsResult<Bytes> {
        let key = ChunkSource::decoded_key(below, encoded);
        self.decoded
            .get_or_load(&key, || async {
                let stored = match u32::try_from(encoded.size) {
                    Ok(n) => self.below.read(below, encoded, 0, n).await?,
                    Err(_) => Bytes::from(read_all(self.below.as_ref(), below, encoded).await?),
                };
                let bad = |e: CodecError| {
                    tracing::error!(chunk = %below, error = %e, "cannot unwrap chunk: reads give EIO");
                    FsError::Corrupt(format!("{below}: {e}"))
                };
                if stored.len() as u64 != encoded.size {
                    return Err(bad(CodecError::WrongSize {
                        codec: "read",
                        expected: encoded.size,
                        actual: stored.len() as u64,
                    }));
                }
                chain.decode(stored).map_err(bad)
            })
            .await
    }
}

/// A metadata document: its bytes, modification time and perms.
pub(in crate::views) type Doc = (Bytes, SystemTime, Option<Perms>);

/// One metadata document of `dir`, if `below` has it as a file, with its modification time.
pub(in crate::views) async fn read_doc(
    below: &dyn Namespace,
    dir: &str,
    name: &str,
) -> FsResult<Option<Doc>> {
    let path = join_key(dir, name);
    let node = match below.lookup(&path).await {
        Ok(Some(node)) if !node.is_dir() => node,
        Ok(_) => return Ok(None),
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => return Err(e),
    };
    let bytes = read_all(below, &path, &node).await?;
    Ok(Some((Bytes::from(bytes), node.modified, node.perms)))
}

/// `node` as made by the view from documents with `perms`, unless it has perms of its own
/// (a stored file or directory passed through, a chunk file shown with its stored chunk's).
/// A directory (of a chunk tree) is entered by whoever may read the documents.
fn inherit(node: Node, perms: Option<Perms>) -> Node {
    if node.perms.is_some() {
        return node;
    }
    let perms = if node.is_dir() { perms.map(Perms::as_dir) } else { perms };
    node.with_perms(perms)
}

/// Apply a directory's generated files and hidden names to its listing, and sort it.
fn add_generated(entries: &mut Vec<(String, Node)>, files: &Files, modified: SystemTime) {
    entries.retain(|(name, _)| !files.hides(name) && files.get(name).is_none());
    for (name, bytes) in &files.generated {
        entries.push((name.clone(), Node::generated(bytes, modified)));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries.dedup_by(|a, b| a.0 == b.0);
}

#[async_trait]
impl Namespace for PresentedNamespace {
    async fn lookup(&self, path: &str) -> FsResult<Option<Node>> {
        if path.is_empty() {
            return self.below.lookup(path).await;
        }
        let place = match self.place(path).await {
            Err(FsError::NotFound) => return Ok(None),
            other => other?,
        };
        match place {
            Place::InArray { dir, array: show, rel } => {
                let shown = self.dir_kind(&dir).await?;
                let node = self.lookup_in_array(&dir, &show, &rel, shown.modified).await?;
                Ok(node.map(|node| inherit(node, shown.perms)))
            }
            Place::Outside { parent } => {
                if let DirShow::Group(files) = &parent.show {
                    let name = split_key(path).1;
                    if let Some(bytes) = files.get(name) {
                        let node = Node::generated(bytes, parent.modified);
                        return Ok(Some(node.with_perms(parent.perms)));
                    }
                    if files.hides(name) {
                        return Ok(None);
                    }
                }
                let node = self.below.lookup(path).await?;
                if let Some(n) = &node {
                    if n.is_dir()
                        && self.presenter.may_hide()
                        && self.dir_kind(path).await?.show == DirShow::Hidden
                    {
                        return Ok(None);
                    }
                }
                Ok(node)
            }
        }
    }

    async fn list(&self, dir: &str) -> FsResult<Vec<(String, Node)>> {
        let mut entries = self.list_shown(dir).await?;
        // Generated files and renamed chunk keys come in out of order; the contract is sorted.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(entries)
    }

    async fn read(&self, path: &str, node: &Node, offset: u64, size: u32) -> FsResult<Bytes> {
        match &node.backing {
            Backing::Generated(bytes) => Ok(slice_for_read(bytes, offset, size)),
            // Drop-behind: once reads have covered a chunk file's bytes up to its last, its
            // buffer leaves the decoded cache (a sequential reader is done with it); a re-tiled
            // tile's source chunks, which other tiles share, stay.
            Backing::Decoded { below, encoded, spec } => {
                let data = self.source().decoded(below, encoded, spec).await?;
                let key = ChunkSource::decoded_key(below, encoded);
                Ok(self.read_and_let_go(&key, &data, offset, size))
            }
            Backing::Retiled { tile, sources, retiling } => {
                let data = self.source().read_tile(path, node, tile, sources, retiling).await?;
                let key = ChunkSource::tile_key(path, node);
                Ok(self.read_and_let_go(&key, &data, offset, size))
            }
            Backing::Unwrapped { below, encoded, chain } => {
                let data = self.unwrapped(below, encoded, chain).await?;
                let key = ChunkSource::decoded_key(below, encoded);
                Ok(self.read_and_let_go(&key, &data, offset, size))
            }
            _ => {
                let below = self.below_path(path).await?;
                self.below.read(&below, node, offset, size).await
            }
        }
    }

    fn capacity(&self) -> Option<(u64, u64)> {
        self.below.capacity()
    }

    /// A decoded chunk is fetched ahead in its stored form; decoding waits for its read.
    async fn prefetch(&self, node: &Node) {
        match &node.backing {
            Backing::Decoded { encoded, .. } | Backing::Unwrapped { encoded, .. } => {
                self.below.prefetch(encoded).await
            }
            Backing::Retiled { sources, .. } => {
                for source in sources {
                    self.below.prefetch(&source.node).await;
                }
            }
            _ => self.below.prefetch(node).await,
        }
    }

    /// A whole object passed through (`Backing::Object`) may have one; decoded chunks not.
    fn local_copy(&self, node: &Node) -> Option<std::fs::File> {
        self.below.local_copy(node)
    }
}

impl ReadOnlyView for PresentedNamespace {}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::layers::recording::RecordingStore;
    use crate::store::prelude::*;
    use crate::views::presented::mapping::decoded::DecodedPresenter;
    use crate::views::raw::namespace::RawNamespace;
    use crate::views::unsharded::namespace::UnshardedNamespace;

    /// The `decoded` view of array `a` (64 x 64 uint16 in 32 x 32 chunks, zstd, element
    /// (r, c) = r * 64 + c), the requests reaching the store recorded.
    async fn decoded_view() -> (PresentedNamespace, Arc<RecordingStore>) {
        let mem = Arc::new(MemoryStore::new());
        let meta = json!({"zarr_format": 3, "node_type": "array", "shape": [64, 64],
            "data_type": "uint16", "fill_value": 0,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [32, 32]}},
            "chunk_key_encoding": {"name": "default"},
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": "zstd", "configuration": {"level": 1, "checksum": false}}]});
        mem.put("a/zarr.json", Bytes::from(serde_json::to_vec(&meta).unwrap())).await.unwrap();
        for (i, j) in [(0u64, 0u64), (0, 1), (1, 0), (1, 1)] {
            let mut raw = Vec::new();
            for r in i * 32..i * 32 + 32 {
                for c in j * 32..j * 32 + 32 {
                    raw.extend_from_slice(&((r * 64 + c) as u16).to_le_bytes());
                }
            }
            let chunk = zstd::encode_all(&raw[..], 1).unwrap();
            mem.put(&format!("a/c/{i}/{j}"), Bytes::from(chunk)).await.unwrap();
        }
        let rec = Arc::new(RecordingStore::new(mem));
        let ttl = Duration::from_secs(3600);
        let unsharded = UnshardedNamespace::new(RawNamespace::new(rec.clone()), ttl);
        let view =
            PresentedNamespace::new(Arc::new(unsharded), Box::new(DecodedPresenter), ttl, 1 << 24);
        (view, rec)
    }

    fn gets(calls: &[String]) -> usize {
        calls.iter().filter(|c| c.starts_with("get")).count()
    }

    /// Drop-behind for chunk files: read in kernel-sized pieces, a decoded chunk file is read
    /// and decoded once and its buffer leaves the cache with its last byte; a read that stops
    /// short keeps it (more reads cost nothing).
    #[tokio::test]
    async fn a_chunk_file_read_to_its_end_leaves_the_cache() {
        let (view, rec) = decoded_view().await;
        let node = view.lookup("a/c/0/1").await.unwrap().unwrap();
        assert_eq!(node.size, 32 * 32 * 2);
        let Backing::Decoded { below, encoded, .. } = &node.backing else { panic!("{node:?}") };
        let key = ChunkSource::decoded_key(below, encoded);
        rec.take();
        let mut got = Vec::new();
        while (got.len() as u64) < node.size {
            assert!(got.is_empty() || view.decoded.holds(&key), "held while read");
            got.extend(view.read("a/c/0/1", &node, got.len() as u64, 300).await.unwrap());
        }
        let want: Vec<u8> = (0..32u16)
            .flat_map(|r| (32..64u16).flat_map(move |c| (r * 64 + c).to_le_bytes()))
            .collect();
        assert_eq!(got, want);
        assert_eq!(gets(&rec.take()), 1, "one read of the stored chunk");
        assert!(!view.decoded.holds(&key) && view.decoded.entries() == 0, "let go at the end");
        // Short of the last byte: kept.
        for _ in 0..3 {
            view.read("a/c/0/1", &node, 0, node.size as u32 - 1).await.unwrap();
        }
        assert_eq!(gets(&rec.take()), 1, "decoded once for three reads");
        assert!(view.decoded.holds(&key));
        view.read("a/c/0/1", &node, node.size - 1, 4096).await.unwrap();
        assert!(!view.decoded.holds(&key));
    }

    /// Reads finishing out of order (the kernel's read-ahead sends several at once): the last
    /// piece read before the one ahead of it leaves the buffer for it; one decode.
    #[tokio::test]
    async fn a_chunk_file_read_out_of_order_is_decoded_once() {
        let (view, rec) = decoded_view().await;
        let node = view.lookup("a/c/1/0").await.unwrap().unwrap();
        rec.take();
        let piece = 512u64;
        let mut got = vec![0u8; node.size as usize];
        for i in [1, 0, 3, 2] {
            let bytes = view.read("a/c/1/0", &node, i * piece, piece as u32).await.unwrap();
            got[(i * piece) as usize..((i + 1) * piece) as usize].copy_from_slice(&bytes);
        }
        let want: Vec<u8> = (32..64u16)
            .flat_map(|r| (0..32u16).flat_map(move |c| (r * 64 + c).to_le_bytes()))
            .collect();
        assert_eq!(got, want);
        assert_eq!(gets(&rec.take()), 1, "one read of the stored chunk");
        assert_eq!(view.decoded.entries(), 0, "let go once every byte was read");
    }
}
