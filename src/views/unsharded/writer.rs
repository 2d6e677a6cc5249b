//! Writes of inner chunks into shards: read the shard, splice, write a whole new shard (fresh
//! index, same layout, crc32c recomputed) with one atomic `put`, or delete the shard once no
//! chunk is left. Writers of one shard are serialized; chunk writes that queue up while a
//! rewrite is running are applied together in the next one (group commit), so N concurrent
//! writers of one shard cost far fewer than N rewrites and none of them is lost.
//!
//! Across daemons (or any other writer of the same store) a rewrite is compare-and-swap: the
//! shard is read with its version, spliced, and written only if it is still at that version
//! (`PutMode::Update`; `PutMode::Create` for a shard that did not exist). If another writer got
//! there first, the shard is read and spliced again, after a short randomized wait, up to
//! `CAS_ATTEMPTS` times; so no writer's chunks are lost, whichever daemon they went through.
//! A shard left without chunks is deleted only if still at the version read
//! (`delete_if_version`: exact on local directories and in memory; on object stores a HEAD check
//! just before the DELETE, see docs/SEMANTICS.md "What is not guaranteed").

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::store::{split_key, PutMode, Store, StoreError};
use crate::views::shared::error::{FsError, FsResult};
use crate::zarr::sharding::build::{build_shard, check_new_shard};
use crate::zarr::sharding::index::ShardIndex;
use crate::zarr::sharding::ShardLayout;

/// Read-splice-write rounds of one rewrite before it gives up (EBUSY to the writer).
const CAS_ATTEMPTS: u32 = 12;
/// The first wait after a conflict; it doubles each time, up to `CAS_MAX_BACKOFF`.
const CAS_FIRST_BACKOFF: Duration = Duration::from_millis(5);
const CAS_MAX_BACKOFF: Duration = Duration::from_millis(500);

/// The wait before retry `attempt` (1-based): exponential, with a random factor in [0.5, 1.5)
/// so that writers that collided once do not collide again in step.
fn backoff(attempt: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let base = CAS_FIRST_BACKOFF.saturating_mul(1 << attempt.min(16)).min(CAS_MAX_BACKOFF);
    // RandomState is seeded randomly per instance: enough randomness for jitter.
    let r = std::collections::hash_map::RandomState::new().build_hasher().finish();
    base.mul_f64(0.5 + (r % 1000) as f64 / 1000.0)
}

/// One change to one inner chunk: new encoded bytes, or `None` to make it absent.
#[derive(Clone)]
pub struct ChunkOp {
    pub local: u64,
    pub data: Option<Bytes>,
    /// Only if the chunk is absent from the shard as stored (an `O_EXCL` create, a `link`):
    /// otherwise this op alone fails with `Exists` and the others of its batch go ahead.
    pub exclusive: bool,
}

impl ChunkOp {
    pub fn new(local: u64, data: Option<Bytes>) -> Self {
        ChunkOp { local, data, exclusive: false }
    }
}

type Outcome = Result<(), Arc<FsError>>;

/// Which local entries of the shard are inside the array; chunks stored past the array's edge
/// (some writers keep them) are not part of the array and are dropped on rewrite.
pub type InGrid = Arc<dyn Fn(u64) -> bool + Send + Sync>;

#[derive(Default)]
struct Queue {
    pending: Mutex<Vec<(ChunkOp, oneshot::Sender<Outcome>)>>,
    running: tokio::sync::Mutex<()>,
}

pub struct ShardWriter {
    store: Arc<dyn Store>,
    queues: Mutex<HashMap<String, Arc<Queue>>>,
    /// Per shard: this daemon's rewrites (write side, around the PUT or DELETE) against its
    /// reads of byte ranges (read side, see `gate`). Entries live while someone holds them.
    gates: Mutex<HashMap<String, std::sync::Weak<ShardGate>>>,
}

/// Readers of a shard's byte ranges against this daemon's rewrites of that shard.
pub type ShardGate = tokio::sync::RwLock<()>;

impl ShardWriter {
    pub fn new(store: Arc<dyn Store>) -> Self {
        ShardWriter { store, queues: Mutex::new(HashMap::new()), gates: Mutex::default() }
    }

