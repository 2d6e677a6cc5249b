//! Writes of inner chunks into shards: read the shard, splice, write a whole new shard (fresh
//! index, same layout, crc32c recomputed) with one atomic `put`, or delete the shard once no
//! chunk is left. Writers of one shard are serialized; chunk writes that queue up while a
//! rewrite is running are applied together in the next one (group commit), so N concurrent
//! writers of one shard cost far fewer than N rewrites and none of them is lost.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::error::{FsError, FsResult};
use crate::store::{split_key, Store, StoreError};
use crate::zarr::shard_build::build_shard;
use crate::zarr::shard_index::ShardIndex;
use crate::zarr::sharding::ShardLayout;

/// One change to one inner chunk: new encoded bytes, or `None` to make it absent.
pub struct ChunkOp {
    pub local: u64,
    pub data: Option<Bytes>,
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
}

impl ShardWriter {
    pub fn new(store: Arc<dyn Store>) -> Self {
        ShardWriter { store, queues: Mutex::new(HashMap::new()) }
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
        let queue = self
            .queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(shard_key.to_string())
            .or_default()
            .clone();
        let (tx, mut rx) = oneshot::channel();
        queue.pending.lock().unwrap_or_else(|p| p.into_inner()).push((op, tx));
        let running = queue.running.lock().await;
        if let Ok(outcome) = rx.try_recv() {
            return outcome.map_err(FsError::Shared); // an earlier rewrite already carried it
        }
        let batch = std::mem::take(&mut *queue.pending.lock().unwrap_or_else(|p| p.into_inner()));
        let (ops, senders): (Vec<ChunkOp>, Vec<_>) = batch.into_iter().unzip();
        if ops.len() > 1 {
            tracing::debug!(shard = ?shard_key, chunks = ops.len(), "one shard rewrite for several chunk writes");
        }
        let m = crate::metrics::global();
        m.shard_rewrites.inc();
        m.shard_rewrite_chunks.observe(ops.len() as f64);
        let outcome: Outcome =
            self.rewrite(shard_key, layout, &in_grid, ops, stop_dir).await.map_err(Arc::new);
        for tx in senders {
            let _ = tx.send(outcome.clone());
        }
        drop(running);
        self.forget_idle_queue(shard_key, &queue);
        rx.await.unwrap_or_else(|_| Err(Arc::new(FsError::BadHandle))).map_err(FsError::Shared)
    }

    fn forget_idle_queue(&self, shard_key: &str, queue: &Arc<Queue>) {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let idle = queue.pending.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
            && Arc::strong_count(queue) <= 2;
        if idle && queues.get(shard_key).is_some_and(|q| Arc::ptr_eq(q, queue)) {
            queues.remove(shard_key);
        }
    }

    async fn rewrite(
        &self,
        key: &str,
        layout: &ShardLayout,
        in_grid: &InGrid,
        ops: Vec<ChunkOp>,
        stop_dir: &str,
    ) -> FsResult<()> {
        let current = match self.store.get(key).await {
            Ok(b) => Some(b),
            Err(StoreError::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        };
        let mut chunks: BTreeMap<u64, Bytes> = BTreeMap::new();
        if let Some(shard) = &current {
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
        for op in ops {
            match op.data {
                Some(data) => chunks.insert(op.local, data),
                None => chunks.remove(&op.local),
            };
        }
        let parts: Vec<(u64, &[u8])> = chunks.iter().map(|(l, b)| (*l, b.as_ref())).collect();
        let built = build_shard(layout, &parts)
            .map_err(|e| FsError::Corrupt(format!("cannot build shard {key}: {e}")))?;
        match built {
            Some(shard) => self.store.put(key, Bytes::from(shard)).await?,
            None if current.is_some() => {
                // Every inner chunk is absent: the shard goes, as zarr-python and tensorstore do.
                match self.store.delete(key).await {
                    Ok(()) | Err(StoreError::NotFound(_)) => {}
                    Err(e) => return Err(e.into()),
                }
                self.prune_empty_dirs(key, stop_dir).await;
            }
            None => {}
        }
        Ok(())
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
