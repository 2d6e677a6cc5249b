//! A read-only store over virtual references: a kerchunk JSON file (versions 0 and 1) or a
//! kerchunk/VirtualiZarr Parquet reference directory, whose keys are either inline data or byte
//! ranges of other files (NetCDF4/HDF5, TIFF, GRIB, ...) in local or object storage.
//!
//! - Inline values (plain text, `base64:` data, or a JSON object) are files of their own.
//! - `[url, offset, length]` is a file of `length` bytes; a read of it is one ranged read of the
//!   target, through the target store (and its caches) that the mount opens for that URL.
//! - `[url]` is the whole target object.
//!
//! Target URLs: `s3://`, `gs://`, `az://`, `http(s)://` go through the object stores, with the
//! mount's options (endpoint, region, `-o`); absolute paths and `file://` are local files;
//! relative paths resolve against the directory holding the reference file (a prefix of the
//! same bucket when that is remote). Target stores are opened on first use, so an unreachable or
//! unusable target costs EIO (and a log line) on the files that point into it, not the mount.
//!
//! Parquet references (`.zmetadata` + `FIELD/refs.N.parq`) are read lazily: the metadata at
//! open, then one `refs.N.parq` (one record of `record_size` chunk references) the first time a
//! chunk in it is looked up; listing an array's directory loads all its records.

mod local_files;
mod parquet;
pub mod template;

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use async_trait::async_trait;
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Map, Value};

use crate::python_json;
use crate::store::location::{Cloud, Location};
use crate::store::read_only::ReadOnly;
use crate::store::StoreHints;
use crate::store::{
    validate_key, ByteRange, Listing, Lookup, ObjectMeta, Store, StoreError, StoreResult,
};
use crate::store::{ListStore, ReadStore};
pub use local_files::LocalRoots;
use parquet::ParquetRefs;
use template::{render, Scope};

/// Opens the store behind a target location (a local directory or an object-store root URL).
/// The mount passes one that builds the same store stack as for a SOURCE of that location.
pub type TargetOpener = Arc<dyn Fn(&Location) -> Result<Arc<dyn Store>, String> + Send + Sync>;

/// `gen` entries may not expand to more references than this: each is a key and a URL held
/// in memory (about 150 bytes), so a reference file (a typo in `stop`, or a hostile one) holds
/// at most about 150 MB through them, within the daemon's budget (docs/SECURITY.md).
const MAX_GENERATED: u64 = 1_000_000;

/// One store that reference targets live in, opened on first use.
pub struct Target {
    label: String,
    root: Location,
    store: OnceLock<Result<Arc<dyn Store>, String>>,
}

/// What one key of the reference set is.
#[derive(Clone)]
pub enum Ref {
    Inline(Bytes),
    Range {
        target: Arc<Target>,
        key: Arc<str>,
        offset: u64,
        length: u64,
    },
    Whole {
        target: Arc<Target>,
        key: Arc<str>,
    },
    /// A reference that cannot be followed (unsupported URL, bad numbers): EIO when read, and
    /// when looked up unless its length is known.
    Bad(Arc<str>, Option<u64>),
}

/// Where relative target paths resolve: the directory that holds the reference file.
#[derive(Debug, Clone)]
pub enum Base {
    Local(PathBuf),
    /// `root` is `scheme://bucket`, `prefix` the key prefix inside it ("" for the bucket root).
    Remote {
        cloud: Cloud,
        root: String,
        prefix: String,
    },
}

/// Resolves target URLs to (target store, key), sharing one `Target` per store and one key
/// string per target object.
pub struct Targets {
    opener: TargetOpener,
    base: Base,
    local: LocalRoots,
    known: Mutex<TargetIndex>,
}

#[derive(Default)]
struct TargetIndex {
    stores: HashMap<String, Arc<Target>>,
    urls: HashMap<String, (Arc<Target>, Arc<str>)>,
}

impl Targets {
    /// `local`: the directories local targets may lie under (local_files.rs).
    pub fn new(opener: TargetOpener, base: Base, local: LocalRoots) -> Self {
        Targets { opener, base, local, known: Mutex::new(TargetIndex::default()) }
    }

    /// The target store and key of `url`.
    pub fn resolve(&self, url: &str) -> Result<(Arc<Target>, Arc<str>), String> {
        let mut known = crate::locks::lock(&self.known);
        if let Some(hit) = known.urls.get(url) {
            return Ok(hit.clone());
        }
        let (root, key) = match split_target(url, &self.base)? {
            // A local file is read through the root it lies under, by its resolved path.
            (Location::Local(dir), name) => {
                let (root, key) = self.local.place(&dir.join(name))?;
                (Location::Local(root), key)
            }
            remote => remote,
        };
        let label = match &root {
            Location::Local(p) => format!("file://{}", p.display()),
            Location::Remote { url, .. } => url.clone(),
        };
        let target = known
            .stores
            .entry(label.clone())
            .or_insert_with(|| Arc::new(Target { label, root, store: OnceLock::new() }))
            .clone();
        let hit = (target, Arc::<str>::from(key));
        // The cache of URLs is bounded: references to millions of distinct files still work.
        if known.urls.len() < 100_000 {
            known.urls.insert(url.to_string(), hit.clone());
        }
        Ok(hit)
    }

