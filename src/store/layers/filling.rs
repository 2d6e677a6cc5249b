//! An object being fetched whole into the memory cache, readable while it arrives.
//!
//! The memory cache fetches small objects (shards, chunks, documents) whole with one GET. A
//! read of their first megabyte used to wait for the last byte of the answer; a `Filling`
//! lets it be answered as soon as its own bytes are in (the kernel's 1 MiB READs of a shard
//! then go back to the reader while the rest is still on the wire), and holds every byte in
//! one buffer that becomes the cached copy, uncopied, once complete.
//!
//! Whoever runs the fetch writes (`arriving`, then `fill`); readers wait (`read`). A reader
//! of bytes not yet in never gets fewer than it asked for: it waits, or gets
//! `Read::Elsewhere` and reads the way it would have without this (a fetch abandoned half
//! way, or not covering the range).

use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;

use crate::locks::lock;
use crate::store::{Body, ByteRange, ObjectMeta, StoreError, StoreResult};

/// A buffer is first given at most this much room; a larger object grows it as it arrives
/// (its size comes from the server, and an object read whole may be large).
const FIRST_ROOM: u64 = 64 << 20;

/// The bytes in so far. A body that comes as one piece (a layer that reads whole, such as the
/// disk cache) is kept as it came, never copied; more pieces go into one buffer.
#[derive(Default)]
enum Received {
    #[default]
    Nothing,
    One(Bytes),
    Many(BytesMut),
}

impl Received {
    /// Add `piece`; `len` is how many bytes the body should bring (the buffer's room).
    fn push(&mut self, piece: Bytes, len: u64) {
        match self {
            Received::Nothing => *self = Received::One(piece),
            Received::One(first) => {
                let room = len.max((first.len() + piece.len()) as u64).min(FIRST_ROOM);
                let mut buf = BytesMut::with_capacity(room as usize);
                buf.extend_from_slice(first);
                buf.extend_from_slice(&piece);
                *self = Received::Many(buf);
            }
            Received::Many(buf) => buf.extend_from_slice(&piece),
        }
    }

    fn len(&self) -> usize {
        match self {
            Received::Nothing => 0,
            Received::One(b) => b.len(),
            Received::Many(b) => b.len(),
        }
    }

    /// Bytes `r` (in): a slice of a piece kept whole, or a copy out of the buffer still
    /// being written.
    fn slice(&self, r: std::ops::Range<u64>) -> Bytes {
        let r = r.start as usize..r.end as usize;
        match self {
            Received::Nothing => Bytes::new(),
            Received::One(b) => b.slice(r),
            Received::Many(b) => Bytes::copy_from_slice(&b[r]),
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Received::Nothing => Bytes::new(),
            Received::One(b) => b,
            Received::Many(b) => b.freeze(),
        }
    }
}

enum State {
    /// The request is out; nothing known yet.
    Asking,
    /// Headers in: the object's metadata, the bytes this fetch brings (its size, or the
    /// fetch's limit if less), and those in so far.
    Arriving {
        meta: ObjectMeta,
        len: u64,
        got: Received,
    },
    /// Every byte in.
    Done {
        meta: ObjectMeta,
        data: Bytes,
    },
    Absent,
    Failed(StoreError),
    /// The fetch was dropped before its end (its caller went away); another may take over.
    Abandoned,
}

/// What a read of a filling object gets.
pub enum Read {
    /// The bytes asked for (clipped to the object's end), and the object's metadata.
    Got(Bytes, ObjectMeta),
    Absent,
    /// This fetch will not bring them (abandoned, or it stops short of them): read some
    /// other way.
    Elsewhere,
}

/// What a reader can learn of the fetch without waiting for its bytes.
pub enum Headers {
    Found(ObjectMeta),
    Absent,
    Failed(StoreError),
    /// Abandoned: read some other way.
    Gone,
}

pub struct Filling {
    state: Mutex<State>,
    /// Bumped at every change of `state`; readers wait on it.
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Filling {
    fn default() -> Self {
        Filling { state: Mutex::new(State::Asking), changed: tokio::sync::watch::channel(0).0 }
    }
}

impl Filling {
    fn set(&self, f: impl FnOnce(&mut State)) {
        f(&mut lock(&self.state));
        self.changed.send_modify(|n| *n += 1);
    }

    /// Whether the outcome is known (complete, absent or failed): nothing more will arrive.
    pub fn settled(&self) -> bool {
        matches!(*lock(&self.state), State::Done { .. } | State::Absent | State::Failed(_))
    }

    /// The fetch's outcome, for a fetch this filling did not see (it joined one under way).
    pub fn settle(&self, outcome: &StoreResult<Option<(Bytes, ObjectMeta)>>) {
        // Not over a settled outcome, nor over another run still filling it.
        self.set(|s| {
            if matches!(s, State::Asking | State::Abandoned) {
                *s = match outcome {
                    Ok(Some((data, meta))) => {
                        State::Done { meta: meta.clone(), data: data.clone() }
                    }
                    Ok(None) => State::Absent,
                    Err(e) => State::Failed(e.clone()),
                }
            }
        });
    }

    /// The answer's headers are in: `len` bytes follow (they replace anything an abandoned
    /// run of the fetch left).
    /// False (and nothing changed) if another run holds this filling: the caller then fills
    /// one of its own, so that two bodies never go into one buffer.
    pub fn arriving(&self, meta: &ObjectMeta, len: u64) -> bool {
        let mut claimed = false;
        self.set(|s| {
            if matches!(s, State::Asking | State::Abandoned) {
                *s = State::Arriving { meta: meta.clone(), len, got: Received::Nothing };
                claimed = true;
            }
        });
        claimed
    }

