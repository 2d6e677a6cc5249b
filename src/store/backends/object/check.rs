//! The mount-time check: one request that tells a missing bucket, refused credentials and an
//! unreachable endpoint apart, before the mount is made.

use object_store::list::PaginatedListOptions;
use object_store::path::Path;
use object_store::ObjectStoreExt;

use crate::store::error_chain;

use super::errors::scrub;
use super::listing::unparseable_key;
use super::ObjectStoreBackend;

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
}
