//! Object stores (S3, GCS, Azure Blob, plain HTTP) as a `Store`, through the `object_store` crate.
//!
//! A mount of `s3://bucket/prefix` keeps `prefix` here and prepends it to every key. Directories
//! are key prefixes only (`has_real_dirs() == false`). Every request has bounded retries and
//! timeouts, so a dead endpoint turns into an error within seconds rather than a hung mount.
//! Error text and `describe()` never contain credentials: secret values that went into the
//! builder are scrubbed from every message that leaves this module.
//!
//! One file per concern: `open.rs` (building from a URL and options), `read.rs`, `listing.rs`,
//! `write.rs`, `check.rs` (the mount-time check), `errors.rs` (URLs shown and errors scrubbed).

mod check;
mod errors;
mod listing;
mod open;
mod read;
#[cfg(test)]
mod tests;
mod write;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use object_store::list::PaginatedListStore;
use object_store::path::Path;
use object_store::ObjectStore;

use crate::store::StoreHints;
use crate::store::{validate_key, HiddenKeys, ObjectMeta, StoreError, StoreResult};

use errors::map_err_with;
use listing::unparseable_reason;
use open::AwsCredentials;
use read::RequestShapes;

pub use check::Reached;
pub use errors::display_url;
pub use open::{check_options, is_option_key, RemoteOptions};
pub use write::MULTIPART_THRESHOLD;

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

    /// The rule this `http(s)://` store's requests obey (None for other clouds).
    pub fn egress(&self) -> Option<Arc<crate::store::egress::Egress>> {
        self.egress.clone()
    }

    pub(super) fn full_key(&self, key: &str) -> String {
        match (self.prefix.is_empty(), key.is_empty()) {
            (true, _) => key.to_string(),
            (false, true) => self.prefix.clone(),
            (false, false) => format!("{}/{key}", self.prefix),
        }
    }

    pub(super) fn path(&self, key: &str) -> StoreResult<Path> {
        validate_key(key)?;
        Path::parse(self.full_key(key))
            .map_err(|_| StoreError::InvalidKey(key.to_string(), "not a valid object key"))
    }

    pub(super) fn err(&self, key: &str, e: object_store::Error) -> StoreError {
        map_err_with(key, e, &self.secrets)
    }

    /// Leave the raw bucket key `key` out of a listing, logging it once. `reason` is `None`
    /// for keys object_store itself refused to parse.
    pub(super) fn hide(&self, key: &str, reason: Option<&str>) {
        let reason = reason.unwrap_or_else(|| unparseable_reason(key));
        self.hidden.report(&self.description, key, reason);
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