    /// The fetch was dropped while its request was out: its readers read some other way.
    pub fn abandon_if_asking(&self) {
        self.set(|s| {
            if matches!(s, State::Asking) {
                *s = State::Abandoned
            }
        });
    }

    /// Read `body` (of `key`) in, then hold it as complete; its bytes, or the error that
    /// ended it (also a body that ended short). If this is dropped half way, readers are told
    /// to read some other way.
    pub async fn fill(&self, key: &str, mut body: Body) -> StoreResult<Bytes> {
        struct Abandon<'a>(Option<&'a Filling>);
        impl Drop for Abandon<'_> {
            fn drop(&mut self) {
                if let Some(f) = self.0 {
                    f.set(|s| *s = State::Abandoned);
                }
            }
        }
        let mut guard = Abandon(Some(self));
        while let Some(piece) = body.next().await {
            match piece {
                Ok(piece) => self.set(|s| {
                    if let State::Arriving { got, len, .. } = s {
                        got.push(piece, *len);
                    }
                }),
                Err(e) => {
                    guard.0 = None;
                    self.set(|s| *s = State::Failed(e.clone()));
                    return Err(e);
                }
            }
        }
        guard.0 = None;
        let mut data = Bytes::new();
        let mut short = None;
        self.set(|s| {
            if let State::Arriving { meta, got, len } = s {
                if (got.len() as u64) < *len {
                    // A body that ended without an error but short (a connection closed
                    // early): the object's bytes are not all here, and a reader must not take
                    // the end of what came for the end of the object.
                    let e = StoreError::Io {
                        key: key.to_string(),
                        source: std::io::Error::other(format!(
                            "the answer's body ended after {} of {} bytes",
                            got.len(),
                            len
                        )),
                    };
                    short = Some(e.clone());
                    *s = State::Failed(e);
                    return;
                }
                data = std::mem::take(got).into_bytes();
                *s = State::Done { meta: meta.clone(), data: data.clone() };
            }
        });
        match short {
            Some(e) => Err(e),
            None => Ok(data),
        }
    }

    /// Wait until `answer` makes something of the state (it is asked again at every change).
    async fn wait_for<T>(&self, mut answer: impl FnMut(&State) -> Option<T>) -> T {
        let mut changed = self.changed.subscribe();
        loop {
            if let Some(t) = answer(&lock(&self.state)) {
                return t;
            }
            // The sender lives as long as `self`: this only returns on a change.
            let _ = changed.changed().await;
        }
    }

    /// Wait until the headers are in.
    pub async fn headers(&self) -> Headers {
        self.wait_for(|s| match s {
            State::Asking => None,
            State::Arriving { meta, .. } | State::Done { meta, .. } => {
                Some(Headers::Found(meta.clone()))
            }
            State::Absent => Some(Headers::Absent),
            State::Failed(e) => Some(Headers::Failed(e.clone())),
            State::Abandoned => Some(Headers::Gone),
        })
        .await
    }

    /// Bytes `range` of the object as soon as they are in.
    pub async fn read(&self, range: &ByteRange) -> StoreResult<Read> {
        self.wait_for(|s| match s {
            State::Asking => None,
            State::Arriving { meta, len, got } => {
                let want = range.clip(meta.size);
                if want.end > *len {
                    Some(Ok(Read::Elsewhere))
                } else if got.len() as u64 >= want.end {
                    Some(Ok(Read::Got(got.slice(want.start..want.end), meta.clone())))
                } else {
                    None
                }
            }
            State::Done { meta, data } => {
                let want = range.clip(meta.size);
                if want.end > data.len() as u64 {
                    return Some(Ok(Read::Elsewhere));
                }
                let part = data.slice(want.start as usize..want.end as usize);
                Some(Ok(Read::Got(part, meta.clone())))
            }
            State::Failed(e) => Some(Err(e.clone())),
            State::Absent => Some(Ok(Read::Absent)),
            State::Abandoned => Some(Ok(Read::Elsewhere)),
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(size: u64) -> ObjectMeta {
        ObjectMeta {
            size,
            modified: std::time::SystemTime::UNIX_EPOCH,
            version: "v".into(),
            perms: None,
        }
    }

    /// A body that ends without an error but before the bytes its headers announced is a
    /// failed fetch: neither its caller nor a reader of the filling gets it as the object.
    #[tokio::test]
    async fn a_body_that_ends_short_is_a_failure() {
        let f = Filling::default();
        assert!(f.arriving(&meta(10), 10));
        let body: Body = Box::pin(futures::stream::iter([Ok(Bytes::from_static(b"01234"))]));
        assert!(f.fill("k", body).await.is_err(), "5 of 10 bytes taken for the object");
        assert!(f.read(&ByteRange::Range(0..u64::MAX)).await.is_err());
        // A whole body is the object.
        let f = Filling::default();
        assert!(f.arriving(&meta(10), 10));
        let pieces = [Ok(Bytes::from_static(b"01234")), Ok(Bytes::from_static(b"56789"))];
        let body: Body = Box::pin(futures::stream::iter(pieces));
        assert_eq!(f.fill("k", body).await.unwrap().as_ref(), b"0123456789");
    }
}
