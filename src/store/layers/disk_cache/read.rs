//! The read path: blocks from disk, the missing runs fetched (widened to whole blocks) and kept,
//! revalidation first when the known version is past the TTL.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::super::write_watch::ReadStart;
use super::freshness::Answer;
use super::index::BlockId;
use super::writer::{blocks_written, Fetched};
use super::DiskCacheStore;
use crate::store::{ByteRange, ObjectMeta, StoreError, StoreResult};

/// How many times a read overlapped by writes of its key is asked (see `get_clear_of_writes`).
pub(super) const ASKS_PAST_WRITES: u32 = 3;

impl DiskCacheStore {
    /// Bytes `want` of an object whose metadata is `meta` (fresh): blocks from disk, the
    /// missing runs from the store (concurrently), the new blocks kept. `None`: the object
    /// changed under us, or a write of it overlapped the fetch (`start`: the read's start),
    /// so its bytes may not be of `meta`; the caller falls back to a plain read.
    pub(super) async fn read_blocks(
        self: &Arc<Self>,
        key: &str,
        meta: &ObjectMeta,
        want: Range<u64>,
        start: &ReadStart,
    ) -> StoreResult<Option<Bytes>> {
        let bs = self.cfg.block_size;
        let first = want.start / bs;
        let last = (want.end - 1) / bs;
        let object = self.object_id(key, meta);
        if self.state().copies.contains_key(&object) {
            let this = self.clone();
            let (obj, size, w) = (object.clone(), meta.size, want.clone());
            let data = off_runtime(key, move || this.load_from_copy(&obj, size, w)).await?;
            if let Some(data) = data {
                self.stats.hit(1, data.len() as u64);
                return Ok(Some(data));
            }
            // It failed its check and is dropped: blocks, or the store, below.
        }
        let (any_on_disk, all_on_disk) = {
            let st = self.state();
            let on_disk = |index| st.blocks.contains(&BlockId { object: object.clone(), index });
            ((first..=last).any(on_disk), (first..=last).all(on_disk))
        };
        // A warm read: every block on disk, read into one buffer.
        if all_on_disk {
            let this = self.clone();
            let (k, m, obj) = (key.to_string(), meta.clone(), object.clone());
            let span =
                off_runtime(key, move || this.load_span(&k, &m, &obj, first..last + 1)).await?;
            if let Some(span) = span {
                self.stats.hit(last - first + 1, want.end - want.start);
                let from = (want.start - first * bs) as usize;
                return Ok(Some(
                    Bytes::from(span).slice(from..from + (want.end - want.start) as usize),
                ));
            }
            // A block failed its check and is dropped: fetched again below.
        }
        // A cold read (no block on disk) goes straight to the store, without a blocking hop.
        let loaded: Vec<Option<Bytes>> = if any_on_disk {
            let this = self.clone();
            let (k, m, obj) = (key.to_string(), meta.clone(), object.clone());
            off_runtime(key, move || {
                (first..=last)
                    .map(|index| this.load_block(&k, &m, &BlockId { object: obj.clone(), index }))
                    .collect()
            })
            .await?
        } else {
            vec![None; (last - first + 1) as usize]
        };
        // Runs of missing blocks, each fetched with one ranged GET.
        let mut runs: Vec<Range<u64>> = Vec::new();
        for (i, b) in loaded.iter().enumerate() {
            let index = first + i as u64;
            if let Some(b) = b {
                self.stats.hit(1, b.len() as u64);
                continue;
            }
            self.stats.miss();
            match runs.last_mut() {
                Some(r) if r.end == index => r.end = index + 1,
                _ => runs.push(index..index + 1),
            }
        }
        let fetches = runs.iter().map(|r| {
            let range = r.start * bs..(r.end * bs).min(meta.size);
            async move { (range.start, self.inner.get_ranged(key, ByteRange::Range(range)).await) }
        });
        let mut fetched: HashMap<u64, Bytes> = HashMap::new();
        let mut writes = Vec::new();
        for (at, r) in futures::future::join_all(fetches).await {
            let r = r?;
            let overlapped = self.writes.overlapped(start);
            match r {
                Some((data, m))
                    if !overlapped && m.version == meta.version && m.size == meta.size =>
                {
                    let f = Fetched { start: at, data };
                    writes.extend(self.store_blocks(key, meta, &f));
                    fetched.insert(at, f.data);
                }
                other => {
                    self.observe(key, other.as_ref().map(|(_, m)| m), Answer::READ_MISMATCH, start);
                    return Ok(None);
                }
            }
        }
        // Assemble `want` from the blocks and fetched runs, in order.
        let mut pieces: Vec<Bytes> = Vec::new();
        let mut index = first;
        while index <= last {
            let b0 = index * bs;
            let (piece_start, piece, next) = match &loaded[(index - first) as usize] {
                Some(block) => (b0, block.clone(), index + 1),
                None => {
                    let run = runs.iter().find(|r| r.start == index).expect("a run starts here");
                    (b0, fetched[&b0].clone(), run.end)
                }
            };
            let from = want.start.max(piece_start) - piece_start;
            let to = (want.end.min(piece_start + piece.len() as u64) - piece_start).max(from);
            pieces.push(piece.slice(from as usize..to as usize));
            index = next;
        }
        drop(fetched);
        blocks_written(writes).await;
        Ok(Some(if pieces.len() == 1 {
            pieces.pop().expect("one piece")
        } else {
            let mut out = BytesMut::with_capacity((want.end - want.start) as usize);
            for p in pieces {
                out.extend_from_slice(&p);
            }
            out.freeze()
        }))
    }

