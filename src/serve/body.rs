//! Response bodies: small ones whole, files streamed piece by piece from their open handle
//! (never a whole shard or file held for one response), each piece read under a permit of the
//! server's bound on concurrent backend work. A file of one piece or less is read before the
//! headers go out (`read_small`): one read, one write, and a failed read still gets its status.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::Frame;
use tokio::sync::Semaphore;

use super::walk::OpenFile;
use crate::fs::{FsError, FsResult};
use crate::store::StoreError;

pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

/// The largest read of one piece: the largest READ a mount negotiates, so the filesystem
/// is asked exactly what a reader through the mount would ask.
pub const PIECE: u64 = 1 << 20;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}

pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// `range` (at most one `PIECE`) of `file`, read now under one permit: a chunk file is one
/// read. A file that ends before its size is an error, as in a streamed body.
pub async fn read_small(
    file: &OpenFile,
    range: Range<u64>,
    backend: &Semaphore,
    url: &str,
) -> FsResult<Bytes> {
    debug_assert!(range.end - range.start <= PIECE);
    let _permit = backend.acquire().await.map_err(|_| FsError::NotSupported("shutting down"))?;
    let want = (range.end - range.start) as usize;
    let first = file.read(range.start, want as u32).await?;
    if first.len() >= want {
        return Ok(first.slice(..want));
    }
    // A short read: the rest, piece after piece (rare: a read answers what it is asked).
    let mut all = bytes::BytesMut::from(&first[..]);
    while all.len() < want {
        let got = file.read(range.start + all.len() as u64, (want - all.len()) as u32).await?;
        if got.is_empty() {
            let source = std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the file ended before its size",
            );
            return Err(FsError::Store(StoreError::Io { key: url.to_string(), source }));
        }
        let take = got.len().min(want - all.len());
        all.extend_from_slice(&got[..take]);
    }
    Ok(all.freeze())
}

/// `range` of `file`, read as the client takes it. A read that fails after the headers went
/// out ends the body with an error: hyper then cuts the connection, and the client sees a body
/// shorter than its `Content-Length`, never wrong bytes.
pub fn file(file: OpenFile, range: Range<u64>, backend: Arc<Semaphore>, url: String) -> Body {
    let end = range.end;
    // The handle is dropped (closed) as soon as the body ends or fails.
    let pieces = futures::stream::unfold((Some(file), range.start), move |(file, pos)| {
        let (backend, url) = (backend.clone(), url.clone());
        async move {
            let file = file.filter(|_| pos < end)?;
            let size = (end - pos).min(PIECE) as u32;
            let read = match backend.acquire().await {
                Ok(_permit) => file.read(pos, size).await,
                Err(_) => return None, // the server is shutting down
            };
            let failed = |why: String| {
                tracing::warn!(url, offset = pos, error = %why, "read failed mid-response");
                Some((Err(std::io::Error::other(why)), (None, end)))
            };
            match read {
                Ok(data) if data.is_empty() => failed("the file ended before its size".into()),
                Ok(data) => {
                    let next = (pos + data.len() as u64).min(end);
                    let data = data.slice(..(next - pos) as usize);
                    Some((Ok(Frame::data(data)), (Some(file), next)))
                }
                Err(e) => failed(e.to_string()),
            }
        }
    });
    StreamBody::new(pieces).boxed_unsync()
}
