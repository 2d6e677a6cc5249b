//! Icechunk repositories (issue 24), read-only: one branch, tag or snapshot of a repository
//! shown as a plain Zarr v3 directory store.
//!
//! Everything goes through the `icechunk` crate: refs, snapshots and manifests are its formats,
//! and chunk bytes (objects in `chunks/`, inline chunks, virtual chunks in other files) are
//! fetched by its session. Keys map onto nodes and chunk coordinates the way Icechunk's own
//! Zarr store does: `PATH/zarr.json` is a node's metadata, `ARRAY/c/I/J` a chunk.
//!
//! A branch is followed: its head is looked up again once the metadata TTL has passed, and a
//! new commit is then served from a new session (an old snapshot stays readable in full, since
//! Icechunk never rewrites a snapshot's objects).
//!
//! Memory: the crate keeps a repository's snapshot and the manifests of the arrays read in its
//! own bounded caches. Listing a chunk directory walks every chunk reference of its array (the
//! crate has no per-prefix index) and keeps only the entries of that one directory, so a
//! listing costs time in the array's chunk count but memory only in the directory's size.

use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use icechunk::config::Credentials;
use icechunk::format::manifest::ChunkPayload;
use icechunk::format::snapshot::NodeData;
use icechunk::format::{ChunkIndices, Path as IcPath, SnapshotId};
use icechunk::repository::VersionInfo;
use icechunk::session::{Session, SessionErrorKind};
use icechunk::{Repository, Storage};

use crate::store::backends::object::RemoteOptions;
use crate::store::location::{Cloud, Location};
use crate::store::read_only::ReadOnly;
use crate::store::StoreHints;
use crate::store::{
    absent_if_not_found, ByteRange, Listing, Lookup, ObjectMeta, StoreError, StoreResult,
};
use crate::store::{ListStore, ReadStore};

/// Chunk directories along an axis of at most this many chunks are listed from the chunk grid
/// (see `IcechunkStore::list_chunks`).
const GRID_LISTING_LIMIT: u32 = 100_000;

/// Which version of the repository to show (`--ref`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefSpec {
    Branch(String),
    Tag(String),
    Snapshot(String),
    /// A bare name: a branch of that name, else a tag, else a snapshot id.
    Any(String),
}

impl RefSpec {
    /// `branch:NAME`, `tag:NAME`, `snapshot:ID` or a bare NAME; `None` is branch `main`.
    pub fn parse(s: Option<&str>) -> Result<RefSpec, String> {
        let Some(s) = s else { return Ok(RefSpec::Branch("main".into())) };
        let (kind, name) = match s.split_once(':') {
            Some((k @ ("branch" | "tag" | "snapshot"), n)) => (Some(k), n),
            _ => (None, s),
        };
        if name.is_empty() {
            return Err("--ref needs a branch, tag or snapshot id".into());
        }
        Ok(match kind {
            Some("branch") => RefSpec::Branch(name.into()),
            Some("tag") => RefSpec::Tag(name.into()),
            Some(_) => RefSpec::Snapshot(name.into()),
            None => RefSpec::Any(name.into()),
        })
    }
}

/// How an Icechunk SOURCE is opened (from the command line).
#[derive(Debug, Clone)]
pub struct IcechunkOptions {
    pub reference: RefSpec,
    /// How long a branch head is trusted before it is looked up again.
    pub ttl: Duration,
    /// URL prefixes of virtual chunk containers to read from besides the remote ones
    /// (`--authorize-virtual`): `file://` containers are read only when listed here.
    pub authorize: Vec<String>,
}

/// The snapshot being served, and when a branch head was last looked up.
struct Current {
    session: Arc<Session>,
    snapshot: SnapshotId,
    modified: SystemTime,
    checked: Instant,
}

pub struct IcechunkStore {
    repo: Repository,
    /// The branch followed, if the ref is one.
    branch: Option<String>,
    ttl: Duration,
    current: std::sync::Mutex<Arc<Current>>,
    /// One branch lookup at a time; the others wait for its answer.
    refresh: tokio::sync::Mutex<()>,
    describe: String,
    /// `GRID_LISTING_LIMIT` (lower in tests, to reach the other path).
    grid_limit: u32,
}

/// What a key names.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// `PATH/zarr.json`: a node's metadata document.
    Meta(IcPath),
    /// `ARRAY/c/I/J`: a chunk (coordinates not yet checked against the array).
    Chunk(IcPath, Vec<u32>),
}

fn ic_path(dir_key: &str) -> Option<IcPath> {
    IcPath::try_from(format!("/{dir_key}").as_str()).ok()
}

/// The split of `key` into array path and chunk coordinates at its last `c` segment followed
/// only by numbers (`a/c/0/1` -> (`a`, [0, 1]); `a/c` -> (`a`, [])).
fn split_chunk_key(key: &str) -> Option<(&str, Vec<u32>)> {
    let segs: Vec<&str> = key.split('/').collect();
    let i = segs.iter().rposition(|s| *s == "c")?;
    let coords = segs[i + 1..].iter().map(|s| s.parse::<u32>().ok()).collect::<Option<Vec<_>>>()?;
    let array =
        if i == 0 { "" } else { &key[..segs[..i].iter().map(|s| s.len() + 1).sum::<usize>() - 1] };
    Some((array, coords))
}

