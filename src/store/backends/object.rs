//! Object stores (S3, GCS, Azure Blob, plain HTTP) as a `Store`, through the `object_store` crate.
//!
//! A mount of `s3://bucket/prefix` keeps `prefix` here and prepends it to every key. Directories
//! are key prefixes only (`has_real_dirs() == false`). Every request has bounded retries and
//! timeouts, so a dead endpoint turns into an error within seconds rather than a hung mount.
//! Error text and `describe()` never contain credentials: secret values that went into the
//! builder are scrubbed from every message that leaves this module.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientConfigKey, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutOptions,
    PutPayload, RetryConfig, UpdateVersion, WriteMultipart,
};

use crate::store::backends::aws_chain::{profile_settings, AwsChain};
use crate::store::backends::renewing::RenewingCredentials;
use crate::store::location::Cloud;
use crate::store::{
    error_chain, join_key, name_problem, validate_key, ByteRange, HiddenKeys, ListPages, Listing,
    Lookup, ObjectMeta, PutMode, Revalidated, StoreError, StoreResult,
};
use crate::store::{ListStore, ReadStore, StoreHints, WriteStore};

/// Objects up to this size are written with one PUT; larger ones with a multipart upload.
pub const MULTIPART_THRESHOLD: usize = 8 << 20;
/// Part size of multipart uploads.
const PART_SIZE: usize = 8 << 20;

/// How to reach an object store, from the command line.
#[derive(Debug, Clone, Default)]
pub struct RemoteOptions {
    /// `--endpoint-url`: a custom endpoint (S3-compatible servers, emulators).
    pub endpoint_url: Option<String>,
    /// `--region` (S3 only).
    pub region: Option<String>,
    /// `-o key=value`, passed to the builder's `with_config` after everything else.
    pub options: Vec<(String, String)>,
    /// The rule for `http(s)://` stores whose URL data chose (reference targets): which
    /// internal hosts they, and their redirects, may reach. None: the store's own origin only.
    pub egress: Option<Arc<crate::store::egress::Egress>>,
    /// `--profile` (S3): the AWS profile to take credentials, region and endpoint from
    /// (default: `AWS_PROFILE`, else `default`).
    pub profile: Option<String>,
    /// `--no-sign-request` (S3): anonymous requests, for public buckets.
    pub no_sign_request: bool,
}

/// object_store's HTTP client for `http(s)://` stores, built by [`Egress::client_builder`]
/// (every redirect and resolved address checked; store/egress.rs) with the same timeouts
/// and no content decoding (sizes come from Content-Length).
///
/// [`Egress::client_builder`]: crate::store::egress::Egress::client_builder
#[derive(Debug)]
struct GuardedConnector(Arc<crate::store::egress::Egress>);

impl object_store::client::HttpConnector for GuardedConnector {
    fn connect(
        &self,
        _: &object_store::ClientOptions,
    ) -> object_store::Result<object_store::client::HttpClient> {
        let client = self
            .0
            .client_builder()
            .timeout(crate::store::egress::REQUEST_TIMEOUT)
            .connect_timeout(crate::store::egress::CONNECT_TIMEOUT)
            .build()
            .map_err(|e| object_store::Error::Generic { store: "HTTP", source: Box::new(e) })?;
        Ok(object_store::client::HttpClient::new(client))
    }
}

/// The S3 credentials of a mount, as the AWS CLI finds them (see `aws_chain`).
type AwsCredentials = Arc<RenewingCredentials<AwsChain>>;

/// Whether `-o` options give S3 credentials (or ask for none) themselves: then object_store
/// uses them as given, and the AWS chain is not consulted.
fn s3_options_set_credentials(options: &[(String, String)]) -> bool {
    use object_store::aws::AmazonS3ConfigKey as K;
    options.iter().any(|(k, _)| {
        matches!(
            k.parse::<K>(),
            Ok(K::AccessKeyId | K::SecretAccessKey | K::Token | K::SkipSignature)
        )
    })
}

/// Bounded retries: a dead server is an error after at most ~10 s of retrying.
fn retry_config() -> RetryConfig {
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries: 3,
        retry_timeout: Duration::from_secs(10),
    }
}
const REQUEST_TIMEOUT: &str = "30s";
const CONNECT_TIMEOUT: &str = "5s";

/// Option keys whose values are secrets (scrubbed from error text).
fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "secret",
        "token",
        "password",
        "access_key",
        "account_key",
        "sas",
        "service_account_key",
        "client_secret",
    ]
    .iter()
    .any(|s| k.contains(s))
}

/// Check `-o` keys for `cloud` without building anything (for the CLI: one-line error, exit 2).
pub fn check_options(cloud: Cloud, options: &[(String, String)]) -> Result<(), String> {
    for (k, _) in options {
        let ok = match cloud {
            Cloud::S3 => k.parse::<object_store::aws::AmazonS3ConfigKey>().is_ok(),
            Cloud::Gcs => k.parse::<object_store::gcp::GoogleConfigKey>().is_ok(),
            Cloud::Azure => k.parse::<object_store::azure::AzureConfigKey>().is_ok(),
            Cloud::Http => k.parse::<ClientConfigKey>().is_ok(),
        };
        if !ok {
            return Err(format!("-o {k}: unknown option for {} stores", cloud_name(cloud)));
        }
    }
    Ok(())
}

/// Whether `key` is an option of some object store (`-o KEY=VALUE`, or an fstab `key=value`
/// that names no flag).
pub fn is_option_key(key: &str) -> bool {
    key.parse::<object_store::aws::AmazonS3ConfigKey>().is_ok()
        || key.parse::<object_store::gcp::GoogleConfigKey>().is_ok()
        || key.parse::<object_store::azure::AzureConfigKey>().is_ok()
        || key.parse::<ClientConfigKey>().is_ok()
}

fn cloud_name(cloud: Cloud) -> &'static str {
    match cloud {
        Cloud::S3 => "s3",
        Cloud::Gcs => "gcs",
        Cloud::Azure => "azure",
        Cloud::Http => "http",
    }
}

/// Split `scheme://bucket/some/prefix/` into (`scheme://bucket`, `some/prefix`).
fn split_url(url: &str) -> (String, String) {
    let url = url.split(['?', '#']).next().unwrap_or("");
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let prefix = prefix.split('/').filter(|s| !s.is_empty()).collect::<Vec<_>>().join("/");
    (format!("{scheme}://{bucket}"), prefix)
}

pub struct ObjectStoreBackend {
    store: Arc<dyn ObjectStore>,
    /// The same store, when it can list with a page size (for cheap directory probes).
    pager: Option<Arc<dyn PaginatedListStore>>,
    /// Key prefix inside the bucket, without leading or trailing `/` ("" for the whole bucket).
    prefix: String,
    description: String,
    read_only: bool,
    /// Secret values given to the builder; never allowed into error text.
    secrets: Vec<String>,
    /// Keys left out of listings because they cannot be file names (each logged once).
    hidden: HiddenKeys,
    /// Conditional updates are by generation, not ETag (GCS): see `put_opts`.
    update_by_generation: bool,
    /// The rule an `http(s)://` store's requests obey (see [`RemoteOptions::egress`]).
    egress: Option<Arc<crate::store::egress::Egress>>,
    /// Object sizes seen, and what this server is known to refuse (see `get_ranged`).
    shapes: RequestShapes,
    /// S3 credentials from the AWS chain, renewed as they expire (None: given by `-o`, the
    /// store's own, or none at all).
    credentials: Option<AwsCredentials>,
}

/// How many object sizes a backend remembers (LRU; about 100 bytes each).
const SIZES_REMEMBERED: usize = 65_536;

/// What keeps ranged reads to request shapes every server accepts. A suffix range longer
/// than the object (`bytes=-N`, N > size) is whole-object on AWS and moto, but s3s-fs
/// answers 500, and Azure takes no suffix ranges at all: where the size is known, such a
/// read asks for the whole object instead; where it is not and the server refuses the
/// suffix, the read falls back to HEAD + a bounded range, and the mount remembers.
struct RequestShapes {
    /// Last known size of each key, from listings, HEADs and reads. Only a hint: a stale
    /// size never gives wrong bytes (see `get_ranged`).
    sizes: Mutex<lru::LruCache<String, u64>>,
    /// Set once this server has refused a suffix range: from then on a suffix read of an
    /// object of unknown size starts with a HEAD.
    suffix_needs_size: AtomicBool,
    /// Set once this server has answered a conditional GET of an unchanged object with its
    /// body (s3s-fs ignores If-None-Match): from then on revalidations are HEADs.
    conditions_ignored: AtomicBool,
}

impl Default for RequestShapes {
    fn default() -> Self {
        RequestShapes {
            sizes: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(SIZES_REMEMBERED).expect("non-zero"),
            )),
            suffix_needs_size: Default::default(),
            conditions_ignored: Default::default(),
        }
    }
}

impl RequestShapes {
    fn lock(&self) -> MutexGuard<'_, lru::LruCache<String, u64>> {
        crate::locks::lock(&self.sizes)
    }
    fn note(&self, key: &str, size: u64) {
        self.lock().put(key.to_string(), size);
    }
    fn forget(&self, key: &str) {
        self.lock().pop(key);
    }
    fn size(&self, key: &str) -> Option<u64> {
        self.lock().get(key).copied()
    }
    fn suffix_refused(&self) -> bool {
        self.suffix_needs_size.load(Ordering::Relaxed)
    }
    fn conditions_ignored(&self) -> bool {
        self.conditions_ignored.load(Ordering::Relaxed)
    }
}

/// Whether `e`, the answer to a suffix-range GET, says the server refuses that request
/// shape (rather than that the object is missing or the server is down): 416, 500 or 501,
/// or a client that cannot send it (object_store's Azure client).
fn refuses_suffix(e: &StoreError) -> bool {
    match e {
        StoreError::Unsupported(_) => true,
        StoreError::Backend { message, .. } => ["416", "500", "501"]
            .iter()
            .any(|code| message.contains(&format!("status code: {code}"))),
        _ => false,
    }
}

/// Whether the server answered with a 5xx status (after object_store's retries), as opposed
/// to not answering at all or refusing the request.
fn server_error(e: &object_store::Error) -> bool {
    error_chain(e).contains("non-2xx status code: 5")
}

/// The last `n` bytes of `data`.
fn last_bytes(data: Bytes, n: u64) -> Bytes {
    let keep = usize::try_from(n).unwrap_or(usize::MAX).min(data.len());
    data.slice(data.len() - keep..)
}

/// What a builder yields: the store, its paginated lister (none for HTTP), a description for
/// logs and whether the store is read-only.
type Built = (Arc<dyn ObjectStore>, Option<Arc<dyn PaginatedListStore>>, String, bool);

/// What the start-up check found below the source's prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// At least one key.
    Keys,
    /// Nothing: an empty bucket or a prefix with no key below it.
    Empty,
    /// The store cannot be listed (HTTP): it answered.
    Unknown,
}