    /// The gate of `shard_key`. A range read of a shard checks that the version it got is the
    /// one its index describes, but some S3 servers (s3s-fs 0.14: it opens the data file, then
    /// reads the ETag from a separate file) answer a GET that overlaps a PUT with the new bytes
    /// and the old ETag, which passes that check with the wrong bytes. So range reads hold the
    /// read side while they fetch, and this daemon's rewrites hold the write side while they
    /// store: a reader never overlaps a rewrite from the same daemon. (Other daemons writing
    /// to such a server remain a hazard: docs/SEMANTICS.md "What is not guaranteed".)
    pub fn gate(&self, shard_key: &str) -> Arc<ShardGate> {
        let mut gates = crate::locks::lock(&self.gates);
        if let Some(gate) = gates.get(shard_key).and_then(std::sync::Weak::upgrade) {
            return gate;
        }
        if gates.len() >= 1024 {
            gates.retain(|_, g| g.strong_count() > 0); // bounded by the gates in use
        }
        let gate = Arc::new(ShardGate::default());
        gates.insert(shard_key.to_string(), Arc::downgrade(&gate));
        gate
    }

    /// Apply `op` to the shard at `shard_key`; returns once the shard in the store has it.
    /// `stop_dir` bounds the pruning of directories that a deleted shard leaves empty.
    pub async fn apply(
        &self,
        shard_key: &str,
        layout: &ShardLayout,
        in_grid: InGrid,
        op: ChunkOp,
        stop_dir: &str,
    ) -> FsResult<()> {
        let queue =
            crate::locks::lock(&self.queues).entry(shard_key.to_string()).or_default().clone();
        let (tx, mut rx) = oneshot::channel();
        crate::locks::lock(&queue.pending).push((op, tx));
        let running = queue.running.lock().await;
        if let Ok(outcome) = rx.try_recv() {
            return outcome.map_err(FsError::Shared); // an earlier rewrite already carried it
        }
        let batch = std::mem::take(&mut *crate::locks::lock(&queue.pending));
        let (ops, senders): (Vec<ChunkOp>, Vec<_>) = batch.into_iter().unzip();
        if ops.len() > 1 {
            tracing::debug!(shard = ?shard_key, chunks = ops.len(), "one shard rewrite for several chunk writes");
        }
        let m = crate::metrics::global();
        m.shard_rewrites.inc();
        m.shard_rewrite_chunks.observe(ops.len() as f64);
        let n = ops.len();
        let result = self.rewrite(shard_key, layout, &in_grid, ops, stop_dir).await;
        let (outcome, refused): (Outcome, Vec<bool>) = match result {
            Ok(refused) => (Ok(()), refused),
            Err(e) => (Err(Arc::new(e)), vec![false; n]),
        };
        for (tx, refused) in senders.into_iter().zip(refused) {
            if refused {
                crate::metrics::global().create_conflicts.inc();
            }
            let _ = tx.send(if refused { Err(Arc::new(FsError::Exists)) } else { outcome.clone() });
        }
        drop(running);
        self.forget_idle_queue(shard_key, &queue);
        rx.await.unwrap_or_else(|_| Err(Arc::new(FsError::BadHandle))).map_err(FsError::Shared)
    }

    fn forget_idle_queue(&self, shard_key: &str, queue: &Arc<Queue>) {
        let mut queues = crate::locks::lock(&self.queues);
        let idle = crate::locks::lock(&queue.pending).is_empty() && Arc::strong_count(queue) <= 2;
        if idle && queues.get(shard_key).is_some_and(|q| Arc::ptr_eq(q, queue)) {
            queues.remove(shard_key);
        }
    }