fn parse_key(key: &str) -> Option<Target> {
    if key == "zarr.json" {
        return Some(Target::Meta(IcPath::root()));
    }
    if let Some(dir) = key.strip_suffix("/zarr.json") {
        return ic_path(dir).map(Target::Meta);
    }
    let (array, coords) = split_chunk_key(key)?;
    Some(Target::Chunk(ic_path(array)?, coords))
}

/// One line for the log and for EIO's message: the crate's errors carry span traces on
/// further lines.
fn one_line(e: impl std::fmt::Display) -> String {
    let text = e.to_string();
    let text = text.split("context:").next().unwrap_or(&text);
    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

fn backend(key: &str, e: impl std::error::Error) -> StoreError {
    // The crate's errors often say only what failed ("error fetching virtual reference") and
    // keep why (the URL, "connection refused") in their sources.
    let message = crate::store::error_chain_with(&e, |c| one_line(c));
    StoreError::Backend { key: key.to_string(), message }
}

fn meta_of(data: &[u8], modified: SystemTime) -> ObjectMeta {
    ObjectMeta {
        size: data.len() as u64,
        modified,
        version: format!("m{:08x}-{}", crc32c::crc32c(data), data.len()),
        perms: None,
    }
}

/// A chunk's metadata: the version names the stored bytes themselves (a chunk object, a range
/// of a virtual file, inline bytes), so a chunk unchanged by a new commit keeps its version
/// and stays cached.
fn chunk_meta(payload: &ChunkPayload, modified: SystemTime, snapshot: &SnapshotId) -> ObjectMeta {
    let version = match payload {
        ChunkPayload::Inline(b) => format!("i{:08x}-{}", crc32c::crc32c(b), b.len()),
        ChunkPayload::Ref(r) => format!("r{}-{}-{}", r.id, r.offset, r.length),
        ChunkPayload::Virtual(v) => {
            format!("v{}-{}-{}-{:?}", v.location.url(), v.offset, v.length, v.checksum)
        }
        _ => format!("s{snapshot}"),
    };
    ObjectMeta { size: payload.length(), modified, version, perms: None }
}

fn is_not_found(kind: &SessionErrorKind) -> bool {
    matches!(
        kind,
        SessionErrorKind::NodeNotFound { .. }
            | SessionErrorKind::NotAnArray { .. }
            | SessionErrorKind::NotAGroup { .. }
    )
}

/// The repository's storage for a SOURCE location.
async fn storage_for(
    location: &Location,
    remote: &RemoteOptions,
) -> Result<Arc<dyn Storage + Send + Sync>, String> {
    let (cloud, url) = match location {
        Location::Local(p) => {
            return icechunk::new_local_filesystem_storage(p).await.map_err(one_line);
        }
        Location::Remote { cloud, url } => (*cloud, url.as_str()),
    };
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let rest = rest.split(['?', '#']).next().unwrap_or(rest).trim_end_matches('/');
    let (bucket, prefix) = match rest.split_once('/') {
        Some((b, p)) => (b.to_string(), Some(p.to_string())),
        None => (rest.to_string(), None),
    };
    let option = |names: &[&str]| {
        remote.options.iter().find(|(k, _)| names.contains(&k.as_str())).map(|(_, v)| v.clone())
    };
    let truthy = |v: Option<String>| v.is_some_and(|v| v.eq_ignore_ascii_case("true"));
    match cloud {
        Cloud::S3 => {
            let endpoint = mount_endpoint(remote);
            let region = remote
                .region
                .clone()
                .or_else(|| std::env::var("AWS_REGION").ok())
                .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok());
            let anonymous =
                remote.no_sign_request || truthy(option(&["aws_skip_signature", "skip_signature"]));
            let mut config = icechunk::config::S3Options::default();
            config.region = region;
            config.allow_http = endpoint.as_deref().is_some_and(|e| e.starts_with("http://"))
                || truthy(option(&["allow_http", "aws_allow_http"]));
            // A custom endpoint (MinIO, moto, Ceph) is addressed path-style unless told
            // otherwise, as for s3:// directory sources.
            config.force_path_style =
                endpoint.is_some() && !truthy(option(&["aws_virtual_hosted_style_request"]));
            config.endpoint_url = endpoint;
            config.anonymous = anonymous;
            let creds = if anonymous {
                icechunk::config::S3Credentials::Anonymous
            } else {
                icechunk::config::S3Credentials::FromEnv
            };
            icechunk::storage::new_s3_object_store_storage(
                config,
                bucket,
                prefix,
                Some(creds),
                Vec::new(),
                Vec::new(),
            )
            .await
            .map_err(one_line)
        }
        Cloud::Gcs => {
            let config: HashMap<String, String> = remote.options.iter().cloned().collect();
            icechunk::storage::new_gcs_storage(bucket, prefix, None, Some(config), vec![], vec![])
                .map_err(one_line)
        }
        Cloud::Http => icechunk::storage::new_http_storage(url, None, None).map_err(one_line),
        Cloud::Azure => Err("Icechunk repositories in Azure are not supported yet".into()),
    }
}