impl ObjectStoreBackend {
    /// Wrap an existing object store (tests; or a store built elsewhere).
    pub fn new(store: Arc<dyn ObjectStore>, prefix: &str, description: String) -> Self {
        let prefix = prefix.trim_matches('/').to_string();
        ObjectStoreBackend {
            store,
            pager: None,
            prefix,
            description,
            read_only: false,
            secrets: Vec::new(),
            hidden: HiddenKeys::default(),
            update_by_generation: false,
            shapes: RequestShapes::default(),
            credentials: None,
            egress: None,
        }
    }

    /// Build the backend for `url` (`s3://`, `gs://`, `az://`, `http(s)://`).
    pub fn open(cloud: Cloud, url: &str, opts: &RemoteOptions) -> StoreResult<Self> {
        let (base, prefix) = split_url(url);
        let mut secrets: Vec<String> = opts
            .options
            .iter()
            .filter(|(k, v)| is_secret_key(k) && !v.is_empty())
            .map(|(_, v)| v.clone())
            .collect();
        for (k, v) in std::env::vars() {
            if (k.starts_with("AWS_") || k.starts_with("AZURE_") || k.starts_with("GOOGLE_"))
                && is_secret_key(&k)
                && v.len() >= 4
            {
                secrets.push(v);
            }
        }
        let http_endpoint =
            |e: Option<String>| e.is_some_and(|e| e.to_ascii_lowercase().starts_with("http://"));
        let bad_key = |k: &str| StoreError::Backend {
            key: String::new(),
            message: format!("-o {k}: unknown option"),
        };
        let mut credentials = None;
        let (store, pager, description, read_only): Built = match cloud {
            Cloud::S3 => {
                use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey as K};
                let mut b = AmazonS3Builder::from_env()
                    .with_url(base.clone())
                    .with_retry(retry_config())
                    .with_config(K::Client(ClientConfigKey::Timeout), REQUEST_TIMEOUT)
                    .with_config(K::Client(ClientConfigKey::ConnectTimeout), CONNECT_TIMEOUT);
                if let Some(e) = &opts.endpoint_url {
                    b = b.with_endpoint(e.clone());
                }
                if let Some(r) = &opts.region {
                    b = b.with_region(r.clone());
                }
                for (k, v) in &opts.options {
                    b = b.with_config(k.parse().map_err(|_| bad_key(k))?, v.clone());
                }
                let anonymous = opts.no_sign_request
                    || b.get_config_value(&K::SkipSignature)
                        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
                if anonymous {
                    b = b.with_skip_signature(true);
                }
                // What the flags, -o and the environment leave open comes from the AWS
                // profile, as the CLI has it.
                let profile = profile_settings(opts.profile.as_deref());
                let endpoint_set = b.get_config_value(&K::Endpoint).is_some()
                    || b.get_config_value(&K::S3Endpoint).is_some();
                if let (false, Some(e)) = (endpoint_set, profile.endpoint_url) {
                    b = b.with_endpoint(e);
                }
                if let (None, Some(r)) = (b.get_config_value(&K::Region), profile.region) {
                    b = b.with_region(r);
                }
                if http_endpoint(b.get_config_value(&K::Endpoint))
                    || http_endpoint(b.get_config_value(&K::S3Endpoint))
                {
                    b = b.with_allow_http(true);
                }
                if !anonymous && !s3_options_set_credentials(&opts.options) {
                    let region =
                        b.get_config_value(&K::Region).unwrap_or_else(|| "us-east-1".into());
                    let chain = AwsChain::new(opts.profile.as_deref(), &region);
                    let provider = Arc::new(RenewingCredentials::new(chain));
                    credentials = Some(provider.clone());
                    b = b.with_credentials(provider);
                }
                let s = Arc::new(b.build().map_err(|e| map_err_with("", e, &secrets))?);
                (s.clone(), Some(s), describe_url(&base, &prefix), false)
            }
            Cloud::Gcs => {
                use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey as K};
                let mut b = GoogleCloudStorageBuilder::from_env()
                    .with_url(base.clone())
                    .with_retry(retry_config())
                    .with_config(K::Client(ClientConfigKey::Timeout), REQUEST_TIMEOUT)
                    .with_config(K::Client(ClientConfigKey::ConnectTimeout), CONNECT_TIMEOUT);
                if let Some(e) = &opts.endpoint_url {
                    b = b.with_config(K::BaseUrl, e.clone());
                    if http_endpoint(Some(e.clone())) {
                        b = b.with_config(K::Client(ClientConfigKey::AllowHttp), "true");
                    }
                }
                for (k, v) in &opts.options {
                    b = b.with_config(k.parse().map_err(|_| bad_key(k))?, v.clone());
                }
                let s = Arc::new(b.build().map_err(|e| map_err_with("", e, &secrets))?);
                (s.clone(), Some(s), describe_url(&base, &prefix), false)
            }
            Cloud::Azure => {
                use object_store::azure::{AzureConfigKey as K, MicrosoftAzureBuilder};
                let mut b = MicrosoftAzureBuilder::from_env()
                    .with_url(url.split(['?', '#']).next().unwrap_or(url))
                    .with_retry(retry_config())
                    .with_config(K::Client(ClientConfigKey::Timeout), REQUEST_TIMEOUT)
                    .with_config(K::Client(ClientConfigKey::ConnectTimeout), CONNECT_TIMEOUT);
                if let Some(e) = &opts.endpoint_url {
                    b = b.with_endpoint(e.clone());
                    if http_endpoint(Some(e.clone())) {
                        b = b.with_allow_http(true);
                    }
                }
                for (k, v) in &opts.options {
                    b = b.with_config(k.parse().map_err(|_| bad_key(k))?, v.clone());
                }
                let s = Arc::new(b.build().map_err(|e| map_err_with("", e, &secrets))?);
                (s.clone(), Some(s), describe_url(&base, &prefix), false)
            }
            Cloud::Http => {
                let clean =
                    url.split(['?', '#']).next().unwrap_or(url).trim_end_matches('/').to_string();
                let egress = opts.egress.clone().unwrap_or_else(|| {
                    let own = Some(clean.clone());
                    Arc::new(crate::store::egress::Egress { authorized: Vec::new(), own })
                });
                let mut b = object_store::http::HttpBuilder::new()
                    .with_url(clean.clone())
                    .with_http_connector(GuardedConnector(egress.clone()))
                    .with_retry(retry_config())
                    .with_config(ClientConfigKey::Timeout, REQUEST_TIMEOUT)
                    .with_config(ClientConfigKey::ConnectTimeout, CONNECT_TIMEOUT);
                if clean.to_ascii_lowercase().starts_with("http://") {
                    b = b.with_config(ClientConfigKey::AllowHttp, "true");
                }
                for (k, v) in &opts.options {
                    b = b.with_config(k.parse().map_err(|_| bad_key(k))?, v.clone());
                }
                let s = Arc::new(b.build().map_err(|e| map_err_with("", e, &secrets))?);
                // The whole URL is the base; keys are relative to it.
                let desc = strip_userinfo(&clean);
                return Ok(ObjectStoreBackend {
                    store: s,
                    pager: None,
                    prefix: String::new(),
                    description: desc,
                    read_only: true,
                    secrets,
                    hidden: HiddenKeys::default(),
                    update_by_generation: false,
                    shapes: RequestShapes::default(),
                    credentials: None,
                    egress: Some(egress),
                });
            }
        };
        Ok(ObjectStoreBackend {
            store,
            pager,
            prefix,
            description,
            read_only,
            secrets,
            hidden: HiddenKeys::default(),
            update_by_generation: cloud == Cloud::Gcs,
            shapes: RequestShapes::default(),
            credentials,
            egress: None,
        })
    }

    /// The rule this `http(s)://` store's requests obey (None for other clouds).
    pub fn egress(&self) -> Option<Arc<crate::store::egress::Egress>> {
        self.egress.clone()
    }

    fn full_key(&self, key: &str) -> String {
        match (self.prefix.is_empty(), key.is_empty()) {
            (true, _) => key.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{key}", self.prefix),
        }
    }

    fn path(&self, key: &str) -> StoreResult<Path> {
        validate_key(key)?;
        Path::parse(self.full_key(key))
            .map_err(|_| StoreError::InvalidKey(key.to_string(), "not a valid object key"))
    }

    fn err(&self, key: &str, e: object_store::Error) -> StoreError {
        map_err_with(key, e, &self.secrets)
    }

    /// Leave the raw bucket key `key` out of a listing, logging it once. `reason` is `None`
    /// for keys object_store itself refused to parse.
    fn hide(&self, key: &str, reason: Option<&str>) {
        let reason = reason.unwrap_or_else(|| unparseable_reason(key));
        self.hidden.report(&self.description, key, reason);
    }

    /// `list_pages` of `prefix`, from just after the name `after` if given.
    fn level_pages<'a>(&'a self, prefix: &'a str, after: Option<&'a str>) -> ListPages<'a> {
        use futures::stream::{self, StreamExt};
        let Some(pager) = self.pager.clone() else {
            return Box::pin(stream::once(self.list(prefix)));
        };
        if let Err(e) = validate_key(prefix) {
            return Box::pin(stream::once(async { Err(e) }));
        }
        let full = self.full_key(prefix);
        let level = if full.is_empty() { String::new() } else { format!("{full}/") };
        let mut pager = LevelPager::new(pager, level);
        pager.cursor = after.filter(|a| !a.is_empty()).map(|name| format!("{}{name}", pager.level));
        let state = PagedLevel { pager, held: Default::default(), last_dir: None, finished: false };
        stream::unfold(state, move |mut st| async move {
            if st.finished {
                return None;
            }
            let level = st.pager.level.clone();
            let (objects, prefixes) = match st.pager.next(&mut |key| self.hide(key, None)).await {
                Ok(Some(page)) => page,
                Ok(None) | Err(object_store::Error::NotFound { .. }) => (Vec::new(), Vec::new()),
                Err(e) => {
                    st.finished = true;
                    return Some((Err(self.err(prefix, e)), st));
                }
            };
            let mut page = self.level_listing(prefix, &level, &objects, &prefixes);
            page.dirs.sort();
            page.dirs.dedup();
            page.dirs.retain(|d| st.last_dir.as_ref().is_none_or(|last| d > last));
            if let Some(last) = page.dirs.last() {
                st.last_dir = Some(last.clone());
            }
            st.held.extend(page.files.drain(..));
            for d in &page.dirs {
                if st.held.remove(d).is_some() {
                    self.hide(&format!("{level}{d}"), Some(SHADOWED));
                }
            }
            // Files the listing has passed the prefix of (`name/` sorts before the cursor) can
            // no longer be shadowed; at the end, none can.
            if st.pager.done {
                st.finished = true;
                page.files = std::mem::take(&mut st.held).into_iter().collect();
            } else {
                let cursor = st.pager.cursor.clone().unwrap_or_default();
                let keep = st.held.keys().find(|name| format!("{level}{name}/") >= cursor).cloned();
                let rest = match keep {
                    Some(first_kept) => st.held.split_off(&first_kept),
                    None => Default::default(),
                };
                page.files = std::mem::replace(&mut st.held, rest).into_iter().collect();
            }
            Some((Ok(page), st))
        })
        .boxed()
    }

    /// The entries of one listed level (`level`: the full prefix with its '/'), by name,
    /// unsorted; names that cannot be file names are hidden (and logged once).
    fn level_listing(
        &self,
        prefix: &str,
        level: &str,
        objects: &[object_store::ObjectMeta],
        prefixes: &[Path],
    ) -> Listing {
        let full = level.strip_suffix('/').unwrap_or(level);
        let mut listing = Listing::default();
        for d in prefixes {
            // object_store drops the prefix's trailing '/' (and a leading one: the root-level
            // prefix "/" of a key like "/lead" arrives as the empty path).
            let raw = format!("{d}/");
            match raw.strip_prefix(level).and_then(|r| r.strip_suffix('/')) {
                Some(name) if name_problem(name).is_none() => listing.dirs.push(name.to_string()),
                Some(name) => self.hide(&raw, name_problem(name)),
                None => self.hide(&raw, Some("outside the listed directory")),
            }
        }
        for o in objects {
            // Skip the directory marker of this level ("dir/" objects, parsed to "dir").
            if o.location.as_ref() == full {
                continue;
            }
            match o.location.as_ref().strip_prefix(level) {
                Some(name) if name_problem(name).is_none() => {
                    self.shapes.note(&join_key(prefix, name), o.size);
                    listing.files.push((name.to_string(), to_meta(o)))
                }
                Some(name) => self.hide(o.location.as_ref(), name_problem(name)),
                None => self.hide(o.location.as_ref(), Some("outside the listed directory")),
            }
        }
        listing
    }

    fn check_writable(&self) -> StoreResult<()> {
        if self.read_only {
            Err(StoreError::ReadOnly)
        } else {
            Ok(())
        }
    }

    /// `file` (the key's HEAD or GET) and the directory probe of `key`, sent together. A
    /// probe that shows a directory decides at once, `(Ok(None), Ok(true))`: the directory is
    /// what the mount shows (a key that is also a prefix is hidden behind it), so the object
    /// request is not waited for (see `lookup`).
    async fn with_dir_probe<T>(
        &self,
        key: &str,
        file: impl std::future::Future<Output = StoreResult<Option<T>>>,
    ) -> (StoreResult<Option<T>>, StoreResult<bool>) {
        use futures::future::{select, Either};
        let probe = self.probe_dir(key);
        futures::pin_mut!(file, probe);
        match select(file, probe).await {
            Either::Right((Ok(true), _)) => (Ok(None), Ok(true)),
            Either::Right((dir, file)) => (file.await, dir),
            Either::Left((file, probe)) => (file, probe.await),
        }
    }

    /// Is there anything below `key/`? One small LIST where the store can page, else a full level.
    async fn probe_dir(&self, key: &str) -> StoreResult<bool> {
        let dir = if key.is_empty() { self.prefix.clone() } else { self.full_key(key) };
        if let Some(pager) = &self.pager {
            let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
            let opts = PaginatedListOptions {
                delimiter: Some("/".into()),
                max_keys: Some(2),
                ..Default::default()
            };
            let page = match pager
                .list_paginated(if prefix.is_empty() { None } else { Some(prefix.as_str()) }, opts)
                .await
            {
                Ok(page) => page,
                // A key object_store refuses to parse (`dir/../x`, a control character) is
                // still a key below `dir/`: the directory exists (its listing hides that key).
                Err(e) if unparseable_key(&e).is_some() => return Ok(true),
                Err(e) => return Err(self.err(key, e)),
            };
            return Ok(!page.result.objects.is_empty() || !page.result.common_prefixes.is_empty());
        }
        let path = Path::parse(&dir)
            .map_err(|_| StoreError::InvalidKey(key.to_string(), "not a valid object key"))?;
        match self.store.list_with_delimiter(Some(&path)).await {
            Ok(l) => Ok(!l.objects.is_empty() || !l.common_prefixes.is_empty()),
            Err(
                object_store::Error::NotFound { .. } | object_store::Error::NotImplemented { .. },
            ) => Ok(false),
            Err(e) => Err(self.err(key, e)),
        }
    }

    /// An unconditional put of a large object, in parts.
    async fn put_multipart(&self, key: &str, path: &Path, data: Bytes) -> StoreResult<()> {
        let upload = self.store.put_multipart(path).await.map_err(|e| self.err(key, e))?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut off = 0;
        while off < data.len() {
            if let Err(e) = w.wait_for_capacity(4).await {
                return Err(self.err(key, e));
            }
            let end = (off + PART_SIZE).min(data.len());
            w.put(data.slice(off..end));
            off = end;
        }
        w.finish().await.map_err(|e| self.err(key, e))?;
        Ok(())
    }

    /// An unconditional put of a large spilled file, in parts read from it one at a time:
    /// at most a few parts in memory (those being uploaded), whatever the size.
    async fn put_multipart_file(
        &self,
        key: &str,
        path: &Path,
        file: std::sync::Arc<std::fs::File>,
        len: u64,
    ) -> StoreResult<()> {
        let upload = self.store.put_multipart(path).await.map_err(|e| self.err(key, e))?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut off = 0u64;
        while off < len {
            if let Err(e) = w.wait_for_capacity(2).await {
                return Err(self.err(key, e));
            }
            let n = (PART_SIZE as u64).min(len - off);
            let part = match crate::store::read_file_at(key, file.clone(), off, n).await {
                Ok(p) => p,
                Err(e) => {
                    let _ = w.abort().await;
                    return Err(e);
                }
            };
            w.put(part);
            off += n;
        }
        w.finish().await.map_err(|e| self.err(key, e))?;
        Ok(())
    }

    /// One cheap request at mount time, so that a wrong endpoint, wrong credentials or a
    /// missing bucket fail the mount with one line rather than every later operation with
    /// EIO. `Err` holds the reason, one line, without secrets. Plain HTTP has no listing:
    /// there any HTTP answer counts (only an unreachable server fails).
    pub async fn check(&self) -> Result<Reached, String> {
        // No credentials anywhere is said as such, naming where they were looked for.
        if let Some(credentials) = &self.credentials {
            credentials.get().await.map_err(|why| scrub(why, &self.secrets))?;
        }
        let result = match &self.pager {
            Some(pager) => {
                let prefix = if self.prefix.is_empty() { None } else { Some(self.prefix.as_str()) };
                let prefix = prefix.map(|p| format!("{p}/"));
                let opts = PaginatedListOptions {
                    delimiter: Some("/".into()),
                    max_keys: Some(1),
                    ..Default::default()
                };
                pager.list_paginated(prefix.as_deref(), opts).await.map(|page| {
                    let r = &page.result;
                    if r.objects.is_empty() && r.common_prefixes.is_empty() {
                        Reached::Empty
                    } else {
                        Reached::Keys
                    }
                })
            }
            None => self.store.head(&Path::default()).await.map(|_| Reached::Unknown),
        };
        let e = match result {
            Ok(reached) => return Ok(reached),
            Err(e) => e,
        };
        let detail = scrub(error_chain(&e), &self.secrets).replace('\n', " ");
        if self.pager.is_none() {
            // HTTP: a 403, 404 or 405 for the base URL (a directory) is still a server that
            // answers; only one that cannot be reached fails.
            let answered = detail.contains("status code")
                || matches!(
                    e,
                    object_store::Error::NotFound { .. }
                        | object_store::Error::PermissionDenied { .. }
                        | object_store::Error::Unauthenticated { .. }
                );
            return if answered {
                Ok(Reached::Unknown)
            } else {
                Err(format!("cannot reach the server: {detail}"))
            };
        }
        // object_store reports most listing failures as generic errors: the status tells.
        let status = |code: &str| detail.contains(&format!("status code: {code}"));
        match e {
            // A listing that reached a key object_store cannot parse reached the bucket.
            _ if unparseable_key(&e).is_some() => Ok(Reached::Keys),
            object_store::Error::NotFound { .. } => {
                Err(format!("the bucket (or container) does not exist ({detail})"))
            }
            _ if status("404") => {
                Err(format!("the bucket (or container) does not exist ({detail})"))
            }
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => {
                Err(format!("access denied, check the credentials ({detail})"))
            }
            _ if status("401") || status("403") => {
                Err(format!("access denied, check the credentials ({detail})"))
            }
            _ => Err(format!("cannot reach the store: {detail}")),
        }
    }

    async fn head_opt(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        if key.is_empty() {
            return Ok(None);
        }
        let path = self.path(key)?;
        match self.store.head(&path).await {
            Ok(m) => {
                self.shapes.note(key, m.size);
                Ok(Some(to_meta(&m)))
            }
            Err(object_store::Error::NotFound { .. }) => {
                self.shapes.forget(key);
                Ok(None)
            }
            // s3s-fs keeps objects as files, so a key that is (or was: emptied directories
            // stay) a directory on its disk answers HEAD with 500. A listing that answers and
            // does not show the key as an object settles it: there is no such object. Any other
            // outcome keeps the 500, so an outage is still an error and never "absent".
            Err(e) if server_error(&e) => match self.listed_as_object(key).await {
                Ok(false) => {
                    tracing::debug!(key, error = %error_chain(&e), "HEAD failed but the listing has no such object: absent");
                    self.shapes.forget(key);
                    Ok(None)
                }
                _ => Err(self.err(key, e)),
            },
            Err(e) => Err(self.err(key, e)),
        }
    }

    /// Does a listing show `key` itself as an object? One LIST from `key` (no trailing '/')
    /// of one entry: in a listing's byte order the key itself comes before every other key
    /// that starts with it. `Err` where there is no paginated listing (plain HTTP) or it fails.
    async fn listed_as_object(&self, key: &str) -> StoreResult<bool> {
        let Some(pager) = &self.pager else {
            return Err(StoreError::Unsupported("listing"));
        };
        let full = self.full_key(key);
        let opts = PaginatedListOptions {
            delimiter: Some("/".into()),
            max_keys: Some(1),
            ..Default::default()
        };
        let page = pager.list_paginated(Some(&full), opts).await.map_err(|e| self.err(key, e))?;
        Ok(page.result.objects.iter().any(|o| o.location.as_ref() == full))
    }

    /// One GET, answered once its headers are in; `Ok(None)` for a missing object. The size
    /// it reports is remembered.
    async fn send_get(
        &self,
        key: &str,
        path: &Path,
        range: Option<GetRange>,
    ) -> StoreResult<Option<(ObjectMeta, object_store::GetResult)>> {
        let opts = GetOptions { range, ..Default::default() };
        let result = match self.store.get_opts(path, opts).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => {
                self.shapes.forget(key);
                return Ok(None);
            }
            Err(e) => return Err(self.err(key, e)),
        };
        let meta = to_meta(&result.meta);
        self.shapes.note(key, meta.size);
        Ok(Some((meta, result)))
    }

    /// One GET, its body read whole; `Ok(None)` for a missing object.
    async fn get_opts(
        &self,
        key: &str,
        path: &Path,
        range: Option<GetRange>,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let Some((meta, result)) = self.send_get(key, path, range).await? else { return Ok(None) };
        let data = result.bytes().await.map_err(|e| self.err(key, e))?;
        Ok(Some((data, meta)))
    }

    /// The answer to a ranged read that failed with `e`: a 416 for a range that starts at or
    /// past the end (also every range of an empty object) is "no bytes", with the object's
    /// metadata (one HEAD); anything else is `e`.
    async fn past_the_end(
        &self,
        key: &str,
        range: &ByteRange,
        e: StoreError,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        if let (StoreError::Backend { .. }, ByteRange::Range(r)) = (&e, range) {
            if let Some(meta) = self.head_opt(key).await? {
                if r.start >= meta.size {
                    return Ok(Some((Bytes::new(), meta)));
                }
            }
        }
        Err(e)
    }

    /// The last `n` bytes of an object whose size is known (`size`, possibly stale): a
    /// suffix range no longer than the object, or the whole object. Never an over-long
    /// suffix, which some servers refuse.
    async fn get_suffix_sized(
        &self,
        key: &str,
        path: &Path,
        n: u64,
        size: u64,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        if n >= size {
            // The whole object; if it has grown since, keep its last `n` bytes.
            let r = self.get_opts(key, path, None).await?;
            return Ok(r.map(|(data, meta)| (last_bytes(data, n), meta)));
        }
        self.get_opts(key, path, Some(GetRange::Suffix(n))).await
    }

    /// The last `n` bytes with the size from a HEAD first: two requests, every server.
    async fn get_suffix_after_head(
        &self,
        key: &str,
        path: &Path,
        n: u64,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let Some(meta) = self.head_opt(key).await? else { return Ok(None) };
        if meta.size == 0 {
            return Ok(Some((Bytes::new(), meta)));
        }
        if n >= meta.size {
            return self.get_suffix_sized(key, path, n, meta.size).await;
        }
        // A bounded range rather than a suffix: this server may refuse suffixes altogether.
        let range = GetRange::Bounded(meta.size - n..meta.size);
        match self.get_opts(key, path, Some(range)).await? {
            // The object shrank between the HEAD and the GET: read it whole.
            None => Ok(None),
            Some((_, now)) if now.size != meta.size => {
                self.get_suffix_sized(key, path, n, now.size).await
            }
            r => Ok(r),
        }
    }
}