    fn store(&self, t: &Target) -> Result<Arc<dyn Store>, String> {
        t.store
            .get_or_init(|| {
                (self.opener)(&t.root).map_err(|e| format!("cannot open target store: {e}"))
            })
            .clone()
    }

    /// A reference from a URL and an optional (offset, length); unresolvable ones become `Bad`.
    pub fn make_ref(&self, url: &str, range: Option<(i64, i64)>) -> Ref {
        let length = range.and_then(|(_, l)| u64::try_from(l).ok());
        let (target, key) = match self.resolve(url) {
            Ok(t) => t,
            Err(e) => return Ref::Bad(e.into(), length),
        };
        match range {
            None => Ref::Whole { target, key },
            Some((offset, length)) => match (u64::try_from(offset), u64::try_from(length)) {
                (Ok(offset), Ok(length)) if offset.checked_add(length).is_some() => {
                    Ref::Range { target, key, offset, length }
                }
                _ => Ref::Bad(
                    format!("invalid byte range: offset {offset}, length {length}").into(),
                    None,
                ),
            },
        }
    }
}

/// Lexically normalize a `/`-separated relative path (`a/./b/../c` -> `a/c`); `None` when it
/// climbs above its start.
fn normalize_rel(p: &str) -> Option<String> {
    let mut out: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop()?;
            }
            s => out.push(s),
        }
    }
    Some(out.join("/"))
}