/// Storage settings for the crate's requests (the repository's own and its virtual chunks'),
/// over the repository's persisted ones and its storage's defaults. A local repository's
/// defaults (made for the crate's own tests) cut every read into 4 KiB pieces, so one virtual
/// chunk of 128 KiB in S3 cost five ranged GETs; and the crate's default retries back off for
/// minutes, which a FUSE read must not wait for (our object stores give up after ~10 s too).
fn request_settings() -> icechunk::storage::Settings {
    use icechunk::storage::{ConcurrencySettings, RetriesSettings, Settings};
    use std::num::{NonZeroU16, NonZeroU64};
    Settings {
        concurrency: Some(ConcurrencySettings {
            // One ranged GET per chunk up to this size; larger ones are fetched in parallel
            // pieces of about this size (the crate's default for object stores).
            ideal_concurrent_request_size: NonZeroU64::new(12 << 20),
            max_concurrent_requests_for_object: NonZeroU16::new(18),
        }),
        retries: Some(RetriesSettings {
            max_tries: NonZeroU16::new(4),
            initial_backoff_ms: Some(100),
            max_backoff_ms: Some(2000),
        }),
        ..Default::default()
    }
}

/// `http://h:9000/` and `http://h:9000` name one endpoint.
fn same_endpoint(a: &str, b: &str) -> bool {
    a.trim_end_matches('/').eq_ignore_ascii_case(b.trim_end_matches('/'))
}

/// The endpoint the user gave the mount itself (`--endpoint-url`, else the environment's),
/// which a virtual chunk container may use without `--authorize-virtual`.
fn mount_endpoint(remote: &RemoteOptions) -> Option<String> {
    remote
        .endpoint_url
        .clone()
        .or_else(|| std::env::var("AWS_ENDPOINT_URL_S3").ok())
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
}

/// Credentials for the repository's virtual chunk containers. A repository is data from
/// somewhere else: it must not make the mount show arbitrary local files (`file:///etc/`), nor
/// make it fetch from a host of the repository's choosing (an S3 container whose endpoint is
/// `http://169.254.169.254`, path-style, would show the instance's metadata as chunk files).
/// So local-file containers, and S3-compatible containers with an endpoint of their own other
/// than the mount's, are read only when a prefix in `authorize` covers them; so are HTTP(S)
/// containers on a loopback, private or link-local host (store/egress.rs). S3 on its usual
/// endpoints, GCS, Azure and other HTTP(S) containers are read with credentials from the
/// environment (anonymously where the container says so).
fn authorized_containers(
    repo: &Repository,
    authorize: &[String],
    endpoint: Option<&str>,
) -> HashMap<String, Option<Credentials>> {
    use icechunk::config::{ObjectStoreConfig, S3Credentials};
    // S3 and Tigris containers: anonymous where the container says so, else the environment's.
    let s3_credentials = |anonymous: bool| {
        Credentials::S3(if anonymous { S3Credentials::Anonymous } else { S3Credentials::FromEnv })
    };
    let mut creds = HashMap::new();
    for c in repo.config().virtual_chunk_containers() {
        let prefix = c.url_prefix().to_string();
        let listed = authorize.iter().any(|a| a == "all" || prefix.starts_with(a.as_str()));
        let refused = |why: &str| {
            tracing::warn!(
                container = %prefix,
                "virtual chunks {why} are not read (EIO) unless authorized: \
                 --authorize-virtual {prefix}"
            )
        };
        let cred = match &c.store {
            ObjectStoreConfig::S3(o) | ObjectStoreConfig::S3Compatible(o) => {
                let own = o.endpoint_url.as_deref();
                if let Some(e) = own.filter(|e| !endpoint.is_some_and(|m| same_endpoint(e, m))) {
                    if !listed {
                        refused(&format!("on endpoint {e}"));
                        continue;
                    }
                }
                Some(s3_credentials(o.anonymous))
            }
            ObjectStoreConfig::Tigris(o) => Some(s3_credentials(o.anonymous)),
            ObjectStoreConfig::LocalFileSystem(_) if listed => {
                Some(Credentials::LocalFileSystemAccess)
            }
            ObjectStoreConfig::LocalFileSystem(_) => {
                refused("in local files");
                continue;
            }
            ObjectStoreConfig::Http(_) => {
                if !listed {
                    if let Err(e) = crate::store::egress::check_http_target(&prefix, &[], None) {
                        tracing::warn!(container = %prefix, "virtual chunks not read (EIO): {e}");
                        continue;
                    }
                }
                Some(Credentials::HttpAccess)
            }
            ObjectStoreConfig::Gcs(_) => {
                Some(Credentials::Gcs(icechunk::config::GcsCredentials::FromEnv))
            }
            ObjectStoreConfig::Azure(_) => {
                Some(Credentials::Azure(icechunk::config::AzureCredentials::FromEnv))
            }
            ObjectStoreConfig::InMemory => None,
        };
        tracing::info!(container = %prefix, "virtual chunks readable");
        creds.insert(prefix, cred);
    }
    creds
}