/// The condition under which a GET sends `known`'s object only if it changed: its ETag (a
/// quoted tag, as S3, GCS, Azure and HTTP servers give them), else its modification time
/// (HTTP dates have whole seconds: a change within the second of the last one goes unseen,
/// as for any client of such a server). `None`: nothing to condition on.
fn if_changed(known: &ObjectMeta) -> Option<GetOptions> {
    let v = &known.version;
    if v.starts_with('"') || v.starts_with("W/\"") {
        return Some(GetOptions { if_none_match: Some(v.clone()), ..Default::default() });
    }
    let since = known.modified.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    let date = chrono::DateTime::from_timestamp(i64::try_from(since.as_secs()).ok()?, 0)?;
    (since.as_secs() > 0)
        .then(|| GetOptions { if_modified_since: Some(date), ..Default::default() })
}

/// Why an object that is also a prefix is left out of listings (logged once per key).
const SHADOWED: &str =
    "also a prefix of other keys: the directory is shown, this object is not reachable";

/// Entries per listing page (S3's maximum).
const LIST_PAGE: usize = 1000;

/// The raw key object_store refused to parse in a listing response, if that is what `e` is.
/// object_store turns every listed key into a `Path` and fails the whole page on the first
/// key it cannot parse (`..`, `.` or an empty segment, an ASCII control character).
fn unparseable_key(e: &object_store::Error) -> Option<&str> {
    use object_store::path::Error as P;
    match e {
        object_store::Error::InvalidPath {
            source: P::EmptySegment { path } | P::BadSegment { path, .. },
        } => Some(path),
        _ => None,
    }
}

