//! Shards ahead of a reader that walks a sharded array's chunks in C order (the unsharded and
//! v2 views, one chunk file at a time): how far ahead, and how many fetches at once. Which
//! shards are next and whether the reader is scanning at all is the view's to say
//! (`fs/namespace/unsharded.rs`); the fetch is the shard-index cache's.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;

/// Shards fetched ahead of the one being read: as many as fit in `BYTES` by the metadata's
/// bound, within `DEPTH`. A reader walking chunks in C order touches a whole row of shards at
/// once, so a depth of one row leaves it waiting a round trip at the start of each row; two
/// rows of 4 MiB shards keep it fed.
const DEPTH: std::ops::RangeInclusive<u64> = 4..=16;
const BYTES: u64 = 32 << 20;
/// Fetches ahead at once: the shard the reader waits for shares the connection's bandwidth
/// with these, so the rest of the read-ahead queues behind them.
const IN_FLIGHT: usize = 4;

/// One array view's shard read-ahead: its slots for fetches in flight.
pub struct ShardReadAhead {
    /// Fair: fetches take slots in the order they were planned, so the nearest shard goes first.
    slots: Arc<Semaphore>,
}

impl Default for ShardReadAhead {
    fn default() -> Self {
        ShardReadAhead { slots: Arc::new(Semaphore::new(IN_FLIGHT)) }
    }
}

impl ShardReadAhead {
    /// How many shards ahead to plan, for shards of at most `shard_bound` bytes (unknown: the
    /// smallest depth).
    pub fn depth(shard_bound: Option<u64>) -> u64 {
        shard_bound.map_or(*DEPTH.start(), |bound| {
            (BYTES / bound.max(1)).clamp(*DEPTH.start(), *DEPTH.end())
        })
    }

    /// Run `fetch` in the background once a slot is free; nothing outside a tokio runtime.
    pub fn start(&self, fetch: impl Future<Output = ()> + Send + 'static) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let slots = self.slots.clone();
        runtime.spawn(async move {
            let Ok(_slot) = slots.acquire_owned().await else { return };
            fetch.await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_fills_the_byte_budget_within_its_bounds() {
        assert_eq!(ShardReadAhead::depth(None), 4, "unknown shard size: the smallest depth");
        assert_eq!(ShardReadAhead::depth(Some(4 << 20)), 8, "two rows of 4 MiB shards");
        assert_eq!(ShardReadAhead::depth(Some(1 << 10)), 16, "tiny shards: capped");
        assert_eq!(ShardReadAhead::depth(Some(1 << 30)), 4, "huge shards: still a row");
        assert_eq!(ShardReadAhead::depth(Some(0)), 16, "a zero bound is not a division by zero");
    }

    #[tokio::test(start_paused = true)]
    async fn at_most_in_flight_fetches_run_at_once() {
        let ahead = ShardReadAhead::default();
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let release = Arc::new(tokio::sync::Notify::new());
        let started = Arc::new(Semaphore::new(0));
        for _ in 0..IN_FLIGHT + 3 {
            let (running, most, release, started) =
                (running.clone(), most.clone(), release.clone(), started.clone());
            ahead.start(async move {
                use std::sync::atomic::Ordering::SeqCst;
                let now = running.fetch_add(1, SeqCst) + 1;
                most.fetch_max(now, SeqCst);
                started.add_permits(1);
                release.notified().await;
                running.fetch_sub(1, SeqCst);
            });
        }
        // The first IN_FLIGHT start; the others wait for a slot.
        started.acquire_many(IN_FLIGHT as u32).await.unwrap().forget();
        tokio::task::yield_now().await;
        assert_eq!(running.load(std::sync::atomic::Ordering::SeqCst), IN_FLIGHT);
        release.notify_waiters();
        started.acquire_many(3).await.unwrap().forget();
        release.notify_waiters();
        assert_eq!(most.load(std::sync::atomic::Ordering::SeqCst), IN_FLIGHT);
    }
}