impl IcechunkStore {
    /// Open the repository at `location` and the version `opts.reference` names. A missing
    /// repository or ref fails here, with a one-line reason.
    pub async fn open(
        location: &Location,
        remote: &RemoteOptions,
        opts: &IcechunkOptions,
    ) -> Result<ReadOnly<IcechunkStore>, String> {
        let shown = match location {
            Location::Local(p) => p.display().to_string(),
            Location::Remote { url, .. } => crate::store::backends::object::display_url(url),
        };
        let storage = storage_for(location, remote).await.map_err(|e| format!("{shown}: {e}"))?;
        let repo = Repository::open(storage)
            .execute()
            .await
            .map_err(|e| format!("{shown}: not an Icechunk repository ({})", one_line(e)))?;
        let (snapshot, branch) =
            resolve(&repo, &opts.reference).await.map_err(|e| format!("{shown}: {e}"))?;
        let creds =
            authorized_containers(&repo, &opts.authorize, mount_endpoint(remote).as_deref());
        let config = icechunk::config::RepositoryConfig {
            storage: Some(request_settings()),
            ..Default::default()
        };
        let mut repo = repo.reopen(Some(config), Some(creds)).await.map_err(one_line)?;
        // HTTP(S) containers: every redirect and resolved address checked (icechunk_http.rs).
        let egress = crate::store::egress::Egress { authorized: opts.authorize.clone(), own: None };
        let fetcher = crate::store::backends::icechunk_http::GuardedFetcher::new(egress)?;
        repo.set_http_virtual_chunk_fetcher(Arc::new(fetcher));
        let current = open_session(&repo, snapshot).await.map_err(|e| format!("{shown}: {e}"))?;
        let what = match &opts.reference {
            RefSpec::Branch(n) | RefSpec::Tag(n) | RefSpec::Snapshot(n) | RefSpec::Any(n) => n,
        };
        tracing::info!(repository = %shown, r#ref = %what, snapshot = %current.snapshot, "icechunk repository opened");
        Ok(ReadOnly(IcechunkStore {
            repo,
            branch,
            ttl: opts.ttl,
            current: std::sync::Mutex::new(Arc::new(current)),
            refresh: tokio::sync::Mutex::new(()),
            describe: format!("icechunk:{shown}@{what}"),
            grid_limit: GRID_LISTING_LIMIT,
        }))
    }

    /// The snapshot served now (branch head looked up again once the TTL has passed).
    async fn current(&self) -> Arc<Current> {
        let cur = crate::locks::lock(&self.current).clone();
        let Some(branch) = &self.branch else { return cur };
        if crate::clock::since(cur.checked) < self.ttl {
            return cur;
        }
        let _one = self.refresh.lock().await;
        let cur = crate::locks::lock(&self.current).clone();
        if crate::clock::since(cur.checked) < self.ttl {
            return cur;
        }
        let next = match self.repo.lookup_branch(branch).await {
            Ok(id) if id == cur.snapshot => Current {
                session: cur.session.clone(),
                snapshot: id,
                modified: cur.modified,
                checked: crate::clock::now(),
            },
            Ok(id) => match open_session(&self.repo, id).await {
                Ok(next) => {
                    tracing::info!(branch, from = %cur.snapshot, to = %next.snapshot, "branch moved on; serving its new head");
                    next
                }
                Err(e) => {
                    tracing::warn!(branch, "new branch head unreadable, keeping the old one: {e}");
                    return cur;
                }
            },
            Err(e) => {
                // Keep serving the snapshot we have: it is still complete and consistent.
                tracing::warn!(
                    branch,
                    "branch lookup failed, keeping {}: {}",
                    cur.snapshot,
                    one_line(e)
                );
                return cur;
            }
        };
        let next = Arc::new(next);
        *crate::locks::lock(&self.current) = next.clone();
        next
    }

    /// Bytes `range` of `key` as the snapshot `cur` holds them.
    async fn range_in(&self, cur: &Current, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        let not_found = || StoreError::NotFound(key.to_string());
        match parse_key(key).ok_or_else(not_found)? {
            Target::Meta(path) => match cur.session.get_node(&path).await {
                Ok(node) => {
                    let r = crate::store::ByteRange::Range(range).clip(node.user_data.len() as u64);
                    Ok(node.user_data.slice(r.start as usize..r.end as usize))
                }
                Err(e) if is_not_found(&e.kind) => Err(not_found()),
                Err(e) => Err(backend(key, e.kind)),
            },
            Target::Chunk(path, coords) => {
                let payload =
                    self.payload(cur, key, &path, coords.clone()).await?.ok_or_else(not_found)?;
                let r = crate::store::ByteRange::Range(range).clip(payload.length());
                if r.is_empty() {
                    return Ok(Bytes::new());
                }
                let reader = cur
                    .session
                    .get_chunk_reader(
                        &path,
                        &ChunkIndices(coords),
                        &icechunk::format::ByteRange::Bounded(r),
                    )
                    .await
                    .map_err(|e| backend(key, e.kind))?
                    .ok_or_else(not_found)?;
                reader.await.map_err(|e| backend(key, e.kind))
            }
        }
    }

    async fn head_in(&self, cur: &Current, key: &str) -> StoreResult<Option<ObjectMeta>> {
        match parse_key(key) {
            None => Ok(None),
            Some(Target::Meta(path)) => match cur.session.get_node(&path).await {
                Ok(node) => Ok(Some(meta_of(&node.user_data, cur.modified))),
                Err(e) if is_not_found(&e.kind) => Ok(None),
                Err(e) => Err(backend(key, e.kind)),
            },
            Some(Target::Chunk(path, coords)) => Ok(self
                .payload(cur, key, &path, coords)
                .await?
                .map(|p| chunk_meta(&p, cur.modified, &cur.snapshot))),
        }
    }

    async fn payload(
        &self,
        cur: &Current,
        key: &str,
        path: &IcPath,
        coords: Vec<u32>,
    ) -> StoreResult<Option<ChunkPayload>> {
        // get_chunk_ref accepts fewer coordinates than dimensions: a prefix is no chunk.
        match cur.session.get_node(path).await {
            Ok(node) => match node.node_data {
                NodeData::Array { shape, .. } if shape.len() == coords.len() => {}
                _ => return Ok(None),
            },
            Err(e) if is_not_found(&e.kind) => return Ok(None),
            Err(e) => return Err(backend(key, e.kind)),
        }
        match cur.session.get_chunk_ref(path, &ChunkIndices(coords)).await {
            Ok(p) => Ok(p),
            Err(e) if is_not_found(&e.kind) => Ok(None),
            Err(e) => Err(backend(key, e.kind)),
        }
    }

    /// Is `key` a directory: the root, a node, or a chunk-key prefix inside an array's grid.
    async fn is_dir(&self, cur: &Current, key: &str) -> StoreResult<bool> {
        if key.is_empty() {
            return Ok(true);
        }
        let Some(path) = ic_path(key) else { return Ok(false) };
        match cur.session.get_node(&path).await {
            Ok(_) => return Ok(true),
            Err(e) if is_not_found(&e.kind) => {}
            Err(e) => return Err(backend(key, e.kind)),
        }
        let Some((array, coords)) = split_chunk_key(key) else { return Ok(false) };
        let Some(apath) = ic_path(array) else { return Ok(false) };
        match cur.session.get_node(&apath).await {
            Ok(node) => Ok(match node.node_data {
                NodeData::Array { shape, .. } => {
                    coords.len() < shape.len()
                        && coords.iter().zip(shape.num_chunks()).all(|(c, n)| *c < n.max(1))
                }
                NodeData::Group => false,
            }),
            Err(e) if is_not_found(&e.kind) => Ok(false),
            Err(e) => Err(backend(key, e.kind)),
        }
    }

    async fn list_in(&self, cur: &Current, prefix: &str) -> StoreResult<Listing> {
        let s = &cur.session;
        let mut out = Listing::default();
        let Some(path) = ic_path(prefix) else { return Ok(out) };
        match s.get_node(&path).await {
            Ok(node) => {
                out.files.push(("zarr.json".into(), meta_of(&node.user_data, cur.modified)));
                match node.node_data {
                    NodeData::Group => {
                        let own = path.to_string();
                        let base = if own == "/" { own.clone() } else { format!("{own}/") };
                        let mut dirs = BTreeSet::new();
                        for child in
                            s.list_nodes(&path).await.map_err(|e| backend(prefix, e.kind))?
                        {
                            let child = child.map_err(|e| backend(prefix, e.kind))?;
                            let p = child.path.to_string();
                            if let Some(rel) = p.strip_prefix(&base).filter(|r| !r.is_empty()) {
                                dirs.insert(rel.split('/').next().unwrap_or(rel).to_string());
                            }
                        }
                        out.dirs = dirs.into_iter().collect();
                    }
                    NodeData::Array { shape, .. } if shape.is_empty() => {
                        // A 0-d array's one chunk is the file `c`.
                        if let Some(p) = self.payload(cur, prefix, &path, vec![]).await? {
                            out.files
                                .push(("c".into(), chunk_meta(&p, cur.modified, &cur.snapshot)));
                        }
                    }
                    NodeData::Array { .. } => out.dirs.push("c".into()),
                }
                Ok(out)
            }
            Err(e) if is_not_found(&e.kind) => self.list_chunks(cur, prefix).await,
            Err(e) => Err(backend(prefix, e.kind)),
        }
    }

    /// A directory of chunk keys (`a/c`, `a/c/3`). Where the chunk grid along the listed axis
    /// is at most `GRID_LISTING_LIMIT` wide, the listing comes from the grid: the last axis by
    /// one manifest lookup per chunk index (existing chunks only), the others as every index
    /// of the grid (as `lookup` does; a sparse array shows empty directories). Wider axes fall
    /// back to one pass over all of the array's chunk references, which the crate offers only
    /// whole (time in the array's chunk count; memory only in this directory's entries).
    async fn list_chunks(&self, cur: &Current, prefix: &str) -> StoreResult<Listing> {
        let mut out = Listing::default();
        let Some((array, coords)) = split_chunk_key(prefix) else { return Ok(out) };
        let Some(apath) = ic_path(array) else { return Ok(out) };
        let shape = match cur.session.get_node(&apath).await {
            Ok(n) => match n.node_data {
                NodeData::Array { shape, .. } if coords.len() < shape.len() => shape,
                _ => return Ok(out),
            },
            Err(e) if is_not_found(&e.kind) => return Ok(out),
            Err(e) => return Err(backend(prefix, e.kind)),
        };
        let grid: Vec<u32> = shape.num_chunks().map(|n| n.max(1)).collect();
        if coords.iter().zip(&grid).any(|(c, n)| c >= n) {
            return Ok(out);
        }
        let depth = coords.len();
        if grid[depth] <= self.grid_limit {
            if depth + 1 < grid.len() {
                out.dirs = (0..grid[depth]).map(|i| i.to_string()).collect();
                return Ok(out);
            }
            for i in 0..grid[depth] {
                let mut c = coords.clone();
                c.push(i);
                if let Some(p) = self.payload(cur, prefix, &apath, c).await? {
                    out.files.push((i.to_string(), chunk_meta(&p, cur.modified, &cur.snapshot)));
                }
            }
            return Ok(out);
        }
        let depth = coords.len();
        let mut dirs = BTreeSet::new();
        let chunks = cur.session.array_chunk_iterator(&apath).await;
        futures::pin_mut!(chunks);
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| backend(prefix, e.kind))?;
            let c = &chunk.coord.0;
            if c.len() <= depth || c[..depth] != coords[..] {
                continue;
            }
            if c.len() == depth + 1 {
                out.files.push((
                    c[depth].to_string(),
                    chunk_meta(&chunk.payload, cur.modified, &cur.snapshot),
                ));
            } else {
                dirs.insert(c[depth]);
            }
        }
        out.files.sort_by(|a, b| a.0.cmp(&b.0));
        out.dirs = dirs.into_iter().map(|d| d.to_string()).collect();
        Ok(out)
    }
}