/// Why object_store refuses a raw key (for the log line).
fn unparseable_reason(key: &str) -> &'static str {
    let trimmed = key.strip_prefix('/').unwrap_or(key);
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    if let Some(problem) = trimmed.split('/').find_map(name_problem) {
        problem
    } else if key.chars().any(|c| c.is_ascii_control()) {
        "control character (the object store client cannot address it)"
    } else {
        "the object store client cannot parse it"
    }
}

/// Where a listing resumes after skipping `raw` (a key, or a common prefix ending in '/').
/// For a prefix, past every key below it: the largest character makes a start-after that
/// only keys made of it could follow (those would show the same prefix again, deduplicated).
fn skip_past(raw: &str) -> String {
    if raw.ends_with('/') {
        format!("{raw}{}", char::MAX)
    } else {
        raw.to_string()
    }
}

/// One level of a delimiter listing, page by page, that survives keys object_store cannot
/// parse. With object_store alone, one such key anywhere in a page fails the whole listing:
/// the directory gives an error and hides all its good neighbours.
///
/// Pages follow the server's continuation tokens. When a page fails on an unparseable key,
/// the listing goes on from the last entry it has (start-after), with pages halved until the
/// page holding only the bad entry, which is passed to `hide` and stepped over; pages then
/// grow back. A bad key costs about 2·log2(1000) extra requests; a clean directory costs
/// exactly what it did before.
struct LevelPager {
    pager: Arc<dyn PaginatedListStore>,
    /// The listed prefix with its trailing '/' ("" for the bucket root).
    level: String,
    token: Option<String>,
    /// The greatest raw key (or `skip_past` of a common prefix) listed so far: the next page
    /// starts after it when there is no token, and nothing listed later sorts before it.
    cursor: Option<String>,
    page: usize,
    done: bool,
}

impl LevelPager {
    fn new(pager: Arc<dyn PaginatedListStore>, level: String) -> Self {
        LevelPager { pager, level, token: None, cursor: None, page: LIST_PAGE, done: false }
    }

    /// The objects and common prefixes of the next page; `None` once the level is done.
    async fn next(
        &mut self,
        hide: &mut impl FnMut(&str),
    ) -> object_store::Result<Option<(Vec<object_store::ObjectMeta>, Vec<Path>)>> {
        while !self.done {
            let opts = PaginatedListOptions {
                delimiter: Some("/".into()),
                max_keys: Some(self.page),
                offset: if self.token.is_none() { self.cursor.clone() } else { None },
                page_token: self.token.take(),
                ..Default::default()
            };
            let prefix = if self.level.is_empty() { None } else { Some(self.level.as_str()) };
            match self.pager.list_paginated(prefix, opts).await {
                Ok(r) => {
                    for o in &r.result.objects {
                        // A directory marker "dir/" comes back as the path "dir".
                        self.cursor = self.cursor.take().max(Some(o.location.to_string()));
                    }
                    for p in &r.result.common_prefixes {
                        self.cursor = self.cursor.take().max(Some(skip_past(&format!("{p}/"))));
                    }
                    self.token = r.page_token;
                    self.done = self.token.is_none();
                    self.page = (self.page * 2).min(LIST_PAGE);
                    return Ok(Some((r.result.objects, r.result.common_prefixes)));
                }
                Err(e) => {
                    let Some(bad) = unparseable_key(&e) else {
                        self.done = true;
                        return Err(e);
                    };
                    if self.page > 1 {
                        self.page /= 2; // the bad entry is in the first `page` entries after the cursor
                        continue;
                    }
                    // A page of one entry failed: that entry is `bad`. Step over it, unless the
                    // server does not honour start-after (no progress), where this must stop.
                    let next = skip_past(bad);
                    if self.cursor.as_deref().is_some_and(|c| c >= next.as_str()) {
                        self.done = true;
                        return Err(e);
                    }
                    hide(bad);
                    self.cursor = Some(next);
                }
            }
        }
        Ok(None)
    }
}

/// What a page of `ObjectStoreBackend::list_pages` still owes: files that a common prefix of
/// the same name in a later page may yet shadow.
struct PagedLevel {
    pager: LevelPager,
    /// Files held back: in the byte order of a listing, `x` comes before `x-y` and `x.z`, and
    /// those before `x/`, so the prefix `x/` (which hides the object `x`, see `list`) may
    /// come pages later. Held until the listing has passed `x/`: a handful at a time.
    held: std::collections::BTreeMap<String, ObjectMeta>,
    /// The last directory handed out (a prefix stepped into past a bad key may come again).
    last_dir: Option<String>,
    finished: bool,
}

fn describe_url(base: &str, prefix: &str) -> String {
    let base = strip_userinfo(base);
    if prefix.is_empty() {
        base
    } else {
        format!("{base}/{prefix}")
    }
}

/// A URL as it may appear in messages: no `user:password@`, no query (SAS tokens live there).
pub fn display_url(url: &str) -> String {
    strip_userinfo(url.split(['?', '#']).next().unwrap_or(url))
}

/// Drop `user:password@` from a URL.
fn strip_userinfo(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let (auth, path) = rest.split_once('/').map(|(a, p)| (a, Some(p))).unwrap_or((rest, None));
        let host = auth.rsplit_once('@').map(|(_, h)| h).unwrap_or(auth);
        match path {
            Some(p) => format!("{scheme}://{host}/{p}"),
            None => format!("{scheme}://{host}"),
        }
    } else {
        url.to_string()
    }
}

fn to_meta(m: &object_store::ObjectMeta) -> ObjectMeta {
    let ms = u64::try_from(m.last_modified.timestamp_millis()).unwrap_or(0);
    let modified = SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
    let version =
        m.e_tag.clone().or_else(|| m.version.clone()).unwrap_or_else(|| untagged(ms, m.size));
    ObjectMeta { size: m.size, modified, version, perms: None }
}

/// The version of an object the store gave neither an ETag nor a version id.
fn untagged(ms: u64, size: u64) -> String {
    format!("{ms}-{size}")
}

/// Is `m`'s version made up from its time and size (see `to_meta`), the store having given no
/// tag (s3s-fs lists objects without ETags)?
pub fn is_untagged(m: &ObjectMeta) -> bool {
    let ms = m.modified.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    u64::try_from(ms).is_ok_and(|ms| m.version == untagged(ms, m.size))
}

fn scrub(mut s: String, secrets: &[String]) -> String {
    for secret in secrets {
        if !secret.is_empty() && s.contains(secret.as_str()) {
            s = s.replace(secret.as_str(), "***");
        }
    }
    s
}