fn normalize_path(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// `url` as (store root, key in it).
fn split_target(url: &str, base: &Base) -> Result<(Location, String), String> {
    if url.is_empty() {
        return Err("empty target URL".into());
    }
    let loc =
        crate::store::location::parse_location(url).map_err(|e| format!("target {url:?}: {e}"))?;
    match loc {
        Location::Local(p) => {
            let full = if p.is_absolute() {
                normalize_path(&p)
            } else {
                match base {
                    Base::Local(dir) => normalize_path(&dir.join(&p)),
                    Base::Remote { cloud, root, prefix } => {
                        let rel = format!("{prefix}/{}", p.to_string_lossy());
                        let key = normalize_rel(&rel)
                            .filter(|k| !k.is_empty())
                            .ok_or_else(|| format!("target {url:?} leaves its bucket"))?;
                        validate_key(&key).map_err(|e| e.to_string())?;
                        let root = Location::Remote { cloud: *cloud, url: root.clone() };
                        return Ok((root, key));
                    }
                }
            };
            let name = full
                .file_name()
                .and_then(|n| n.to_str())
                .ok_or_else(|| format!("target {url:?} is not a file path"))?
                .to_string();
            let dir = full.parent().map(Path::to_path_buf).unwrap_or_else(|| "/".into());
            Ok((Location::Local(dir), name))
        }
        Location::Remote { cloud, url: full } => {
            if full.contains(['?', '#']) {
                return Err(format!("target URL {url:?} has a query or fragment"));
            }
            let (scheme, rest) = full.split_once("://").expect("parse_location saw '://'");
            let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
            let key = normalize_rel(path)
                .filter(|k| !k.is_empty())
                .ok_or_else(|| format!("target URL {url:?} names no object"))?;
            validate_key(&key).map_err(|e| e.to_string())?;
            Ok((Location::Remote { cloud, url: format!("{scheme}://{bucket}") }, key))
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct DirNode {
    pub files: BTreeSet<String>,
    pub dirs: BTreeSet<String>,
}

/// Files and directories known from the start (everything of a JSON reference set; the
/// metadata of a Parquet one).
#[derive(Default)]
pub(crate) struct Tree {
    pub files: HashMap<String, Ref>,
    pub dirs: HashMap<String, DirNode>,
}

impl Tree {
    pub fn new() -> Self {
        let mut t = Tree::default();
        t.dirs.insert(String::new(), DirNode::default());
        t
    }

    /// Add `key`; keys that cannot be file names are skipped with a log line.
    pub fn insert(&mut self, key: &str, r: Ref) {
        if key.is_empty() || validate_key(key).is_err() {
            tracing::warn!(key = ?key, "reference key skipped: not a usable file name");
            return;
        }
        if self.dirs.contains_key(key) {
            tracing::warn!(key = ?key, "reference key skipped: it is also a directory");
            return;
        }
        let (parent, leaf) = crate::store::split_key(key);
        self.add_dir(parent);
        self.dirs.get_mut(parent).expect("just added").files.insert(leaf.to_string());
        self.files.insert(key.to_string(), r);
    }

    pub fn add_dir(&mut self, dir: &str) {
        let mut missing = Vec::new();
        let mut d = dir;
        while !self.dirs.contains_key(d) {
            missing.push(d);
            d = crate::store::split_key(d).0;
        }
        for d in missing.into_iter().rev() {
            let (parent, leaf) = crate::store::split_key(d);
            if let Some(node) = self.dirs.get_mut(parent) {
                node.dirs.insert(leaf.to_string());
            }
            self.dirs.insert(d.to_string(), DirNode::default());
        }
    }
}

/// An inline value as bytes: `base64:` decoded, other text as is, JSON objects serialized.
fn inline_value(v: &Value) -> Result<Bytes, String> {
    match v {
        Value::String(s) => match s.strip_prefix("base64:") {
            Some(b64) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map(Bytes::from)
                .map_err(|e| format!("bad base64 data: {e}")),
            None => Ok(Bytes::from(s.clone().into_bytes())),
        },
        other => Ok(Bytes::from(python_json::to_vec(other))),
    }
}

/// Parse a kerchunk JSON reference document into `tree`.
pub(crate) fn parse_json(doc: &[u8], targets: &Targets, tree: &mut Tree) -> Result<(), String> {
    let json = python_json::parse(doc).map_err(|e| format!("not a JSON reference file: {e}"))?;
    let Value::Object(top) = json else {
        return Err("not a JSON reference file: the top level is not an object".into());
    };
    let empty = Map::new();
    let (refs, templates, gen) = match top.get("version") {
        None => (&top, HashMap::new(), &[][..]),
        Some(v) if v.as_u64() == Some(1) => {
            let refs = match top.get("refs") {
                None => &empty,
                Some(Value::Object(m)) => m,
                Some(_) => return Err("\"refs\" is not an object".into()),
            };
            let mut templates = HashMap::new();
            match top.get("templates") {
                None | Some(Value::Null) => {}
                Some(Value::Object(m)) => {
                    for (k, v) in m {
                        let s =
                            v.as_str().ok_or_else(|| format!("template {k:?} is not a string"))?;
                        if s.contains("{{") {
                            return Err(format!(
                                "template {k:?} is a function template, which is not supported"
                            ));
                        }
                        templates.insert(k.clone(), s.to_string());
                    }
                }
                Some(_) => return Err("\"templates\" is not an object".into()),
            }
            let gen = match top.get("gen") {
                None | Some(Value::Null) => &[][..],
                Some(Value::Array(a)) => &a[..],
                Some(_) => return Err("\"gen\" is not a list".into()),
            };
            (refs, templates, gen)
        }
        Some(v) => return Err(format!("unknown reference format version {v}")),
    };
    let scope = Scope { global: &templates, local: &[] };
    for (key, v) in refs {
        let r = match v {
            Value::Array(a) => {
                array_ref(a, targets, &scope).unwrap_or_else(|e| Ref::Bad(e.into(), None))
            }
            Value::Null => continue,
            v => match inline_value(v) {
                Ok(b) => Ref::Inline(b),
                Err(e) => Ref::Bad(e.into(), None),
            },
        };
        tree.insert(key, r);
    }
    for (i, g) in gen.iter().enumerate() {
        expand_gen(g, targets, &templates, tree).map_err(|e| format!("gen entry {i}: {e}"))?;
    }
    Ok(())
}

/// `[url]` or `[url, offset, length]`, with templates rendered in the URL.
fn array_ref(a: &[Value], targets: &Targets, scope: &Scope<'_>) -> Result<Ref, String> {
    let url = a.first().and_then(Value::as_str).ok_or("reference without a URL string")?;
    let url = if url.contains("{{") { render(url, scope)? } else { url.to_string() };
    match a.len() {
        1 => Ok(targets.make_ref(&url, None)),
        3 => {
            let offset = a[1].as_i64().ok_or("offset is not an integer")?;
            let length = a[2].as_i64().ok_or("length is not an integer")?;
            Ok(targets.make_ref(&url, Some((offset, length))))
        }
        n => Err(format!("a reference list has 1 or 3 items, not {n}")),
    }
}

/// One `gen` entry: references for every combination of its dimensions.
fn expand_gen(
    g: &Value,
    targets: &Targets,
    templates: &HashMap<String, String>,
    tree: &mut Tree,
) -> Result<(), String> {
    let field = |name: &str| -> Result<Option<String>, String> {
        match g.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err(format!("\"{name}\" is not a string")),
        }
    };
    let key_t = field("key")?.ok_or("no \"key\"")?;
    let url_t = field("url")?.ok_or("no \"url\"")?;
    let (offset_t, length_t) = match (field("offset")?, field("length")?) {
        (Some(o), Some(l)) => (Some(o), Some(l)),
        (None, None) => (None, None),
        _ => return Err("\"offset\" and \"length\" go together".into()),
    };
    let Some(Value::Object(dims)) = g.get("dimensions") else {
        return Err("no \"dimensions\" object".into());
    };
    let mut axes: Vec<(String, Vec<i64>)> = Vec::new();
    let mut total: u64 = 1;
    for (name, d) in dims {
        let values: Vec<i64> = match d {
            Value::Array(a) => a
                .iter()
                .map(|v| v.as_i64().ok_or(format!("dimension {name:?}: not an integer list")))
                .collect::<Result<_, _>>()?,
            Value::Object(o) => {
                let get = |k: &str, default: Option<i64>| match o.get(k) {
                    None => default.ok_or(format!("dimension {name:?}: no \"{k}\"")),
                    Some(v) => {
                        v.as_i64().ok_or(format!("dimension {name:?}: \"{k}\" not an integer"))
                    }
                };
                let (start, stop, step) =
                    (get("start", Some(0))?, get("stop", None)?, get("step", Some(1))?);
                if step <= 0 {
                    return Err(format!("dimension {name:?}: step must be positive"));
                }
                let n =
                    if stop > start { ((stop - start) as u64).div_ceil(step as u64) } else { 0 };
                if n > MAX_GENERATED {
                    return Err(format!("dimension {name:?} has {n} values"));
                }
                (0..n as i64).map(|i| start + i * step).collect()
            }
            _ => return Err(format!("dimension {name:?} is neither a list nor a range")),
        };
        total = total.saturating_mul(values.len() as u64);
        axes.push((name.clone(), values));
    }
    if total > MAX_GENERATED {
        return Err(format!("expands to {total} references (more than {MAX_GENERATED})"));
    }
    if total == 0 {
        return Ok(());
    }
    let mut idx = vec![0usize; axes.len()];
    let mut local: Vec<(String, i64)> = axes.iter().map(|(n, _)| (n.clone(), 0)).collect();
    loop {
        for (d, (_, values)) in axes.iter().enumerate() {
            local[d].1 = values[idx[d]];
        }
        let scope = Scope { global: templates, local: &local };
        let key = render(&key_t, &scope)?;
        let url = render(&url_t, &scope)?;
        let r = match (&offset_t, &length_t) {
            (Some(o), Some(l)) => {
                let num = |t: &str, what: &str| -> Result<i64, String> {
                    let s = render(t, &scope)?;
                    s.trim().parse().map_err(|_| format!("{what} {s:?} is not an integer"))
                };
                targets.make_ref(&url, Some((num(o, "offset")?, num(l, "length")?)))
            }
            _ => targets.make_ref(&url, None),
        };
        tree.insert(&key, r);
        // Next combination (last dimension fastest).
        let mut d = axes.len();
        loop {
            if d == 0 {
                return Ok(());
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < axes[d].1.len() {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Check a local reference set before anything is mounted (the CLI turns a broken one into a
/// one-line usage error, exit 2): a JSON file must parse as a reference document, a directory
/// must hold a Parquet reference set's `.zmetadata`. Targets are not contacted.
pub fn check_local(path: &Path) -> Result<(), String> {
    let md = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if md.is_dir() {
        let doc = std::fs::read(path.join(".zmetadata"))
            .map_err(|e| format!("not a Parquet reference directory (reading .zmetadata: {e})"))?;
        return parquet::check_zmetadata(&doc);
    }
    let doc = std::fs::read(path).map_err(|e| e.to_string())?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_else(|| ".".into());
    let opener: TargetOpener = Arc::new(|_| Err("not opened while checking".into()));
    let targets = Targets::new(opener, Base::Local(dir), LocalRoots::default());
    parse_json(&doc, &targets, &mut Tree::new())
}

/// Why a reference store cannot be opened: one line, the mount exits 2.
#[derive(Debug, thiserror::Error)]
#[error("reference store {source_name}: {message}")]
pub struct ReferenceError {
    pub source_name: String,
    pub message: String,
}

/// A read-only store over a set of virtual references.
pub struct ReferenceStore {
    description: String,
    tree: Tree,
    parquet: Option<ParquetRefs>,
    targets: Targets,
    modified: SystemTime,
    version: String,
}

/// `dir/name` of a location: (the directory's location, the name).
fn split_location(location: &Location) -> Result<(Location, String), String> {
    match location {
        Location::Local(p) => {
            let name = p.file_name().and_then(|n| n.to_str()).ok_or("not a file name")?;
            let parent = p.parent().map(Path::to_path_buf).unwrap_or_else(|| ".".into());
            Ok((Location::Local(parent), name.to_string()))
        }
        Location::Remote { cloud, url } => {
            let clean = url.split(['?', '#']).next().unwrap_or(url).trim_end_matches('/');
            let (parent, name) = clean.rsplit_once('/').ok_or("no object name")?;
            if parent.ends_with(':') || parent.ends_with(":/") {
                return Err("the reference file must be an object inside a bucket".into());
            }
            Ok((Location::Remote { cloud: *cloud, url: parent.to_string() }, name.to_string()))
        }
    }
}

/// Where relative targets of a reference file in `dir` resolve.
fn base_of(dir: &Location) -> Base {
    match dir {
        Location::Local(p) => Base::Local(p.clone()),
        Location::Remote { cloud, url } => {
            let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            Base::Remote {
                cloud: *cloud,
                root: format!("{scheme}://{bucket}"),
                prefix: prefix.trim_matches('/').to_string(),
            }
        }
    }
}

impl ReferenceStore {
    /// Open the reference set at `location`: a JSON file, or a directory (prefix) holding a
    /// Parquet reference set. `opener` opens the store of the reference file's directory and,
    /// later, the target stores. `authorize`: the `--authorize-virtual` prefixes, of which the
    /// `file://` ones (and `all`) let targets read local files outside the reference file's
    /// own directory.
    pub async fn open(
        location: &Location,
        opener: TargetOpener,
        authorize: &[String],
    ) -> Result<ReadOnly<ReferenceStore>, ReferenceError> {
        let shown = match location {
            Location::Local(p) => p.display().to_string(),
            Location::Remote { url, .. } => crate::store::backends::object::display_url(url),
        };
        let fail = |message: String| ReferenceError { source_name: shown.clone(), message };
        let (dir, name) = split_location(location).map_err(|e| fail(e.to_string()))?;
        let dir_store = opener(&dir).map_err(&fail)?;
        let own_dir = match &dir {
            Location::Local(d) => Some(d.as_path()),
            Location::Remote { .. } => None,
        };
        let local = LocalRoots::new(own_dir, authorize);
        let targets = Targets::new(opener.clone(), base_of(&dir), local);
        let mut tree = Tree::new();
        let is_dir = match location {
            Location::Local(p) => p.is_dir(),
            Location::Remote { .. } => {
                dir_store.head(&name).await.map_err(|e| fail(e.to_string()))?.is_none()
            }
        };
        let (parquet, meta) = if is_dir {
            let store = opener(location).map_err(&fail)?;
            let (p, meta) = ParquetRefs::open(store, &targets, &mut tree).await.map_err(&fail)?;
            (Some(p), meta)
        } else {
            let (doc, meta) = match dir_store.get_ranged(&name, ByteRange::Range(0..u64::MAX)).await
            {
                Ok(Some(got)) => got,
                Ok(None) => return Err(fail("no such file".into())),
                Err(e) => return Err(fail(e.to_string())),
            };
            if doc.len() as u64 != meta.size {
                return Err(fail(format!("short read: {} of {} bytes", doc.len(), meta.size)));
            }
            parse_json(&doc, &targets, &mut tree).map_err(&fail)?;
            (None, meta)
        };
        tracing::info!(
            references = %shown,
            keys = tree.files.len(),
            parquet = parquet.is_some(),
            "reference set opened"
        );
        Ok(ReadOnly(ReferenceStore {
            description: format!("reference:{shown}"),
            tree,
            parquet,
            targets,
            modified: meta.modified,
            version: meta.version,
        }))
    }

    /// A store over an already parsed JSON reference document (tests, and any caller that has
    /// the document in hand).
    pub fn from_json(
        doc: &[u8],
        base: Base,
        opener: TargetOpener,
    ) -> Result<ReadOnly<ReferenceStore>, String> {
        let local = match &base {
            Base::Local(dir) => LocalRoots::new(Some(dir), &[]),
            Base::Remote { .. } => LocalRoots::default(),
        };
        let targets = Targets::new(opener, base, local);
        let mut tree = Tree::new();
        parse_json(doc, &targets, &mut tree)?;
        Ok(ReadOnly(ReferenceStore {
            description: "reference:(in memory)".into(),
            tree,
            parquet: None,
            targets,
            modified: SystemTime::UNIX_EPOCH,
            version: "refs".into(),
        }))
    }

    /// Number of keys known without loading Parquet records.
    pub fn len(&self) -> usize {
        self.tree.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tree.files.is_empty()
    }

    /// The reference at `key`, if any (loading its Parquet record when needed).
    async fn find(&self, key: &str) -> StoreResult<Option<Ref>> {
        if let Some(r) = self.tree.files.get(key) {
            return Ok(Some(r.clone()));
        }
        match &self.parquet {
            Some(p) => p.find(key, &self.targets).await.map_err(|m| self.fail(key, m)),
            None => Ok(None),
        }
    }

    /// An EIO-class error about `key`, logged: the kernel only sees EIO, the log says why.
    fn fail(&self, key: &str, message: String) -> StoreError {
        tracing::warn!(store = %self.description, key = ?key, "{message}");
        StoreError::Backend { key: key.to_string(), message }
    }

    fn target_store(&self, key: &str, t: &Target) -> StoreResult<Arc<dyn Store>> {
        self.targets.store(t).map_err(|e| self.fail(key, format!("{}: {e}", t.label)))
    }

    fn meta(&self, size: u64) -> ObjectMeta {
        ObjectMeta { size, modified: self.modified, version: self.version.clone(), perms: None }
    }

    /// Size and metadata of a reference (a whole-object one asks its target).
    async fn meta_of(&self, key: &str, r: &Ref) -> StoreResult<ObjectMeta> {
        match r {
            Ref::Inline(b) => Ok(self.meta(b.len() as u64)),
            Ref::Range { length, .. } => Ok(self.meta(*length)),
            Ref::Bad(_, Some(length)) => Ok(self.meta(*length)),
            Ref::Bad(m, None) => Err(self.fail(key, format!("unusable reference: {m}"))),
            Ref::Whole { target, key: tkey } => {
                let store = self.target_store(key, target)?;
                match store.head(tkey).await {
                    Ok(Some(m)) => Ok(m),
                    Ok(None) => {
                        Err(self.fail(key, format!("target {}/{tkey} not found", target.label)))
                    }
                    Err(e) => Err(self.fail(key, format!("target {}/{tkey}: {e}", target.label))),
                }
            }
        }
    }

    async fn read(&self, key: &str, r: &Ref, range: Range<u64>) -> StoreResult<Bytes> {
        match r {
            Ref::Inline(b) => {
                let end = range.end.min(b.len() as u64);
                let start = range.start.min(end);
                Ok(b.slice(start as usize..end as usize))
            }
            Ref::Bad(m, _) => Err(self.fail(key, format!("unusable reference: {m}"))),
            Ref::Range { target, key: tkey, offset, length } => {
                let end = range.end.min(*length);
                let start = range.start.min(end);
                if start == end {
                    return Ok(Bytes::new());
                }
                let store = self.target_store(key, target)?;
                let want = end - start;
                let got = store
                    .get_range(tkey, offset + start..offset + end)
                    .await
                    .map_err(|e| self.fail(key, format!("target {}/{tkey}: {e}", target.label)))?;
                if got.len() as u64 != want {
                    return Err(self.fail(
                        key,
                        format!(
                            "reference {}/{tkey} bytes {}..{} runs past the end of the target \
                             (got {} of {want} bytes)",
                            target.label,
                            offset,
                            offset + length,
                            got.len()
                        ),
                    ));
                }
                Ok(got)
            }
            Ref::Whole { target, key: tkey } => {
                let store = self.target_store(key, target)?;
                let got = if range.start == 0 && range.end == u64::MAX {
                    store.get(tkey).await
                } else {
                    store.get_range(tkey, range).await
                };
                got.map_err(|e| self.fail(key, format!("target {}/{tkey}: {e}", target.label)))
            }
        }
    }

    async fn read_key(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        match self.find(key).await? {
            Some(r) => self.read(key, &r, range).await,
            None if self.is_dir(key) => Err(StoreError::IsADirectory(key.into())),
            None => Err(StoreError::NotFound(key.into())),
        }
    }

    fn is_dir(&self, key: &str) -> bool {
        self.tree.dirs.contains_key(key)
    }
}

impl StoreHints for ReferenceStore {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn has_real_dirs(&self) -> bool {
        false
    }
}

#[async_trait]
impl ReadStore for ReferenceStore {
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.read_key(key, range).await
    }

    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let Some(r) = self.find(key).await? else { return Ok(None) };
        let meta = self.meta_of(key, &r).await?;
        let data = self.read(key, &r, range.clip(meta.size)).await?;
        Ok(Some((data, meta)))
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        match self.find(key).await? {
            Some(r) => Ok(Some(self.meta_of(key, &r).await?)),
            None => Ok(None),
        }
    }
}

#[async_trait]
impl ListStore for ReferenceStore {
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        let Some(node) = self.tree.dirs.get(prefix) else { return Ok(Listing::default()) };
        let mut refs: Vec<(String, Ref)> = node
            .files
            .iter()
            .filter_map(|leaf| {
                let r = self.tree.files.get(&crate::store::join_key(prefix, leaf))?;
                Some((leaf.clone(), r.clone()))
            })
            .collect();
        if let Some(p) = &self.parquet {
            let more = p.list(prefix, &self.targets).await.map_err(|m| self.fail(prefix, m))?;
            refs.extend(more);
        }
        let mut files = Vec::with_capacity(refs.len());
        for (leaf, r) in refs {
            match self.meta_of(&crate::store::join_key(prefix, &leaf), &r).await {
                Ok(m) => files.push((leaf, m)),
                // A whole-object reference whose target cannot be asked is still shown; its
                // reads fail with EIO.
                Err(_) => files.push((leaf, self.meta(0))),
            }
        }
        Ok(Listing {
            files,
            dirs: node.dirs.iter().cloned().collect(),
            dir_perms: Default::default(),
        })
    }

    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        // A reference whose size cannot be known (an unusable one, a whole object whose target
        // does not answer) fails its lookup with EIO; listings still show it.
        let file = match self.find(key).await? {
            Some(r) => Some(self.meta_of(key, &r).await?),
            None => None,
        };
        Ok(Lookup { file, dir: self.is_dir(key), dir_perms: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::layers::recording::RecordingStore;
    use crate::store::prelude::*;

    /// A target store holding `data.nc` (bytes 0..=199) and `sub/other.bin`, recording every
    /// request, and the labels of the stores the reference store asked the opener for.
    struct Fixture {
        target: Arc<RecordingStore>,
        opened: Arc<Mutex<Vec<String>>>,
    }

    async fn fixture() -> (Fixture, TargetOpener) {
        let mem = Arc::new(MemoryStore::new());
        mem.put("data.nc", Bytes::from((0..200u8).collect::<Vec<_>>())).await.unwrap();
        mem.put("sub/other.bin", Bytes::from_static(b"whole object")).await.unwrap();
        let target = Arc::new(RecordingStore::new(mem));
        let opened = Arc::new(Mutex::new(Vec::new()));
        let (t, o) = (target.clone(), opened.clone());
        let opener: TargetOpener = Arc::new(move |loc: &Location| {
            let label = match loc {
                Location::Local(p) => p.display().to_string(),
                Location::Remote { url, .. } => url.clone(),
            };
            o.lock().unwrap().push(label.clone());
            if label.contains("unreachable") {
                return Err("connection refused".into());
            }
            Ok(t.clone() as Arc<dyn Store>)
        });
        (Fixture { target, opened }, opener)
    }

    fn remote_base() -> Base {
        Base::Remote { cloud: Cloud::S3, root: "s3://bucket".into(), prefix: "refs".into() }
    }

    #[tokio::test]
    async fn version_0_inline_range_and_whole_references() {
        let (fx, opener) = fixture().await;
        let doc = br#"{
            ".zgroup": "{\"zarr_format\":2}",
            "a/.zattrs": {"units": "K"},
            "a/.zarray": "base64:eyJ6YXJyX2Zvcm1hdCI6IDJ9",
            "a/0.0": ["s3://bucket/data.nc", 10, 5],
            "a/0.1": ["s3://bucket/data.nc", 195, 5],
            "whole": ["s3://bucket/sub/other.bin"],
            "gone": null
        }"#;
        let s = ReferenceStore::from_json(doc, remote_base(), opener).unwrap();
        assert_eq!(&s.get(".zgroup").await.unwrap()[..], br#"{"zarr_format":2}"#);
        assert_eq!(&s.get("a/.zattrs").await.unwrap()[..], br#"{"units":"K"}"#);
        assert_eq!(&s.get("a/.zarray").await.unwrap()[..], br#"{"zarr_format": 2}"#);
        let root = s.list("").await.unwrap();
        assert_eq!(root.dirs, vec!["a"]);
        let names: Vec<_> = root.files.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(names, vec![".zgroup", "whole"]);
        assert_eq!(root.files[1].1.size, 12, "a whole-object reference has its target's size");
        fx.target.take();

        // Listing, lookups and heads of ranged references cost no target request.
        let a = s.list("a").await.unwrap();
        assert_eq!(
            a.files.iter().map(|f| (f.0.as_str(), f.1.size)).collect::<Vec<_>>(),
            vec![(".zarray", 18), (".zattrs", 13), ("0.0", 5), ("0.1", 5)]
        );
        assert_eq!(s.head("a/0.0").await.unwrap().unwrap().size, 5);
        assert!(s.lookup("a").await.unwrap().dir);
        assert!(s.head("gone").await.unwrap().is_none());
        assert!(fx.target.calls().is_empty(), "{:?}", fx.target.calls());

        // One ranged read of exactly the referenced bytes per chunk read.
        assert_eq!(&s.get("a/0.0").await.unwrap()[..], &[10, 11, 12, 13, 14]);
        assert_eq!(fx.target.take(), vec!["get_range data.nc 10..15"]);
        assert_eq!(&s.get_range("a/0.1", 1..3).await.unwrap()[..], &[196, 197]);
        assert_eq!(fx.target.take(), vec!["get_range data.nc 196..198"]);
        assert_eq!(&s.get_range("a/0.1", 4..99).await.unwrap()[..], &[199]);
        assert_eq!(fx.target.take(), vec!["get_range data.nc 199..200"]);
        assert_eq!(&s.get("whole").await.unwrap()[..], b"whole object");
        assert_eq!(fx.target.take(), vec!["get sub/other.bin"]);
        // Every reference into the bucket shares one opened target store.
        assert_eq!(*fx.opened.lock().unwrap(), vec!["s3://bucket"]);
        assert!(matches!(s.get("a").await, Err(StoreError::IsADirectory(_))));
        assert!(matches!(s.get("nope").await, Err(StoreError::NotFound(_))));
        assert!(matches!(s.put("x", Bytes::new()).await, Err(StoreError::ReadOnly)));
    }

    #[tokio::test]
    async fn version_1_templates_gen_and_relative_paths() {
        let (fx, opener) = fixture().await;
        let doc = br#"{
            "version": 1,
            "templates": {"u": "s3://bucket/data.nc", "rel": "../sub/other.bin"},
            "refs": {
                ".zgroup": "{\"zarr_format\":2}",
                "x/0": ["{{u}}", 100, 4],
                "y/0": ["{{rel}}"],
                "z/0": ["data.nc", 0, 2]
            },
            "gen": [{
                "key": "g/{{i}}.{{j}}",
                "url": "{{u}}",
                "offset": "{{ i * 20 + j * 10 }}",
                "length": "{{ 2 + 1 }}",
                "dimensions": {"i": {"stop": 3}, "j": [0, 1]}
            }]
        }"#;
        let s = ReferenceStore::from_json(doc, remote_base(), opener).unwrap();
        assert_eq!(&s.get("x/0").await.unwrap()[..], &[100, 101, 102, 103]);
        // Relative targets resolve against the reference file's prefix (`refs/`).
        assert_eq!(&s.get("y/0").await.unwrap()[..], b"whole object");
        assert!(s.get("z/0").await.is_err(), "refs/data.nc does not exist");
        let g = s.list("g").await.unwrap();
        let names: Vec<_> = g.files.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(names, vec!["0.0", "0.1", "1.0", "1.1", "2.0", "2.1"]);
        fx.target.take();
        assert_eq!(&s.get("g/2.1").await.unwrap()[..], &[50, 51, 52]);
        assert_eq!(fx.target.take(), vec!["get_range data.nc 50..53"]);
    }

    /// A `gen` entry that would expand past MAX_GENERATED fails the reference file, in one
    /// line, before anything is generated (a range of 10^12 values or a product of two).
    #[tokio::test]
    async fn gen_entries_expanding_past_the_limit_are_refused() {
        for dims in
            [r#"{"i": {"stop": 1000000000000}}"#, r#"{"i": {"stop": 1001}, "j": {"stop": 1000}}"#]
        {
            let (_fx, opener) = fixture().await;
            let doc = format!(
                r#"{{"version": 1, "refs": {{}}, "gen": [{{"key": "g/{{{{i}}}}", "url": "s3://bucket/data.nc", "dimensions": {dims}}}]}}"#
            );
            let err = ReferenceStore::from_json(doc.as_bytes(), remote_base(), opener)
                .err()
                .expect("an oversized gen entry was accepted");
            assert!(err.contains("1000000") || err.contains("values"), "{err}");
        }
    }

    #[tokio::test]
    async fn bad_references_fail_their_own_reads_only() {
        let (_fx, opener) = fixture().await;
        let doc = br#"{
            ".zgroup": "{\"zarr_format\":2}",
            "past_end": ["s3://bucket/data.nc", 190, 20],
            "missing": ["s3://bucket/no-such.nc", 0, 4],
            "unreachable": ["s3://unreachable/data.nc", 0, 4],
            "scheme": ["ftp://host/data.nc", 0, 4],
            "negative": ["s3://bucket/data.nc", -1, 4],
            "shape": ["s3://bucket/data.nc", 1],
            "b64": "base64:%%%",
            "ok": ["s3://bucket/data.nc", 0, 1]
        }"#;
        let s = ReferenceStore::from_json(doc, remote_base(), opener).unwrap();
        // Every key is listed; the bad ones fail with a backend error (EIO), not ENOENT.
        assert_eq!(s.list("").await.unwrap().files.len(), 9);
        for key in ["past_end", "missing", "unreachable", "scheme", "negative", "shape", "b64"] {
            match s.get(key).await {
                Err(StoreError::Backend { key: k, message }) => {
                    assert_eq!(k, key);
                    assert!(!message.is_empty());
                }
                other => panic!("{key}: {:?}", other.map(|b| b.len())),
            }
        }
        let past = s.get("past_end").await.unwrap_err().to_string();
        assert!(past.contains("past the end"), "{past}");
        let unreachable = s.get("unreachable").await.unwrap_err().to_string();
        assert!(unreachable.contains("connection refused"), "{unreachable}");
        assert_eq!(&s.get("ok").await.unwrap()[..], &[0]);
    }

    #[test]
    fn broken_documents_are_refused() {
        let opener: TargetOpener = Arc::new(|_| Err("unused".into()));
        for bad in [
            &b"not json"[..],
            b"[1, 2]",
            br#"{"version": 2, "refs": {}}"#,
            br#"{"version": 1, "refs": []}"#,
            br#"{"version": 1, "templates": {"f": "{{c}}"}, "refs": {}}"#,
            br#"{"version": 1, "gen": [{"key": "k{{i}}", "url": "u", "dimensions": {"i": {"stop": 100000000000}}}]}"#,
            br#"{"version": 1, "gen": [{"key": "k{{i}}", "url": "u", "offset": "1", "dimensions": {"i": [1]}}]}"#,
            br#"{"version": 1, "gen": [{"key": "k{{i | e}}", "url": "u", "dimensions": {"i": [1]}}]}"#,
        ] {
            let r = ReferenceStore::from_json(bad, remote_base(), opener.clone());
            assert!(r.is_err(), "{} accepted", String::from_utf8_lossy(bad));
        }
    }

    /// Inline metadata objects with Python's bare NaN and Infinity (kerchunk's writers use
    /// Python's json) are served with the same tokens.
    #[tokio::test]
    async fn python_nan_tokens_in_inline_metadata() {
        let opener: TargetOpener = Arc::new(|_| Err("unused".into()));
        let doc = br#"{"version": 1, "refs": {".zgroup": {"zarr_format": 2},
            "a/.zattrs": {"_FillValue": NaN, "range": [-Infinity, Infinity], "s": "NaN"}}}"#;
        let s = ReferenceStore::from_json(doc, remote_base(), opener).unwrap();
        assert_eq!(
            &s.get("a/.zattrs").await.unwrap()[..],
            br#"{"_FillValue":NaN,"range":[-Infinity,Infinity],"s":"NaN"}"#
        );
    }

    #[test]
    fn target_urls_split_into_store_and_key() {
        let local = Base::Local("/data/refs".into());
        let split = |u: &str, b: &Base| split_target(u, b);
        assert_eq!(
            split("file:///x/y%20z.nc", &local).unwrap(),
            (Location::Local("/x".into()), "y z.nc".into())
        );
        assert_eq!(
            split("../nc/a.nc", &local).unwrap(),
            (Location::Local("/data/nc".into()), "a.nc".into())
        );
        assert_eq!(
            split("/abs/b.nc", &local).unwrap(),
            (Location::Local("/abs".into()), "b.nc".into())
        );
        let (root, key) = split("gs://bkt/p/q.nc", &local).unwrap();
        assert_eq!(root, Location::Remote { cloud: Cloud::Gcs, url: "gs://bkt".into() });
        assert_eq!(key, "p/q.nc");
        let (root, key) = split("https://host:8080/a/b.nc", &local).unwrap();
        assert_eq!(root, Location::Remote { cloud: Cloud::Http, url: "https://host:8080".into() });
        assert_eq!(key, "a/b.nc");
        let (root, key) = split("sub/c.nc", &remote_base()).unwrap();
        assert_eq!(root, Location::Remote { cloud: Cloud::S3, url: "s3://bucket".into() });
        assert_eq!(key, "refs/sub/c.nc");
        for bad in ["", "ftp://h/x", "s3://bucket", "s3://bucket/a?b", "../../x"] {
            assert!(split(bad, &remote_base()).is_err(), "{bad:?} accepted");
        }
    }
}
