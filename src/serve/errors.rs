//! Filesystem errors -> HTTP statuses. Zarr readers fill a chunk answered 404 with the fill
//! value, so 404 means exactly "no such key" and every other failure (a backend down, slow or
//! refusing, a corrupt shard, a refused virtual target) is a 5xx: the reader errors instead of
//! reading zeros.

use hyper::StatusCode;

use crate::fs::FsError;
use crate::store::StoreError;

/// The status a failed lookup, listing or read answers with.
pub fn status_of(e: &FsError) -> StatusCode {
    match e {
        // No such name, or a name no key can have.
        FsError::NotFound
        | FsError::NotADirectory
        | FsError::InvalidName(_)
        | FsError::NameTooLong
        | FsError::Store(StoreError::NotFound(_) | StoreError::NotADirectory(_))
        | FsError::Store(StoreError::InvalidKey(..)) => StatusCode::NOT_FOUND,
        // The file changed while it was being opened: asking again gets the new version.
        FsError::Stale => StatusCode::SERVICE_UNAVAILABLE,
        FsError::Store(StoreError::Timeout(_)) => StatusCode::GATEWAY_TIMEOUT,
        // The backend failed or refused us (credentials, a refused virtual target).
        FsError::Store(StoreError::Backend { .. } | StoreError::PermissionDenied(_)) => {
            StatusCode::BAD_GATEWAY
        }
        FsError::Shared(inner) => status_of(inner),
        // A corrupt shard or chunk, a local I/O error, anything else: ours to report.
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// Whether a status is a failure worth a log line of its own (the access log has the rest).
pub fn is_failure(status: StatusCode) -> bool {
    status.is_server_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_missing_key_is_404() {
        let io = |kind| {
            FsError::Store(StoreError::Io { key: "k".into(), source: std::io::Error::from(kind) })
        };
        let not_found = [
            FsError::NotFound,
            FsError::NotADirectory,
            FsError::NameTooLong,
            FsError::Store(StoreError::NotFound("k".into())),
            FsError::Shared(std::sync::Arc::new(FsError::NotFound)),
        ];
        for e in not_found {
            assert_eq!(status_of(&e), StatusCode::NOT_FOUND, "{e:?}");
        }
        let failures = [
            (FsError::Corrupt("bad shard index".into()), StatusCode::INTERNAL_SERVER_ERROR),
            (FsError::Store(StoreError::Timeout("get".into())), StatusCode::GATEWAY_TIMEOUT),
            (
                FsError::Store(StoreError::Backend {
                    key: "k".into(),
                    message: "connection refused".into(),
                }),
                StatusCode::BAD_GATEWAY,
            ),
            (FsError::Store(StoreError::PermissionDenied("k".into())), StatusCode::BAD_GATEWAY),
            (FsError::Stale, StatusCode::SERVICE_UNAVAILABLE),
            (io(std::io::ErrorKind::Other), StatusCode::INTERNAL_SERVER_ERROR),
            (
                FsError::Shared(std::sync::Arc::new(FsError::Store(StoreError::Timeout(
                    "t".into(),
                )))),
                StatusCode::GATEWAY_TIMEOUT,
            ),
        ];
        for (e, want) in failures {
            assert_eq!(status_of(&e), want, "{e:?}");
            assert!(is_failure(status_of(&e)));
        }
    }
}