/// Map an object_store error about `key` onto a `StoreError` whose text holds no secret.
fn map_err_with(key: &str, e: object_store::Error, secrets: &[String]) -> StoreError {
    use object_store::Error as E;
    let key = key.to_string();
    match e {
        E::NotFound { .. } => StoreError::NotFound(key),
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => StoreError::PermissionDenied(key),
        E::AlreadyExists { .. } => StoreError::AlreadyExists(key),
        // A conditional put (If-Match) or get found another version: someone else wrote.
        E::Precondition { .. } => StoreError::Conflict(key),
        E::NotSupported { .. } | E::NotImplemented { .. } => {
            StoreError::Unsupported("this operation")
        }
        E::InvalidPath { .. } => StoreError::InvalidKey(key, "not a valid object key"),
        E::UnknownConfigurationKey { key: k, .. } => {
            StoreError::Backend { key, message: format!("unknown configuration key {k:?}") }
        }
        other => {
            let message = scrub(error_chain(&other), secrets);
            let lower = message.to_ascii_lowercase();
            if lower.contains("timed out") {
                StoreError::Timeout(format!("{key}: {message}"))
            } else {
                StoreError::Backend { key, message }
            }
        }
    }
}

impl StoreHints for ObjectStoreBackend {
    /// object_store refuses more than `validate_key` does (control characters, for one).
    fn check_key(&self, key: &str) -> StoreResult<()> {
        self.path(key).map(|_| ())
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn has_real_dirs(&self) -> bool {
        false
    }
}

#[async_trait]
impl ReadStore for ObjectStoreBackend {
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        let path = self.path(key)?;
        let r = self.store.get(&path).await.map_err(|e| self.err(key, e))?;
        crate::metrics::first_byte_now(); // headers in, body not yet read
        r.bytes().await.map_err(|e| self.err(key, e))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        if range.end <= range.start {
            return Ok(Bytes::new());
        }
        match self.get_ranged(key, ByteRange::Range(range)).await? {
            Some((data, _)) => Ok(data),
            None => Err(StoreError::NotFound(key.to_string())),
        }
    }

    /// One GET with a Range header; the response carries the object's size and ETag. A
    /// suffix read never sends a suffix longer than the object when its size is known (the
    /// whole object is asked for instead); when it is not known and the server refuses the
    /// suffix (416, 500, 501), the read is retried once as HEAD + bounded range, and every
    /// later suffix read of an unknown size on this mount starts with the HEAD.
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let path = self.path(key)?;
        let get_range = match &range {
            ByteRange::Range(r) if r.start == 0 && r.end == u64::MAX => None, // the whole object
            ByteRange::Range(r) if r.end <= r.start => {
                return Ok(self.head_opt(key).await?.map(|m| (Bytes::new(), m)));
            }
            ByteRange::Range(r) => Some(GetRange::Bounded(r.clone())),
            ByteRange::Suffix(0) => {
                return Ok(self.head_opt(key).await?.map(|m| (Bytes::new(), m)))
            }
            &ByteRange::Suffix(n) => {
                if let Some(size) = self.shapes.size(key) {
                    return match self.get_suffix_sized(key, &path, n, size).await {
                        // Shrunk since its size was seen: the suffix is over-long again.
                        Err(e) if refuses_suffix(&e) => {
                            self.get_suffix_after_head(key, &path, n).await
                        }
                        r => r,
                    };
                }
                if self.shapes.suffix_refused() {
                    return self.get_suffix_after_head(key, &path, n).await;
                }
                Some(GetRange::Suffix(n))
            }
        };
        match self.get_opts(key, &path, get_range).await {
            Err(e) => {
                if let ByteRange::Suffix(n) = range {
                    if refuses_suffix(&e) {
                        let r = self.get_suffix_after_head(key, &path, n).await?;
                        // (Every server may answer 416 for an empty object: that says nothing.)
                        let refused = r.as_ref().is_some_and(|(_, m)| m.size > 0);
                        if refused && !self.shapes.suffix_needs_size.swap(true, Ordering::Relaxed) {
                            tracing::info!(store = %self.description, error = %e, "the server refused a suffix range: suffix reads of objects of unknown size now start with a HEAD");
                        }
                        return Ok(r);
                    }
                }
                self.past_the_end(key, &range, e).await
            }
            ok => ok,
        }
    }

    /// A range from a known start as one GET whose body is handed on as it arrives. Other
    /// shapes (suffixes have their own answers there) are `get_ranged`'s.
    async fn get_streamed(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(ObjectMeta, crate::store::Body)>> {
        use futures::StreamExt;
        let get_range = match &range {
            ByteRange::Range(r) if r.start == 0 && r.end == u64::MAX => None,
            ByteRange::Range(r) if r.start < r.end => Some(GetRange::Bounded(r.clone())),
            _ => return Ok(crate::store::as_one_piece(self.get_ranged(key, range).await?)),
        };
        let path = self.path(key)?;
        let (meta, result) = match self.send_get(key, &path, get_range).await {
            Ok(Some(got)) => got,
            Ok(None) => return Ok(None),
            Err(e) => {
                return Ok(crate::store::as_one_piece(self.past_the_end(key, &range, e).await?))
            }
        };
        crate::metrics::first_byte_now(); // headers in, body not yet read
        let (key, secrets) = (key.to_string(), self.secrets.clone());
        let body = result
            .into_stream()
            .map(move |piece| piece.map_err(|e| map_err_with(&key, e, &secrets)));
        Ok(Some((meta, Box::pin(body))))
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.head_opt(key).await
    }

    /// One conditional GET of a range from a known start (If-None-Match with the ETag, else
    /// If-Modified-Since): a 304 is `Unchanged`. A server that sends the body of an unchanged
    /// object anyway is answered from its headers, the body left unread, and revalidated with
    /// HEADs from then on. Suffixes (whose place depends on the size now) and servers known to
    /// ignore conditions get a HEAD (and a GET if changed).
    async fn get_if_changed(
        &self,
        key: &str,
        range: ByteRange,
        known: &ObjectMeta,
    ) -> StoreResult<Revalidated> {
        let get_range = match &range {
            ByteRange::Range(r) if r.start == 0 && r.end == u64::MAX => None,
            ByteRange::Range(r) if r.start < r.end => Some(GetRange::Bounded(r.clone())),
            _ => return crate::store::revalidate_by_head(self, key, range, known).await,
        };
        let condition = if_changed(known);
        let Some(condition) = condition.filter(|_| !self.shapes.conditions_ignored()) else {
            return crate::store::revalidate_by_head(self, key, range, known).await;
        };
        let path = self.path(key)?;
        let opts = GetOptions { range: get_range, ..condition };
        let result = match self.store.get_opts(&path, opts).await {
            Ok(r) => r,
            Err(object_store::Error::NotModified { .. }) => return Ok(Revalidated::Unchanged),
            Err(object_store::Error::NotFound { .. }) => {
                self.shapes.forget(key);
                return Ok(Revalidated::Changed(None));
            }
            Err(e) => {
                let e = self.err(key, e);
                return Ok(Revalidated::Changed(self.past_the_end(key, &range, e).await?));
            }
        };
        let meta = to_meta(&result.meta);
        self.shapes.note(key, meta.size);
        if crate::store::same_version(&meta, known) {
            if !self.shapes.conditions_ignored.swap(true, Ordering::Relaxed) {
                tracing::info!(store = %self.description, "the server ignores conditional GETs: cached objects are revalidated with HEADs");
            }
            return Ok(Revalidated::Unchanged);
        }
        crate::metrics::first_byte_now(); // headers in, body not yet read
        let data = result.bytes().await.map_err(|e| self.err(key, e))?;
        Ok(Revalidated::Changed(Some((data, meta))))
    }
}

#[async_trait]
impl ListStore for ObjectStoreBackend {
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        validate_key(prefix)?;
        let full = self.full_key(prefix);
        let level = if full.is_empty() { String::new() } else { format!("{full}/") };
        let (objects, prefixes) = match &self.pager {
            Some(pager) => {
                let mut pages = LevelPager::new(pager.clone(), level.clone());
                let (mut objects, mut prefixes) = (Vec::new(), Vec::new());
                loop {
                    match pages.next(&mut |key| self.hide(key, None)).await {
                        Ok(Some((o, p))) => {
                            objects.extend(o);
                            prefixes.extend(p);
                        }
                        Ok(None) => break,
                        Err(object_store::Error::NotFound { .. }) => return Ok(Listing::default()),
                        Err(e) => return Err(self.err(prefix, e)),
                    }
                }
                (objects, prefixes)
            }
            // No paginated listing (plain HTTP): one key object_store cannot parse fails the
            // whole directory, with a log line from the caller.
            None => {
                let path = if full.is_empty() {
                    None
                } else {
                    Some(Path::parse(&full).map_err(|_| {
                        StoreError::InvalidKey(prefix.to_string(), "not a valid object key")
                    })?)
                };
                match self.store.list_with_delimiter(path.as_ref()).await {
                    Ok(r) => (r.objects, r.common_prefixes),
                    Err(object_store::Error::NotFound { .. }) => return Ok(Listing::default()),
                    Err(e) => return Err(self.err(prefix, e)),
                }
            }
        };
        let mut listing = self.level_listing(prefix, &level, &objects, &prefixes);
        listing.files.sort_by(|a, b| a.0.cmp(&b.0));
        listing.dirs.sort();
        listing.dirs.dedup();
        // A key that is also a prefix (`d/x` beside `d/x/y`) is shown as the directory (see
        // RawNamespace::lookup); say once that its own content is out of reach.
        for (name, _) in &listing.files {
            if listing.dirs.binary_search(name).is_ok() {
                self.hide(&format!("{level}{name}"), Some(SHADOWED));
            }
        }
        Ok(listing)
    }

    /// One page of the backend's listing at a time (where it pages: S3, GCS, Azure). Unlike
    /// `list`, an object shadowed by a prefix of the same name is left out (it is logged
    /// and cannot be read either way), so no name comes twice over the pages.
    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        self.level_pages(prefix, None)
    }

    fn list_pages_after<'a>(&'a self, prefix: &'a str, after: &'a str) -> ListPages<'a> {
        self.level_pages(prefix, Some(after))
    }

    /// HEAD of the key and a one-page LIST of `key/`, concurrently. A listing that shows a
    /// directory decides at once: the directory is what the mount shows (a key that is also a
    /// prefix is hidden behind it), so the HEAD is not waited for. That matters on servers
    /// that answer HEAD of a directory-like key with 500 (s3s-fs), which the client retries
    /// for about a second. A HEAD failure other than 404 is ignored when the listing shows a
    /// directory.
    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        validate_key(key)?;
        if key.is_empty() {
            return Ok(Lookup { file: None, dir: true, dir_perms: None });
        }
        let (head, dir) = self.with_dir_probe(key, self.head_opt(key)).await;
        let (file, dir) = settle_lookup(key, head, dir)?;
        Ok(Lookup { file, dir, dir_perms: None })
    }

    /// One GET of the first `limit` bytes in place of `lookup`'s HEAD and directory probe (see
    /// `ListStore::lookup_reading`: the name is a document's). The probe is a LIST, which stores
    /// answer more slowly than a GET (S3's LIST is several times slower, moto's too): waiting
    /// for it made the open of a Zarr array slower than zarr-python's own S3 store. A GET that
    /// fails (s3s-fs answers 500 for a key that is a directory on its disk) takes `lookup`'s
    /// path, which knows how to settle that.
    async fn lookup_reading(&self, key: &str, limit: u64) -> StoreResult<(Lookup, Option<Bytes>)> {
        validate_key(key)?;
        if key.is_empty() || limit == 0 {
            return Ok((self.lookup(key).await?, None));
        }
        match self.get_ranged(key, ByteRange::Range(0..limit)).await {
            Ok(Some((data, meta))) => {
                Ok((Lookup { file: Some(meta), dir: false, dir_perms: None }, Some(data)))
            }
            Ok(None) => Ok((Lookup { file: None, dir: false, dir_perms: None }, None)),
            Err(_) => Ok((self.lookup(key).await?, None)),
        }
    }
}