/// Is the local directory `p` an Icechunk repository (and not a Zarr store)? Version 1
/// repositories hold `refs/` and `snapshots/`, version 2 ones a `repo` object and
/// `snapshots/`; a Zarr store has a `zarr.json` (or v2 `.zgroup`) at its root instead.
pub fn looks_like_repository(p: &std::path::Path) -> bool {
    let is_dir = |n: &str| p.join(n).is_dir();
    let zarr = ["zarr.json", ".zgroup", ".zarray"].iter().any(|n| p.join(n).exists());
    !zarr && is_dir("snapshots") && (is_dir("refs") || p.join("repo").is_file())
}

/// The snapshot a ref names, and the branch to follow if it is one.
async fn resolve(repo: &Repository, r: &RefSpec) -> Result<(SnapshotId, Option<String>), String> {
    async fn snapshot(repo: &Repository, n: &str) -> Result<SnapshotId, String> {
        let id = SnapshotId::try_from(n).map_err(|e| e.to_string())?;
        repo.lookup_snapshot(&id).await.map_err(one_line)?;
        Ok(id)
    }
    match r {
        RefSpec::Branch(n) => match repo.lookup_branch(n).await {
            Ok(id) => Ok((id, Some(n.clone()))),
            Err(e) => Err(format!("no branch {n:?} ({}){}", one_line(e), known_refs(repo).await)),
        },
        RefSpec::Tag(n) => match repo.lookup_tag(n).await {
            Ok(id) => Ok((id, None)),
            Err(e) => Err(format!("no tag {n:?} ({}){}", one_line(e), known_refs(repo).await)),
        },
        RefSpec::Snapshot(n) => match snapshot(repo, n).await {
            Ok(id) => Ok((id, None)),
            Err(e) => Err(format!("no snapshot {n:?} ({e})")),
        },
        RefSpec::Any(n) => {
            if let Ok(id) = repo.lookup_branch(n).await {
                return Ok((id, Some(n.clone())));
            }
            if let Ok(id) = repo.lookup_tag(n).await {
                return Ok((id, None));
            }
            if let Ok(id) = snapshot(repo, n).await {
                return Ok((id, None));
            }
            Err(format!("no branch, tag or snapshot {n:?}{}", known_refs(repo).await))
        }
    }
}