    /// Apply `ops` to the shard as one compare-and-swap, redone on conflict (see module doc).
    async fn rewrite(
        &self,
        key: &str,
        layout: &ShardLayout,
        in_grid: &InGrid,
        ops: Vec<ChunkOp>,
        stop_dir: &str,
    ) -> FsResult<Vec<bool>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.try_rewrite(key, layout, in_grid, &ops, stop_dir).await {
                Err(FsError::Store(StoreError::Conflict(_) | StoreError::AlreadyExists(_))) => {
                    crate::metrics::global().shard_rewrite_conflicts.inc();
                    if attempt >= CAS_ATTEMPTS {
                        tracing::warn!(shard = ?key, attempts = attempt, "shard kept changing under us; giving up");
                        return Err(StoreError::Conflict(key.to_string()).into());
                    }
                    tracing::debug!(shard = ?key, attempt, "shard changed since it was read; splicing again");
                    tokio::time::sleep(backoff(attempt)).await;
                    crate::metrics::global().shard_rewrite_retries.inc();
                }
                r => return r,
            }
        }
    }

    /// One round: read the shard and its version, splice, write if still at that version.
    /// Returns, per op, whether it was refused (an exclusive op on a present chunk).
    async fn try_rewrite(
        &self,
        key: &str,
        layout: &ShardLayout,
        in_grid: &InGrid,
        ops: &[ChunkOp],
        stop_dir: &str,
    ) -> FsResult<Vec<bool>> {
        let current = self.store.get_versioned(key).await?;
        if current.is_none() {
            // Nothing in the store vouches for the index size: bound it before allocating.
            check_new_shard(layout).map_err(|e| FsError::TooLarge(format!("shard {key}: {e}")))?;
        }
        let mut chunks: BTreeMap<u64, Bytes> = BTreeMap::new();
        if let Some((shard, _)) = &current {
            // Never rewrite a shard we cannot read: that would drop its other chunks.
            let index = ShardIndex::of_shard(layout, shard).map_err(|e| {
                    tracing::error!(shard = ?key, error = %e, "refusing to rewrite a shard with a corrupt index");
                    FsError::Corrupt(format!("shard {key}: {e}"))
                })?;
            for (local, entry) in index.present().filter(|(local, _)| in_grid(*local)) {
                chunks.insert(
                    local,
                    shard.slice(entry.offset as usize..(entry.offset + entry.nbytes) as usize),
                );
            }
        }
        let mut refused = vec![false; ops.len()];
        for (op, refused) in ops.iter().zip(refused.iter_mut()) {
            if op.exclusive && chunks.contains_key(&op.local) {
                *refused = true;
                continue;
            }
            match &op.data {
                Some(data) => chunks.insert(op.local, data.clone()),
                None => chunks.remove(&op.local),
            };
        }
        if refused.iter().all(|r| *r) {
            return Ok(refused); // nothing to change
        }
        let parts: Vec<(u64, &[u8])> = chunks.iter().map(|(l, b)| (*l, b.as_ref())).collect();
        let built = build_shard(layout, &parts)
            .map_err(|e| FsError::Corrupt(format!("cannot build shard {key}: {e}")))?;
        let version = current.map(|(_, meta)| meta.version);
        match (built, version) {
            (Some(shard), version) => {
                let mode = match version {
                    Some(v) => PutMode::Update(v),
                    None => PutMode::Create,
                };
                crate::metrics::global().conditional_writes.inc();
                let gate = self.gate(key);
                let _readers_wait = gate.write().await;
                self.store.put_opts(key, Bytes::from(shard), mode).await?;
            }
            (None, Some(version)) => {
                // Every inner chunk is absent: the shard goes, as zarr-python and tensorstore do.
                crate::metrics::global().conditional_writes.inc();
                let gate = self.gate(key);
                let deleted = {
                    let _readers_wait = gate.write().await;
                    self.store.delete_if_version(key, &version).await
                };
                match deleted {
                    Ok(()) | Err(StoreError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
                self.prune_empty_dirs(key, stop_dir).await;
            }
            (None, None) => {}
        }
        Ok(refused)
    }

    /// On stores with real directories, remove the directories a deleted shard left empty.
    async fn prune_empty_dirs(&self, key: &str, stop_dir: &str) {
        if !self.store.has_real_dirs() {
            return;
        }
        let mut dir = split_key(key).0;
        while !dir.is_empty() && dir != stop_dir && dir.len() > stop_dir.len() {
            if self.store.remove_dir(dir).await.is_err() {
                break; // not empty (or gone): stop here
            }
            dir = split_key(dir).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backends::local::LocalStore;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::prelude::*;
    use crate::zarr::sharding::index::tests::layout;
    use crate::zarr::sharding::IndexLocation;

    const ENTRIES: u64 = 16;

    /// The chunks of the shard at `key`, by local index.
    async fn chunks_of(store: &dyn Store, key: &str) -> BTreeMap<u64, Bytes> {
        let shard = store.get(key).await.unwrap();
        let index =
            ShardIndex::of_shard(&layout(ENTRIES, IndexLocation::End, true), &shard).unwrap();
        index
            .present()
            .map(|(l, e)| (l, shard.slice(e.offset as usize..(e.offset + e.nbytes) as usize)))
            .collect()
    }

    /// Two shard writers on one store stand for two daemons (each serializes only its own
    /// writers). Many tasks on each write disjoint chunks of the same two shards, several
    /// times each: at the end every chunk holds the last value its writer wrote.
    async fn two_daemons_lose_nothing(one: Arc<dyn Store>, two: Arc<dyn Store>) {
        let writers = [Arc::new(ShardWriter::new(one.clone())), Arc::new(ShardWriter::new(two))];
        let lay = layout(ENTRIES, IndexLocation::End, true);
        let before = crate::metrics::global().shard_rewrite_conflicts.get();
        let mut tasks = Vec::new();
        for local in 0..ENTRIES {
            for shard in ["a/c/0", "a/c/1"] {
                let w = writers[(local % 2) as usize].clone();
                let lay = lay.clone();
                tasks.push(tokio::spawn(async move {
                    for round in 0..5u8 {
                        let data = Bytes::from(vec![local as u8, round, shard.len() as u8]);
                        let op = ChunkOp::new(local, Some(data));
                        w.apply(shard, &lay, Arc::new(|_| true), op, "a").await.unwrap();
                    }
                }));
            }
        }
        for t in tasks {
            t.await.unwrap();
        }
        for shard in ["a/c/0", "a/c/1"] {
            let got = chunks_of(&*one, shard).await;
            assert_eq!(got.len() as u64, ENTRIES, "{shard}: chunks lost: {:?}", got.keys());
            for (local, data) in got {
                assert_eq!(data.as_ref(), [local as u8, 4, shard.len() as u8], "{shard}/{local}");
            }
        }
        let after = crate::metrics::global().shard_rewrite_conflicts.get();
        eprintln!("conflicts: {}", after - before);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_writers_on_one_memory_store() {
        let m: Arc<dyn Store> = Arc::new(MemoryStore::new());
        two_daemons_lose_nothing(m.clone(), m).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_writers_on_one_local_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let one = Arc::new(LocalStore::open(tmp.path()).unwrap());
        let two = Arc::new(LocalStore::open(tmp.path()).unwrap());
        two_daemons_lose_nothing(one, two).await;
    }

    /// The last chunk removed (through the other writer) deletes the shard only if nobody
    /// wrote it since: a stale delete is a conflict, read again, and the shard stays.
    #[tokio::test]
    async fn an_emptied_shard_is_deleted_only_if_unchanged() {
        let m = Arc::new(MemoryStore::new());
        let w = ShardWriter::new(m.clone());
        let lay = layout(ENTRIES, IndexLocation::End, true);
        let all: InGrid = Arc::new(|_| true);
        let put = |local, v: u8| ChunkOp::new(local, Some(Bytes::from(vec![v])));
        w.apply("s", &lay, all.clone(), put(1, 1), "").await.unwrap();
        let (_, v1) = m.get_versioned("s").await.unwrap().unwrap();
        w.apply("s", &lay, all.clone(), put(2, 2), "").await.unwrap();
        assert!(matches!(
            m.delete_if_version("s", &v1.version).await,
            Err(StoreError::Conflict(_))
        ));
        w.apply("s", &lay, all.clone(), ChunkOp::new(1, None), "").await.unwrap();
        assert_eq!(chunks_of(&*m, "s").await.keys().copied().collect::<Vec<_>>(), vec![2]);
        w.apply("s", &lay, all, ChunkOp::new(2, None), "").await.unwrap();
        assert!(m.head("s").await.unwrap().is_none());
    }

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let first: Vec<Duration> = (0..20).map(|_| backoff(1)).collect();
        assert!(first.iter().all(|d| *d >= CAS_FIRST_BACKOFF && *d < CAS_FIRST_BACKOFF * 3));
        assert!(first.iter().any(|d| *d != first[0]), "no jitter");
        assert!((0..20).all(|_| backoff(30) < CAS_MAX_BACKOFF.mul_f64(1.5)));
    }
}
