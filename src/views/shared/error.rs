//! The filesystem's error type and the one place where errors become errno values.
//! docs/SEMANTICS.md "Errors" lists the same table for users.

use crate::store::StoreError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotADirectory,
    #[error("is a directory")]
    IsADirectory,
    #[error("directory not empty")]
    NotEmpty,
    #[error("read-only: {0}")]
    ReadOnly(&'static str),
    #[error("not permitted: {0}")]
    NotPermitted(&'static str),
    #[error("not supported: {0}")]
    NotSupported(&'static str),
    #[error("invalid name: {0}")]
    InvalidName(&'static str),
    /// A name longer than a directory entry can hold (255 bytes).
    #[error("file name too long")]
    NameTooLong,
    #[error("bad file handle")]
    BadHandle,
    /// The file was replaced (with other content of another size) after it was opened.
    #[error("the file changed since it was opened")]
    Stale,
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// A write that would need more memory or space than the mount allows (EFBIG).
    #[error("too large: {0}")]
    TooLarge(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// One outcome shared by several requests (e.g. chunk writes batched into one shard rewrite).
    #[error("{0}")]
    Shared(std::sync::Arc<FsError>),
}

pub type FsResult<T> = Result<T, FsError>;

impl FsError {
    /// The errno a caller of the mount sees.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotADirectory => libc::ENOTDIR,
            FsError::IsADirectory => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::ReadOnly(_) => libc::EROFS,
            FsError::NotPermitted(_) => libc::EPERM,
            FsError::NotSupported(_) => libc::ENOTSUP,
            FsError::InvalidName(_) => libc::EINVAL,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::BadHandle => libc::EBADF,
            FsError::Stale => libc::ESTALE,
            FsError::Corrupt(_) => libc::EIO,
            FsError::TooLarge(_) => libc::EFBIG,
            FsError::Shared(e) => e.errno(),
            FsError::Store(e) => match e {
                StoreError::NotFound(_) => libc::ENOENT,
                StoreError::PermissionDenied(_) => libc::EACCES,
                StoreError::DirectoryNotEmpty(_) => libc::ENOTEMPTY,
                StoreError::NotADirectory(_) => libc::ENOTDIR,
                StoreError::IsADirectory(_) => libc::EISDIR,
                StoreError::AlreadyExists(_) => libc::EEXIST,
                // Other writers kept changing the object through every retry.
                StoreError::Conflict(_) => libc::EBUSY,
                StoreError::InvalidKey(..) => libc::EINVAL,
                StoreError::Unsupported(_) => libc::ENOTSUP,
                StoreError::NoSpace => libc::ENOSPC,
                StoreError::ReadOnly => libc::EROFS,
                StoreError::Timeout(_) => libc::ETIMEDOUT,
                StoreError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
                StoreError::Backend { .. } => libc::EIO,
            },
        }
    }

    /// Errors worth a log line (the rest are ordinary answers such as ENOENT).
    pub fn is_notable(&self) -> bool {
        matches!(self, FsError::Corrupt(_) | FsError::TooLarge(_))
            || matches!(self, FsError::Shared(e) if e.is_notable())
            || matches!(self, FsError::Store(e) if !matches!(e,
                StoreError::NotFound(_) | StoreError::AlreadyExists(_) | StoreError::DirectoryNotEmpty(_)
                | StoreError::NotADirectory(_) | StoreError::IsADirectory(_)))
    }
}