/// `; branches: a, b; tags: t` for an error message.
async fn known_refs(repo: &Repository) -> String {
    let list = |s: std::collections::BTreeSet<String>| s.into_iter().collect::<Vec<_>>().join(", ");
    let branches = repo.list_branches().await.map(list).unwrap_or_default();
    let tags = repo.list_tags().await.map(list).unwrap_or_default();
    format!("; branches: [{branches}], tags: [{tags}]")
}

async fn open_session(repo: &Repository, id: SnapshotId) -> Result<Current, String> {
    let info = repo.lookup_snapshot(&id).await.map_err(one_line)?;
    let millis = u64::try_from(info.flushed_at.timestamp_millis()).unwrap_or(0);
    let session =
        repo.readonly_session(&VersionInfo::SnapshotId(id.clone())).await.map_err(one_line)?;
    Ok(Current {
        session: Arc::new(session),
        snapshot: id,
        modified: SystemTime::UNIX_EPOCH + Duration::from_millis(millis),
        checked: crate::clock::now(),
    })
}

impl StoreHints for IcechunkStore {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn has_real_dirs(&self) -> bool {
        false
    }
}

#[async_trait]
impl ReadStore for IcechunkStore {
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        let cur = self.current().await;
        self.range_in(&cur, key, range).await
    }

    /// Size and bytes from one snapshot, so a branch that moves between the two cannot pair
    /// one commit's size with another's bytes.
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let cur = self.current().await;
        let Some(meta) = self.head_in(&cur, key).await? else { return Ok(None) };
        let read = self.range_in(&cur, key, range.clip(meta.size)).await;
        absent_if_not_found(read.map(|data| (data, meta)))
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        let cur = self.current().await;
        self.head_in(&cur, key).await
    }
}