#[async_trait]
impl WriteStore for ObjectStoreBackend {
    /// Conditional puts are one PUT with `If-None-Match: *` (create) or `If-Match: <etag>`
    /// (update), whatever the size: the condition of a multipart upload is not carried by
    /// object_store, and a single PUT takes objects up to 5 GiB on S3.
    async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        self.check_writable()?;
        if key.is_empty() {
            return Err(StoreError::IsADirectory(String::new()));
        }
        let path = self.path(key)?;
        self.shapes.forget(key);
        let mode = match mode {
            PutMode::Overwrite if data.len() > MULTIPART_THRESHOLD => {
                return self.put_multipart(key, &path, data).await;
            }
            PutMode::Overwrite => object_store::PutMode::Overwrite,
            PutMode::Create => object_store::PutMode::Create,
            // Our version tag is the ETag the store gave (see `to_meta`). GCS conditions on the
            // object's generation instead: a HEAD finds the generation of the version read (if
            // it is still current), and the PUT is then conditional on that generation.
            PutMode::Update(v) => {
                let version = if self.update_by_generation {
                    match self.store.head(&path).await {
                        Ok(m) if m.e_tag.as_deref() == Some(v.as_str()) => m.version,
                        Ok(_) | Err(object_store::Error::NotFound { .. }) => {
                            return Err(StoreError::Conflict(key.to_string()));
                        }
                        Err(e) => return Err(self.err(key, e)),
                    }
                } else {
                    None
                };
                object_store::PutMode::Update(UpdateVersion { e_tag: Some(v), version })
            }
        };
        let update = matches!(mode, object_store::PutMode::Update(_));
        let opts = PutOptions { mode, ..Default::default() };
        match self.store.put_opts(&path, PutPayload::from_bytes(data), opts).await {
            Ok(_) => Ok(()),
            // If-Match of a key that is gone: S3 and moto answer 404, s3s-fs 412. Either way
            // the version read is no longer there: a conflict, which the writer retries.
            Err(object_store::Error::NotFound { .. }) if update => {
                Err(StoreError::Conflict(key.to_string()))
            }
            Err(e) => Err(self.err(key, e)),
        }
    }

    /// Large unconditional puts stream from the file; the rest (small, or conditional: one
    /// PUT) are read into memory and go through `put_opts`.
    async fn put_file(
        &self,
        key: &str,
        file: std::sync::Arc<std::fs::File>,
        len: u64,
        mode: PutMode,
    ) -> StoreResult<()> {
        if mode == PutMode::Overwrite && len > MULTIPART_THRESHOLD as u64 && !key.is_empty() {
            self.check_writable()?;
            let path = self.path(key)?;
            self.shapes.forget(key);
            return self.put_multipart_file(key, &path, file, len).await;
        }
        let data = crate::store::read_file_at(key, file, 0, len).await?;
        self.put_opts(key, data, mode).await
    }

    /// S3 has no conditional DELETE that every server honours: the version is checked with a
    /// HEAD just before the DELETE. A write by another daemon landing between the two (one
    /// round trip) is deleted with the object; docs/SEMANTICS.md says so.
    async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
        self.check_writable()?;
        let path = self.path(key)?;
        self.shapes.forget(key);
        match self.head_opt(key).await? {
            None => Err(StoreError::NotFound(key.to_string())),
            Some(m) if m.version != version => Err(StoreError::Conflict(key.to_string())),
            Some(_) => self.store.delete(&path).await.map_err(|e| self.err(key, e)),
        }
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.check_writable()?;
        let path = self.path(key)?;
        // S3 answers DELETE of a missing key with success; the trait wants NotFound.
        if self.head_opt(key).await?.is_none() {
            return Err(StoreError::NotFound(key.to_string()));
        }
        self.shapes.forget(key);
        self.store.delete(&path).await.map_err(|e| self.err(key, e))
    }

    /// Copy, then delete the source.
    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.check_writable()?;
        let (pf, pt) = (self.path(from)?, self.path(to)?);
        self.shapes.forget(from);
        self.shapes.forget(to);
        self.store.copy(&pf, &pt).await.map_err(|e| self.err(from, e))?;
        self.store.delete(&pf).await.map_err(|e| self.err(from, e))
    }
}