    pub(super) async fn read(
        self: &Arc<Self>,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        let (fetch, asked) = widened(&range, self.cfg.block_size);
        let start = self.writes.read_starts(key);
        if self.stale_on_disk(key, &range).is_some() {
            self.confirm_directory(key, true).await;
        }
        let mut meta = self.fresh_meta(key);
        // What the store answered a revalidation of a changed (or deleted) object with.
        let mut answered = None;
        if let Some(known) = self.stale_on_disk(key, &range) {
            match self.revalidate(key, &fetch, known).await? {
                Ok(known) => meta = Some(known),
                Err(now) => answered = Some(now),
            }
        }
        if self.writes.overlapped(&start) {
            // What was known or revalidated may predate a write through this layer.
            (meta, answered) = (None, None);
        }
        if let Some(meta) = meta {
            let want = range.clip(meta.size);
            if want.is_empty() {
                return Ok(Some((Bytes::new(), meta)));
            }
            // Nothing on disk: the plain GET below, which takes the version it finds (a
            // listing's version may lack the tag that a GET's has, see `one_version`).
            if self.holds_any(key, &meta, &range) {
                if let Some(data) = self.read_blocks(key, &meta, want, &start).await? {
                    return Ok(Some((data, meta)));
                }
            }
        }
        // Unknown version (or a new one): one GET, widened to whole blocks so that what comes
        // back is kept.
        let (r, asked_at) = match answered {
            Some(r) => (r, start),
            None => self.get_clear_of_writes(key, &fetch).await?,
        };
        let keep = self.observe(key, r.as_ref().map(|(_, m)| m), Answer::READ, &asked_at);
        let Some((data, meta)) = r else {
            tracing::debug!(key, keep, "disk cache: the store says the object is absent");
            return Ok(None);
        };
        let start = match &fetch {
            ByteRange::Range(r) => r.start.min(meta.size),
            ByteRange::Suffix(_) => meta.size - data.len() as u64,
        };
        let written = keep
            .then(|| self.store_blocks(key, &meta, &Fetched { start, data: data.clone() }))
            .flatten();
        let data = match asked {
            Some(r) => {
                let a = r.start.min(meta.size).max(start) - start;
                let b = (r.end.min(meta.size).max(start) - start).min(data.len() as u64).max(a);
                data.slice(a as usize..b as usize)
            }
            None => data,
        };
        blocks_written(written).await;
        Ok(Some((data, meta)))
    }

    /// A GET of `fetch`, asked again once the writes of `key` through this layer that it
    /// overlapped are done (`ASKS_PAST_WRITES` times at most): its answer may predate them or,
    /// on s3s-fs, pair one version's bytes with the other's tag (see write_watch.rs). Also
    /// when the answer was asked for, for `observe` to tell whether it may be kept.
    pub(super) async fn get_clear_of_writes(
        &self,
        key: &str,
        fetch: &ByteRange,
    ) -> StoreResult<(Option<(Bytes, ObjectMeta)>, ReadStart)> {
        let mut asks = 0;
        loop {
            asks += 1;
            let start = self.writes.read_starts(key);
            let r = self.inner.get_ranged(key, fetch.clone()).await?;
            if !self.writes.overlapped(&start) || asks == ASKS_PAST_WRITES {
                return Ok((r, start));
            }
            self.writes.writes_done(&start).await;
        }
    }
}

/// The GET for a read of `range`: widened to whole blocks, so that what comes back is kept,
/// and the part asked for (`None`: all of it).
pub(super) fn widened(range: &ByteRange, bs: u64) -> (ByteRange, Option<Range<u64>>) {
    match range {
        ByteRange::Range(r) if r.end > r.start => {
            let end = if r.end == u64::MAX { u64::MAX } else { r.end.div_ceil(bs) * bs };
            (ByteRange::Range(r.start / bs * bs..end), Some(r.clone()))
        }
        other => (other.clone(), None),
    }
}

/// `load` (file reads of `key`'s blocks or copy) run on the blocking pool, off the async
/// runtime.
async fn off_runtime<T: Send + 'static>(
    key: &str,
    load: impl FnOnce() -> T + Send + 'static,
) -> StoreResult<T> {
    tokio::task::spawn_blocking(load)
        .await
        .map_err(|e| StoreError::Backend { key: key.to_string(), message: e.to_string() })
}