#[async_trait]
impl ListStore for IcechunkStore {
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        let cur = self.current().await;
        self.list_in(&cur, prefix).await
    }

    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        let cur = self.current().await;
        let file = self.head_in(&cur, key).await?;
        let dir = self.is_dir(&cur, key).await?;
        Ok(Lookup { file, dir, dir_perms: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::prelude::*;

    #[test]
    fn refs_parse() {
        assert_eq!(RefSpec::parse(None).unwrap(), RefSpec::Branch("main".into()));
        assert_eq!(RefSpec::parse(Some("dev")).unwrap(), RefSpec::Any("dev".into()));
        assert_eq!(RefSpec::parse(Some("tag:v1")).unwrap(), RefSpec::Tag("v1".into()));
        assert_eq!(RefSpec::parse(Some("branch:a:b")).unwrap(), RefSpec::Branch("a:b".into()));
        assert_eq!(RefSpec::parse(Some("snapshot:X")).unwrap(), RefSpec::Snapshot("X".into()));
        assert_eq!(RefSpec::parse(Some("other:x")).unwrap(), RefSpec::Any("other:x".into()));
        assert!(RefSpec::parse(Some("tag:")).is_err());
        assert!(RefSpec::parse(Some("")).is_err());
    }

    #[test]
    fn keys_map_to_nodes_and_chunks() {
        let p = |s: &str| IcPath::try_from(s).unwrap();
        assert_eq!(parse_key("zarr.json"), Some(Target::Meta(IcPath::root())));
        assert_eq!(parse_key("a/b/zarr.json"), Some(Target::Meta(p("/a/b"))));
        assert_eq!(parse_key("a/c/0/12"), Some(Target::Chunk(p("/a"), vec![0, 12])));
        assert_eq!(parse_key("c/3"), Some(Target::Chunk(IcPath::root(), vec![3])));
        assert_eq!(parse_key("g/c/arr/c"), Some(Target::Chunk(p("/g/c/arr"), vec![])));
        // An array named `abc` is no chunk prefix; a non-numeric coordinate is no chunk.
        assert_eq!(parse_key("abc/0"), None);
        assert_eq!(parse_key("a/c/x"), None);
        assert_eq!(parse_key("a/c/-1"), None);
        assert_eq!(split_chunk_key("x/c/c/1"), Some(("x/c", vec![1])));
    }

    /// Which virtual chunk containers a mount reads without being told, and with what.
    #[tokio::test]
    async fn containers_on_other_endpoints_and_local_files_need_authorization() {
        use icechunk::config::{ObjectStoreConfig, RepositoryConfig, S3Credentials, S3Options};
        use icechunk::virtual_chunks::VirtualChunkContainer;
        let s3 = |endpoint: Option<&str>, anonymous: bool| {
            let mut o = S3Options::default();
            o.endpoint_url = endpoint.map(str::to_string);
            o.anonymous = anonymous;
            o
        };
        let mut config = RepositoryConfig::default();
        for (prefix, store) in [
            ("s3://aws/", ObjectStoreConfig::S3(s3(None, false))),
            ("s3://open/", ObjectStoreConfig::S3(s3(None, true))),
            ("s3://minio/", ObjectStoreConfig::S3Compatible(s3(Some("http://m:9000/"), false))),
            ("s3://other/", ObjectStoreConfig::S3Compatible(s3(Some("http://x:9000"), false))),
            ("file:///data/", ObjectStoreConfig::LocalFileSystem("/data".into())),
            ("https://h/", ObjectStoreConfig::Http(Default::default())),
            ("http://169.254.169.254/", ObjectStoreConfig::Http(Default::default())),
        ] {
            config
                .set_virtual_chunk_container(
                    VirtualChunkContainer::new(prefix.into(), store).unwrap(),
                )
                .unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let storage = icechunk::new_local_filesystem_storage(dir.path()).await.unwrap();
        let repo = Repository::create(storage).config(config).execute().await.unwrap();
        let from_env =
            |c: &Option<Credentials>| matches!(c, Some(Credentials::S3(S3Credentials::FromEnv)));

        let got = authorized_containers(&repo, &[], Some("http://m:9000"));
        let mut keys: Vec<_> = got.keys().cloned().collect();
        keys.sort();
        // Not `s3://other/` (an endpoint of the repository's choosing), not `file://`, not
        // an HTTP host of the instance's metadata.
        assert_eq!(keys, ["https://h/", "s3://aws/", "s3://minio/", "s3://open/"]);
        assert!(from_env(&got["s3://aws/"]) && from_env(&got["s3://minio/"]));
        assert!(matches!(got["s3://open/"], Some(Credentials::S3(S3Credentials::Anonymous))));
        assert!(matches!(got["https://h/"], Some(Credentials::HttpAccess)));
        // Without the mount's own endpoint, `s3://minio/` needs authorizing too.
        assert!(!authorized_containers(&repo, &[], None).contains_key("s3://minio/"));

        let asked = [
            "s3://other/".to_string(),
            "file:///data/".to_string(),
            "http://169.254.169.254/".to_string(),
        ];
        let got = authorized_containers(&repo, &asked, None);
        assert!(from_env(&got["s3://other/"]));
        assert!(matches!(got["file:///data/"], Some(Credentials::LocalFileSystemAccess)));
        assert!(matches!(got["http://169.254.169.254/"], Some(Credentials::HttpAccess)));
        assert!(!got.contains_key("s3://minio/"));
        assert_eq!(authorized_containers(&repo, &["all".into()], None).len(), 7);
        // The crate accepts what we hand it.
        repo.reopen(None, Some(got)).await.unwrap();
    }

    const ARRAY: &str = r#"{"zarr_format":3,"node_type":"array","shape":[4,2],"data_type":"uint8",
        "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2,2]}},
        "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
        "fill_value":0,"codecs":[{"name":"bytes"}],"attributes":{}}"#;

    /// Commit `chunks` (key, bytes) on `branch` through the crate's own Zarr store.
    async fn commit(repo: &Repository, branch: &str, chunks: &[(&str, Bytes)]) -> SnapshotId {
        let session = repo.writable_session(branch).await.unwrap();
        let store =
            icechunk::Store::from_session(Arc::new(tokio::sync::RwLock::new(session))).await;
        for (k, v) in chunks {
            store.set(k, v.clone()).await.unwrap();
        }
        let session = store.session();
        let mut session = session.write().await;
        session.commit("test").execute().await.unwrap()
    }

    /// A repository in the crate's current (version 2) format, written by the crate itself
    /// (the Python tests cover version 1, which PyPI's icechunk 1.x writes): nodes, chunk
    /// objects and inline chunks read back; listings; a tag stays put while a followed
    /// branch moves on; writes are refused.
    #[tokio::test]
    async fn reads_a_repository_the_crate_wrote_and_follows_its_branch() {
        let dir = tempfile::tempdir().unwrap();
        let storage = icechunk::new_local_filesystem_storage(dir.path()).await.unwrap();
        let repo = Repository::create(storage).execute().await.unwrap();
        let big = Bytes::from(vec![7u8; 600]); // over the inline threshold: a chunk object
        let first = commit(
            &repo,
            "main",
            &[
                ("zarr.json", Bytes::from_static(br#"{"zarr_format":3,"node_type":"group"}"#)),
                ("g/zarr.json", Bytes::from_static(br#"{"zarr_format":3,"node_type":"group"}"#)),
                ("g/a/zarr.json", Bytes::from_static(ARRAY.as_bytes())),
                ("g/a/c/0/0", big.clone()),
                ("g/a/c/1/0", Bytes::from_static(b"tiny")),
            ],
        )
        .await;
        repo.create_tag("t", &first).await.unwrap();
        assert!(looks_like_repository(dir.path()));

        let location = Location::Local(dir.path().to_path_buf());
        let opts = |r: &str| IcechunkOptions {
            reference: RefSpec::parse(Some(r)).unwrap(),
            ttl: Duration::ZERO,
            authorize: vec![],
        };
        let remote = RemoteOptions::default();
        let main = IcechunkStore::open(&location, &remote, &opts("main")).await.unwrap();
        let tag = IcechunkStore::open(&location, &remote, &opts("tag:t")).await.unwrap();
        let missing = IcechunkStore::open(&location, &remote, &opts("nope")).await;
        assert!(missing.err().unwrap().contains("branches: [main], tags: [t]"));

        let root = main.list("").await.unwrap();
        assert_eq!(root.dirs, ["g"]);
        assert_eq!(root.files[0].0, "zarr.json");
        assert_eq!(main.list("g").await.unwrap().dirs, ["a"]);
        assert_eq!(main.list("g/a").await.unwrap().dirs, ["c"]);
        assert_eq!(main.list("g/a/c").await.unwrap().dirs, ["0", "1"]);
        let row = main.list("g/a/c/0").await.unwrap();
        assert_eq!(row.files.len(), 1);
        assert_eq!((row.files[0].0.as_str(), row.files[0].1.size), ("0", 600));
        assert!(main.list("g/a/c/0/0").await.unwrap().files.is_empty());
        assert!(main.list("g/a/c/2").await.unwrap().files.is_empty()); // outside the grid

        assert_eq!(main.get("g/a/c/0/0").await.unwrap(), big);
        assert_eq!(&main.get_range("g/a/c/1/0", 1..3).await.unwrap()[..], b"in");
        assert_eq!(&main.get_range("g/a/c/1/0", 3..99).await.unwrap()[..], b"y");
        assert!(main.get_range("g/a/c/1/0", 9..20).await.unwrap().is_empty());
        assert_eq!(main.get("g/a/zarr.json").await.unwrap(), ARRAY.as_bytes());
        assert!(matches!(main.get("g/a/c/3/0").await, Err(StoreError::NotFound(_))));
        assert!(matches!(main.get("g/a/c/0").await, Err(StoreError::NotFound(_))));
        assert!(main.head("g/zarr.json/x").await.unwrap().is_none());

        let l = main.lookup("g/a/c/1").await.unwrap();
        assert!(l.dir && l.file.is_none());
        let l = main.lookup("g/a/c/1/0").await.unwrap();
        assert!(!l.dir && l.file.unwrap().size == 4);
        assert!(!main.lookup("g/a/c/2").await.unwrap().dir); // outside the 2x1 chunk grid
        assert!(!main.lookup("nothing").await.unwrap().dir);

        // Axes wider than the limit: the listing is one pass over the chunk references.
        let mut scan = IcechunkStore::open(&location, &remote, &opts("main")).await.unwrap();
        scan.0.grid_limit = 1;
        assert_eq!(scan.list("g/a/c").await.unwrap().dirs, ["0", "1"]);
        let row = scan.list("g/a/c/1").await.unwrap();
        assert_eq!(
            row.files.iter().map(|f| (f.0.as_str(), f.1.size)).collect::<Vec<_>>(),
            [("0", 4)]
        );

        assert!(matches!(main.put("g/x", Bytes::new()).await, Err(StoreError::ReadOnly)));
        assert!(matches!(main.delete("g/a/c/1/0").await, Err(StoreError::ReadOnly)));

        // A new commit on main: the followed branch (TTL 0) shows it, the tag does not; an
        // unchanged chunk keeps its version (caches above stay valid).
        let v_big = main.head("g/a/c/0/0").await.unwrap().unwrap().version;
        let v_tiny = main.head("g/a/c/1/0").await.unwrap().unwrap().version;
        commit(&repo, "main", &[("g/a/c/1/0", Bytes::from_static(b"TINY"))]).await;
        assert_eq!(&main.get("g/a/c/1/0").await.unwrap()[..], b"TINY");
        assert_eq!(&tag.get("g/a/c/1/0").await.unwrap()[..], b"tiny");
        assert_eq!(main.head("g/a/c/0/0").await.unwrap().unwrap().version, v_big);
        assert_ne!(main.head("g/a/c/1/0").await.unwrap().unwrap().version, v_tiny);
    }
}