/// A lookup's answer from its object request and its directory probe (see `lookup`): a failed
/// object request is ignored when the probe shows a directory, a failed probe when the object
/// exists. `(object, is a directory)`.
fn settle_lookup<T>(
    key: &str,
    file: StoreResult<Option<T>>,
    dir: StoreResult<bool>,
) -> StoreResult<(Option<T>, bool)> {
    match (file, dir) {
        (Ok(file), Ok(dir)) => Ok((file, dir)),
        (Err(_), Ok(true)) => Ok((None, true)),
        (Err(e), _) => Err(e),
        (Ok(Some(file)), Err(e)) => {
            tracing::debug!(key, error = %e, "directory probe failed; treating the key as a file");
            Ok((Some(file), false))
        }
        (Ok(None), Err(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::list::PaginatedListResult;
    use object_store::memory::InMemory;

    fn backend(prefix: &str) -> (Arc<InMemory>, ObjectStoreBackend) {
        let mem = Arc::new(InMemory::new());
        let b = ObjectStoreBackend::new(mem.clone(), prefix, "memory://test".into());
        (mem, b)
    }

    #[test]
    fn urls_split_into_bucket_and_prefix() {
        assert_eq!(split_url("s3://b/p/q/"), ("s3://b".into(), "p/q".into()));
        assert_eq!(split_url("s3://b"), ("s3://b".into(), "".into()));
        assert_eq!(split_url("gs://b//x?y"), ("gs://b".into(), "x".into()));
        assert_eq!(strip_userinfo("https://u:pw@h/x"), "https://h/x");
    }

    #[test]
    fn unknown_option_keys_are_rejected() {
        let ok = vec![("aws_virtual_hosted_style_request".to_string(), "true".to_string())];
        assert!(check_options(Cloud::S3, &ok).is_ok());
        let bad = vec![("no_such_key".to_string(), "1".to_string())];
        assert!(check_options(Cloud::S3, &bad).unwrap_err().contains("no_such_key"));
        assert!(check_options(Cloud::Http, &[("timeout".into(), "5s".into())]).is_ok());
    }

    #[test]
    fn secrets_are_scrubbed() {
        let e = object_store::Error::Generic {
            store: "S3",
            source: "bad signature for key SECRETVALUE".into(),
        };
        let msg = map_err_with("k", e, &["SECRETVALUE".into()]).to_string();
        assert!(!msg.contains("SECRETVALUE"), "{msg}");
    }

    #[tokio::test]
    async fn round_trip_below_a_prefix() {
        let (mem, b) = backend("pre/fix");
        b.put("a/zarr.json", Bytes::from_static(b"{}")).await.unwrap();
        b.put("a/c/0", Bytes::from_static(b"0123456789")).await.unwrap();
        b.put("top", Bytes::from_static(b"t")).await.unwrap();
        assert!(mem.head(&Path::from("pre/fix/a/c/0")).await.is_ok());
        let root = b.list("").await.unwrap();
        assert_eq!(root.dirs, vec!["a"]);
        assert_eq!(root.files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), vec!["top"]);
        let a = b.list("a").await.unwrap();
        assert_eq!(a.dirs, vec!["c"]);
        assert_eq!(a.files[0].0, "zarr.json");
        assert_eq!(b.get_range("a/c/0", 2..5).await.unwrap(), Bytes::from_static(b"234"));
        let (d, m) = b.get_ranged("a/c/0", ByteRange::Suffix(3)).await.unwrap().unwrap();
        assert_eq!((d.as_ref(), m.size), (&b"789"[..], 10));
        let (d, m) = b.get_ranged("a/c/0", ByteRange::Range(20..30)).await.unwrap().unwrap();
        assert_eq!((d.len(), m.size), (0, 10));
        assert!(b.get_ranged("a/c/9", ByteRange::Suffix(3)).await.unwrap().is_none());
        let l = b.lookup("a").await.unwrap();
        assert!(l.dir && l.file.is_none());
        let l = b.lookup("a/zarr.json").await.unwrap();
        assert!(!l.dir && l.file.is_some());
        assert!(b.lookup("nope").await.unwrap().file.is_none());
        b.rename("top", "a/moved").await.unwrap();
        assert!(b.head("top").await.unwrap().is_none());
        assert_eq!(b.get("a/moved").await.unwrap(), Bytes::from_static(b"t"));
        assert!(matches!(b.delete("top").await, Err(StoreError::NotFound(_))));
        b.delete("a/moved").await.unwrap();
        assert!(!b.has_real_dirs());
    }

    /// An S3-like delimiter listing over raw keys: sorted, start-after and continuation
    /// tokens as S3 has them, and every entry parsed into a `Path` the way object_store's S3
    /// client does (the first unparseable key fails the whole page).
    struct FakeS3 {
        keys: std::collections::BTreeSet<String>,
        requests: std::sync::atomic::AtomicUsize,
        /// A server that ignores start-after (the listing must stop, not loop).
        ignores_offset: bool,
        /// Every listing fails as a server that is down does.
        down: std::sync::atomic::AtomicBool,
    }

    impl FakeS3 {
        fn new(keys: &[String]) -> Self {
            FakeS3 {
                keys: keys.iter().cloned().collect(),
                requests: Default::default(),
                ignores_offset: false,
                down: Default::default(),
            }
        }

        fn page(
            &self,
            level: &str,
            opts: &PaginatedListOptions,
        ) -> object_store::Result<PaginatedListResult> {
            self.requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if self.down.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(object_store::Error::Generic {
                    store: "FakeS3",
                    source: "error sending request: connection refused".into(),
                });
            }
            let offset = if self.ignores_offset { None } else { opts.offset.as_deref() };
            let token = opts.page_token.as_deref();
            let mut entries: Vec<(String, bool)> = Vec::new();
            for k in &self.keys {
                let Some(rest) = k.strip_prefix(level) else { continue };
                if offset.is_some_and(|o| k.as_str() <= o) {
                    continue;
                }
                // A token is the last entry returned: continue past every key it covers.
                if token.is_some_and(|t| k.as_str() <= t || (t.ends_with('/') && k.starts_with(t)))
                {
                    continue;
                }
                let entry = match rest.find('/') {
                    Some(i) => (format!("{level}{}", &rest[..=i]), true),
                    None => (k.clone(), false),
                };
                if entries.last() != Some(&entry) {
                    entries.push(entry);
                }
            }
            let max = opts.max_keys.unwrap_or(1000);
            let page_token = (entries.len() > max).then(|| entries[max - 1].0.clone());
            entries.truncate(max);
            let common_prefixes = entries
                .iter()
                .filter(|e| e.1)
                .map(|e| Path::parse(&e.0))
                .collect::<Result<Vec<_>, _>>()?;
            let objects = entries
                .iter()
                .filter(|e| !e.1)
                .map(|e| {
                    Ok(object_store::ObjectMeta {
                        location: Path::parse(&e.0)?,
                        last_modified: Default::default(),
                        size: 1,
                        e_tag: Some(format!("\"{}\"", e.0.len())),
                        version: None,
                    })
                })
                .collect::<object_store::Result<Vec<_>>>()?;
            Ok(PaginatedListResult {
                result: object_store::ListResult {
                    common_prefixes,
                    objects,
                    extensions: Default::default(),
                },
                page_token,
            })
        }
    }

    #[async_trait]
    impl PaginatedListStore for FakeS3 {
        async fn list_paginated(
            &self,
            prefix: Option<&str>,
            opts: PaginatedListOptions,
        ) -> object_store::Result<PaginatedListResult> {
            self.page(prefix.unwrap_or(""), &opts)
        }
    }

    fn over_fake(fake: Arc<FakeS3>, prefix: &str) -> ObjectStoreBackend {
        let mut b = ObjectStoreBackend::new(Arc::new(InMemory::new()), prefix, "fake://bkt".into());
        b.pager = Some(fake);
        b
    }

    fn names(l: &Listing) -> (Vec<&str>, Vec<&str>) {
        (
            l.files.iter().map(|f| f.0.as_str()).collect(),
            l.dirs.iter().map(String::as_str).collect(),
        )
    }

    #[tokio::test]
    async fn hostile_keys_are_hidden_and_their_neighbours_listed() {
        let long = "L".repeat(300);
        let mut keys: Vec<String> = [
            "d/ok",
            "d/../escape",
            "d/./dot",
            "d//double",
            "d/trailing/",
            "/lead",
            "d/ctl\u{1}x",
            "d/tab\tx",
            "d/del\u{7f}x",
            "d/back\\slash",
            "d/pct%2Fenc",
            "d/sp ace é 日本",
            "d/x",
            "d/x/y",
            "d/..",
            "d/.",
            "e/../../../etc/passwd",
            "top",
        ]
        .iter()
        .map(|k| k.to_string())
        .collect();
        keys.push(format!("d/{long}"));
        keys.push(format!("d/{long}/inner"));
        // Enough good neighbours for several pages, on both sides of every bad key.
        keys.extend((0..2500).map(|i| format!("d/g{i:04}")));
        let fake = Arc::new(FakeS3::new(&keys));
        let b = over_fake(fake.clone(), "");

        let d = b.list("d").await.unwrap();
        let (files, dirs) = names(&d);
        let mut want_files = vec!["back\\slash", "ok", "pct%2Fenc", "sp ace é 日本", "x"];
        let good: Vec<String> = (0..2500).map(|i| format!("g{i:04}")).collect();
        want_files.extend(good.iter().map(String::as_str));
        want_files.sort();
        assert_eq!(files, want_files);
        assert_eq!(dirs, vec!["trailing", "x"]);
        let requests = fake.requests.load(std::sync::atomic::Ordering::Relaxed);
        assert!(requests < 3 + 10 * 20, "{requests} requests");
        for hidden in [
            "d/../",
            "d/./",
            "d//",
            "d/ctl\u{1}x",
            "d/tab\tx",
            "d/del\u{7f}x",
            "d/..",
            "d/.",
            "d/x",
        ] {
            assert!(b.hidden.was_reported(hidden), "{hidden:?} not reported");
        }
        assert!(b.hidden.was_reported(&format!("d/{long}")));
        assert!(b.hidden.was_reported(&format!("d/{long}/")));

        let root = b.list("").await.unwrap();
        assert_eq!(names(&root), (vec!["top"], vec!["d", "e"]));
        assert!(b.hidden.was_reported("/"));
        // `e` holds only a hostile key: it exists, and lists empty.
        assert!(b.lookup("e").await.unwrap().dir);
        assert_eq!(names(&b.list("e").await.unwrap()), (vec![], vec![]));
        // The directory marker `d/trailing/` makes an empty directory, not a file.
        assert_eq!(names(&b.list("d/trailing").await.unwrap()), (vec![], vec![]));
        assert_eq!(names(&b.list("d/x").await.unwrap()), (vec!["y"], vec![]));

        // Below a mount prefix, the same.
        let b = over_fake(fake.clone(), "d");
        assert_eq!(names(&b.list("").await.unwrap()).1, vec!["trailing", "x"]);
    }

    /// Every page of `list_pages`, and the requests made before the first page came.
    async fn pages_of(
        b: &ObjectStoreBackend,
        fake: &FakeS3,
        prefix: &str,
    ) -> (Vec<Listing>, usize) {
        use futures::StreamExt;
        let before = fake.requests.load(std::sync::atomic::Ordering::Relaxed);
        let mut pages = b.list_pages(prefix);
        let first = pages.next().await.expect("a first page").unwrap();
        let to_first = fake.requests.load(std::sync::atomic::Ordering::Relaxed) - before;
        let mut all = vec![first];
        while let Some(page) = pages.next().await {
            all.push(page.unwrap());
        }
        (all, to_first)
    }

    #[tokio::test]
    async fn paged_listings_give_each_name_once_and_hide_an_object_shadowed_pages_later() {
        // Page 1 ends with the object `d/x`; its prefix `d/x/` comes in page 2, after `x-y`
        // and `x.z` (which sort before '/').
        let mut keys: Vec<String> = (0..999).map(|i| format!("d/a{i:03}")).collect();
        keys.extend(["d/x", "d/x-y", "d/x.z", "d/x/y", "d/x/z"].map(String::from));
        keys.extend((0..1500).map(|i| format!("d/z{i:04}")));
        // A key object_store cannot parse, in a later page: stepped over there.
        keys.push("d/zz\u{1}x".to_string());
        let fake = Arc::new(FakeS3::new(&keys));
        let b = over_fake(fake.clone(), "");
        let (pages, to_first) = pages_of(&b, &fake, "d").await;
        assert_eq!(to_first, 1, "the first page is one request");
        assert_eq!(pages[0].files.len(), 999, "`x` is held back until its prefix is passed");
        assert!(pages.len() >= 3, "{} pages", pages.len());
        let mut files: Vec<&str> =
            pages.iter().flat_map(|p| p.files.iter().map(|f| f.0.as_str())).collect();
        let dirs: Vec<&str> =
            pages.iter().flat_map(|p| p.dirs.iter().map(String::as_str)).collect();
        assert_eq!(dirs, vec!["x"]);
        assert!(b.hidden.was_reported("d/x"), "the shadowed object is logged");
        files.sort();
        let mut want = b.list("d").await.unwrap();
        want.files.retain(|f| f.0 != "x");
        assert_eq!(files, names(&want).0, "the pages hold what `list` does, once each");
        for p in &pages {
            assert!(p.files.windows(2).all(|w| w[0].0 < w[1].0), "each page sorted");
        }
        // An empty or missing directory is one empty page.
        let (pages, _) = pages_of(&b, &fake, "nothing").await;
        assert_eq!(pages.len(), 1);
        assert!(pages[0].files.is_empty() && pages[0].dirs.is_empty());
    }

    #[tokio::test]
    async fn clean_listings_cost_one_request_per_page() {
        let keys: Vec<String> = (0..2500).map(|i| format!("a/k{i:04}")).collect();
        let fake = Arc::new(FakeS3::new(&keys));
        let b = over_fake(fake.clone(), "");
        assert_eq!(b.list("a").await.unwrap().files.len(), 2500);
        assert_eq!(fake.requests.load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn runs_of_bad_keys_and_a_server_without_start_after() {
        // Nothing but bad keys, and bad keys on page boundaries.
        let mut keys: Vec<String> = (0..300).map(|i| format!("b/p{i:04}\u{1}/x")).collect();
        keys.extend((0..300).map(|i| format!("b/d{i:04}/x")));
        keys.extend((0..1200).map(|i| format!("b/k{i:04}")));
        keys.extend((0..300).map(|i| format!("b/z{i:04}\u{1}")));
        let fake = Arc::new(FakeS3::new(&keys));
        let b = over_fake(fake.clone(), "");
        let l = b.list("b").await.unwrap();
        assert_eq!((l.files.len(), l.dirs.len()), (1200, 300));
        assert!(b.hidden.was_reported("b/p0000\u{1}/"));
        let requests = fake.requests.load(std::sync::atomic::Ordering::Relaxed);
        assert!(requests < 600 * 4, "{requests} requests for 600 bad keys");
        assert!(b.hidden.was_reported("b/z0299\u{1}"));

        // A server that ignores start-after: an error for that directory, never a loop.
        let mut fake = FakeS3::new(&["c/ok".to_string(), "c/../x".to_string()]);
        fake.ignores_offset = true;
        let b = over_fake(Arc::new(fake), "");
        assert!(matches!(b.list("c").await, Err(StoreError::InvalidKey(..))));
    }

    #[test]
    fn reasons_for_unparseable_keys() {
        assert_eq!(unparseable_reason("d/../"), "'.' or '..' as a name");
        assert!(unparseable_reason("d//").starts_with("empty name"));
        assert!(unparseable_reason("/").starts_with("empty name"));
        assert!(unparseable_reason("d/a\u{1}b").starts_with("control character"));
        assert_eq!(skip_past("d/x"), "d/x");
        assert_eq!(skip_past("d/x/"), format!("d/x/{}", char::MAX));
    }

    /// An object store over memory that refuses suffix ranges as some servers do, and
    /// records every GET and HEAD it answers.
    #[derive(Debug)]
    struct Picky {
        inner: InMemory,
        /// `bytes=-N` with N > size: 500 (s3s-fs).
        refuse_long_suffix: bool,
        /// Any suffix range: not supported (object_store's Azure client).
        refuse_any_suffix: bool,
        /// HEAD answers after this long (a server retried on 500s).
        head_delay: Duration,
        /// Every HEAD answers 500 (s3s-fs, for a key that is a directory on its disk).
        head_500: bool,
        requests: Mutex<Vec<String>>,
    }

    impl Picky {
        fn new(refuse_long_suffix: bool, refuse_any_suffix: bool) -> Self {
            Picky {
                inner: InMemory::new(),
                refuse_long_suffix,
                refuse_any_suffix,
                head_delay: Duration::ZERO,
                head_500: false,
                requests: Default::default(),
            }
        }
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.requests.lock().unwrap())
        }
    }

    impl std::fmt::Display for Picky {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Picky")
        }
    }

    #[async_trait]
    impl ObjectStore for Picky {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            opts: object_store::PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            self.inner.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &Path,
            options: GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            let what = match (&options.range, options.head) {
                (_, true) => "HEAD".to_string(),
                (None, false) => "GET".to_string(),
                (Some(GetRange::Bounded(r)), false) => format!("GET {r:?}"),
                (Some(GetRange::Suffix(n)), false) => format!("GET -{n}"),
                (Some(GetRange::Offset(o)), false) => format!("GET {o}-"),
            };
            self.requests.lock().unwrap().push(what);
            if options.head {
                tokio::time::sleep(self.head_delay).await;
                if self.head_500 {
                    return Err(object_store::Error::Generic {
                        store: "Picky",
                        source: "Error performing HEAD in 1ms, after 3 retries - Server returned \
                                 non-2xx status code: 500 Internal Server Error: "
                            .into(),
                    });
                }
            }
            if let Some(GetRange::Suffix(n)) = options.range {
                if self.refuse_any_suffix {
                    return Err(object_store::Error::NotSupported {
                        source: "no suffix ranges here".into(),
                    });
                }
                let size = self.inner.head(location).await?.size;
                if self.refuse_long_suffix && n > size {
                    return Err(object_store::Error::Generic {
                        store: "Picky",
                        source: "Error performing GET in 1ms - Server returned non-2xx status \
                                 code: 500 Internal Server Error: seek: Invalid argument"
                            .into(),
                    });
                }
            }
            self.inner.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
            self.inner.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<object_store::ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    fn picky(long: bool, any: bool) -> (Arc<Picky>, ObjectStoreBackend) {
        let p = Arc::new(Picky::new(long, any));
        let b = ObjectStoreBackend::new(p.clone(), "", "picky://b".into());
        (p, b)
    }

    async fn suffix(b: &ObjectStoreBackend, key: &str, n: u64) -> Option<(Vec<u8>, u64)> {
        b.get_ranged(key, ByteRange::Suffix(n)).await.unwrap().map(|(d, m)| (d.to_vec(), m.size))
    }

    #[tokio::test]
    async fn known_sizes_never_send_an_over_long_suffix() {
        let (p, b) = picky(true, false);
        b.put("s", Bytes::from_static(b"0123456789")).await.unwrap();
        b.list("").await.unwrap(); // the listing tells the size
        p.take();
        assert_eq!(suffix(&b, "s", 64).await, Some((b"0123456789".to_vec(), 10)));
        assert_eq!(suffix(&b, "s", 10).await, Some((b"0123456789".to_vec(), 10)));
        assert_eq!(suffix(&b, "s", 4).await, Some((b"6789".to_vec(), 10)));
        assert_eq!(p.take(), vec!["GET", "GET", "GET -4"]);
        assert!(!b.shapes.suffix_refused());

        // A stale size never gives wrong bytes: grown (whole GET, last n kept) ...
        b.put("g", Bytes::from_static(b"ab")).await.unwrap();
        b.head("g").await.unwrap();
        p.inner.put(&Path::from("g"), PutPayload::from_static(b"abcdefgh")).await.unwrap();
        assert_eq!(suffix(&b, "g", 5).await, Some((b"defgh".to_vec(), 8)));
        // ... or shrunk below the suffix (refused, then HEAD + whole GET).
        p.inner.put(&Path::from("g"), PutPayload::from_static(b"xyz")).await.unwrap();
        p.take();
        assert_eq!(suffix(&b, "g", 5).await, Some((b"xyz".to_vec(), 3)));
        assert_eq!(p.take(), vec!["GET -5", "HEAD", "GET"]);
        // Deleted behind the mount's back: missing, not an error.
        p.inner.delete(&Path::from("g")).await.unwrap();
        assert_eq!(suffix(&b, "g", 5).await, None);
    }

    #[tokio::test]
    async fn a_refused_suffix_falls_back_once_and_the_mount_remembers() {
        let (p, b) = picky(true, false);
        for k in ["a", "b", "c"] {
            p.inner.put(&Path::from(k), PutPayload::from_static(b"0123456789")).await.unwrap();
        }
        p.inner.put(&Path::from("empty"), PutPayload::from_static(b"")).await.unwrap();
        // Unknown size, a suffix this server accepts: one request.
        assert_eq!(suffix(&b, "a", 3).await, Some((b"789".to_vec(), 10)));
        assert_eq!(p.take(), vec!["GET -3"]);
        assert!(!b.shapes.suffix_refused());
        // Unknown size, over-long: refused, then HEAD + whole GET; remembered.
        assert_eq!(suffix(&b, "b", 100).await, Some((b"0123456789".to_vec(), 10)));
        assert_eq!(p.take(), vec!["GET -100", "HEAD", "GET"]);
        assert!(b.shapes.suffix_refused());
        // From now on a suffix of unknown size starts with the HEAD: no refused request.
        assert_eq!(suffix(&b, "c", 4).await, Some((b"6789".to_vec(), 10)));
        assert_eq!(p.take(), vec!["HEAD", "GET 6..10"]);
        assert_eq!(suffix(&b, "missing", 4).await, None);
        assert_eq!(p.take(), vec!["HEAD"]);
        assert_eq!(suffix(&b, "empty", 4).await, Some((vec![], 0)));
    }

    #[tokio::test]
    async fn a_server_without_suffix_ranges_gets_bounded_ones() {
        let (p, b) = picky(false, true);
        p.inner.put(&Path::from("k"), PutPayload::from_static(b"0123456789")).await.unwrap();
        p.inner.put(&Path::from("j"), PutPayload::from_static(b"abcdef")).await.unwrap();
        assert_eq!(suffix(&b, "k", 4).await, Some((b"6789".to_vec(), 10)));
        assert_eq!(p.take(), vec!["GET -4", "HEAD", "GET 6..10"]);
        assert_eq!(suffix(&b, "j", 2).await, Some((b"ef".to_vec(), 6)));
        assert_eq!(p.take(), vec!["HEAD", "GET 4..6"]);
        // Known sizes: bounded is not needed for a suffix covering the object.
        assert_eq!(suffix(&b, "j", 6).await, Some((b"abcdef".to_vec(), 6)));
        assert_eq!(p.take(), vec!["GET"]);
    }

    /// On the paused clock the HEAD's 5 s latency passes only when nothing else can run: a
    /// lookup that waited for it has seen the clock move by 5 s, one that did not has not.
    #[tokio::test(start_paused = true)]
    async fn a_directory_lookup_does_not_wait_for_a_slow_head() {
        let mut p = Picky::new(false, false);
        p.head_delay = Duration::from_secs(5);
        let p = Arc::new(p);
        p.inner.put(&Path::from("d/x"), PutPayload::from_static(b"x")).await.unwrap();
        let mut b = ObjectStoreBackend::new(p.clone(), "", "picky://b".into());
        b.pager = Some(Arc::new(FakeS3::new(&["d/x".to_string()])));
        let started = tokio::time::Instant::now();
        let l = b.lookup("d").await.unwrap();
        assert!(l.dir && l.file.is_none());
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        // A file still waits for its HEAD (it has to: the HEAD is what finds it).
        let l = b.lookup("d/x").await.unwrap();
        assert!(!l.dir && l.file.is_some_and(|m| m.size == 1));
        assert!(started.elapsed() >= Duration::from_secs(5));
    }

    /// s3s-fs answers HEAD of a key that is (or was) a directory on its disk with 500. Where
    /// a listing answers and has no such object, every path sees "absent"; where the listing
    /// shows the object, or fails too (an outage), the 500 stays an error.
    #[tokio::test]
    async fn a_500_on_head_means_absent_only_when_a_listing_says_so() {
        let mut p = Picky::new(false, false);
        p.head_500 = true;
        let p = Arc::new(p);
        let keys = ["d/x", "d/y-1", "d/y/z"].map(String::from);
        for k in &keys {
            p.inner.put(&Path::from(k.as_str()), PutPayload::from_static(b"x")).await.unwrap();
        }
        let fake = Arc::new(FakeS3::new(&keys));
        let mut b = ObjectStoreBackend::new(p.clone(), "", "picky://b".into());
        b.pager = Some(fake.clone());
        // "d/gone": nothing. "d/y": no object, but a directory and a sibling "d/y-1" listed
        // after it from the same prefix.
        for key in ["d/gone", "d/y"] {
            assert!(b.head(key).await.unwrap().is_none(), "{key}");
            assert!(matches!(b.delete(key).await, Err(StoreError::NotFound(_))), "{key}");
            assert!(matches!(b.delete_if_version(key, "v").await, Err(StoreError::NotFound(_))));
        }
        let l = b.lookup("d/gone").await.unwrap();
        assert!(!l.dir && l.file.is_none());
        let l = b.lookup("d/y").await.unwrap();
        assert!(l.dir && l.file.is_none());
        // The listing shows "d/x" as an object: its HEAD failure is an error, not "absent".
        assert!(matches!(b.head("d/x").await, Err(StoreError::Backend { .. })));
        assert!(b.lookup("d/x").await.is_err());
        // The listing fails too: an outage is an error everywhere.
        fake.down.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(matches!(b.head("d/gone").await, Err(StoreError::Backend { .. })));
        assert!(b.lookup("d/gone").await.is_err());
        assert!(b.delete("d/gone").await.is_err());
    }

    #[tokio::test]
    async fn other_failures_are_not_taken_for_a_refused_suffix() {
        // A server that is down: the error comes back, no fallback, nothing remembered.
        let e = StoreError::Backend {
            key: "k".into(),
            message: "Error performing GET http://127.0.0.1:9/b/k in 3s - error sending \
                      request: Connection refused"
                .into(),
        };
        assert!(!refuses_suffix(&e));
        assert!(!refuses_suffix(&StoreError::NotFound("k".into())));
        assert!(!refuses_suffix(&StoreError::PermissionDenied("k".into())));
        let e503 = StoreError::Backend {
            key: "k".into(),
            message: "Server returned non-2xx status code: 503 Service Unavailable".into(),
        };
        assert!(!refuses_suffix(&e503));
        for code in
            ["416 Range Not Satisfiable", "500 Internal Server Error", "501 Not Implemented"]
        {
            let e = StoreError::Backend {
                key: "k".into(),
                message: format!("Server returned non-2xx status code: {code}: x"),
            };
            assert!(refuses_suffix(&e), "{code}");
        }
        assert!(refuses_suffix(&StoreError::Unsupported("this operation")));
    }

    #[tokio::test]
    async fn large_puts_use_multipart_and_read_back() {
        let (_mem, b) = backend("");
        let data: Vec<u8> = (0..(MULTIPART_THRESHOLD + 12345)).map(|i| (i % 251) as u8).collect();
        b.put("big", Bytes::from(data.clone())).await.unwrap();
        assert_eq!(b.get("big").await.unwrap().len(), data.len());
        assert_eq!(
            b.get_range("big", 8_000_000..8_000_010).await.unwrap().as_ref(),
            &data[8_000_000..8_000_010]
        );
    }
}
