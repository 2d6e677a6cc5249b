//! URLs as shown to users (no userinfo) and object_store's errors as `StoreError`s, with every
//! secret that went into the builder scrubbed from their text.

use crate::store::{error_chain, StoreError};

pub(super) fn describe_url(base: &str, prefix: &str) -> String {
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
pub(super) fn strip_userinfo(url: &str) -> String {
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

pub(super) fn scrub(mut s: String, secrets: &[String]) -> String {
    for secret in secrets {
        if !secret.is_empty() && s.contains(secret.as_str()) {
            s = s.replace(secret.as_str(), "***");
        }
    }
    s
}

/// Map an object_store error about `key` onto a `StoreError` whose text holds no secret.
pub(super) fn map_err_with(key: &str, e: object_store::Error, secrets: &[String]) -> StoreError {
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
