//! Shards ahead of a reader that walks a sharded array's chunks in C order (the unsharded and
//! v2 views, one chunk file at a time): how far ahead, and how many fetches at once. Which
//! shards are next and whether the reader is scanning at all is the view's to say
//! (`src/views/unsharded/namespace.rs`); the fetch is the shard-index cache's.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;

use tokio::sync::mpsc;

/// Shards fetched ahead of the one being read: as many as fit in the byte budget by the
/// metadata's bound, within `DEPTH`. A reader walking chunks in C order touches a whole row of
/// shards at once, so a depth of one row leaves it waiting a round trip at the start of each
/// row; with the default budget a 4096² float32 array of 4 MiB shards is fetched whole from
/// the second shard on, and the network stays busy while the reader walks the first rows.
const DEPTH: std::ops::RangeInclusive<u64> = 4..=16;
/// The byte budget when the mount says nothing else, and the most any mount gets.
pub const DEFAULT_BUDGET: u64 = 64 << 20;
/// Fetches ahead at once: the shard the reader waits for shares the connection's bandwidth
/// with these, so the rest of the read-ahead queues behind them.
const IN_FLIGHT: usize = 4;

type Fetch = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One array view's shard read-ahead: its byte budget and its queue of planned fetches.
pub struct ShardReadAhead {
    budget: u64,
    /// Planned fetches, started in the order planned by one task (`start_in_order`).
    queue: OnceLock<mpsc::UnboundedSender<Fetch>>,
}

impl Default for ShardReadAhead {
    fn default() -> Self {
        ShardReadAhead::with_budget(DEFAULT_BUDGET)
    }
}

impl ShardReadAhead {
    /// A read-ahead that plans at most `budget` bytes of shards ahead (at least `DEPTH`'s
    /// lower bound of shards).
    pub fn with_budget(budget: u64) -> Self {
        ShardReadAhead { budget, queue: OnceLock::new() }
    }

    /// The budget for a mount whose memory cache holds `cache_bytes`: the shards fetched
    /// ahead wait there for the reader, so they take at most an eighth of it.
    pub fn budget_for_cache(cache_bytes: u64) -> u64 {
        (cache_bytes / 8).min(DEFAULT_BUDGET)
    }

    /// How many shards ahead to plan, for shards of at most `shard_bound` bytes (unknown: the
    /// smallest depth).
    pub fn depth(&self, shard_bound: Option<u64>) -> u64 {
        shard_bound.map_or(*DEPTH.start(), |bound| {
            (self.budget / bound.max(1)).clamp(*DEPTH.start(), *DEPTH.end())
        })
    }

    /// Run `fetch` in the background once the fetches planned before it have started and
    /// fewer than `IN_FLIGHT` run; nothing outside a tokio runtime.
    pub fn start(&self, fetch: impl Future<Output = ()> + Send + 'static) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            runtime.spawn(start_in_order(rx));
            tx
        });
        // Closed only when the runtime that ran the queue's task has shut down.
        let _ = queue.send(Box::pin(fetch));
    }
}

/// Run the queued fetches, at most `IN_FLIGHT` at once, each started in queue order (as
/// `prefetch::array` runs its list); ends when the read-ahead is dropped and its last fetch is
/// done. The fetches are polled here, not spawned: the runtime would run a task spawned last
/// before the ones spawned before it.
async fn start_in_order(mut queue: mpsc::UnboundedReceiver<Fetch>) {
    use futures::StreamExt;
    futures::stream::poll_fn(|cx| queue.poll_recv(cx))
        .for_each_concurrent(IN_FLIGHT, |fetch| fetch)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::sync::Semaphore;

    #[test]
    fn depth_fills_the_byte_budget_within_its_bounds() {
        let ahead = ShardReadAhead::default();
        assert_eq!(ahead.depth(None), 4, "unknown shard size: the smallest depth");
        assert_eq!(ahead.depth(Some(4 << 20)), 16, "four rows of 4 MiB shards");
        assert_eq!(ahead.depth(Some(1 << 10)), 16, "tiny shards: capped");
        assert_eq!(ahead.depth(Some(1 << 30)), 4, "huge shards: still a row");
        assert_eq!(ahead.depth(Some(0)), 16, "a zero bound is not a division by zero");
        let small = ShardReadAhead::with_budget(ShardReadAhead::budget_for_cache(128 << 20));
        assert_eq!(small.depth(Some(4 << 20)), 4, "a 128 MiB cache: 16 MiB ahead, one row");
        assert_eq!(ShardReadAhead::budget_for_cache(2 << 30), DEFAULT_BUDGET, "capped");
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

    /// Planned from a runtime worker, as a chunk read plans them: the runtime runs the task
    /// spawned last first (its LIFO slot), which must not put the farthest shard first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn fetches_start_in_the_order_they_were_planned() {
        let ahead = Arc::new(ShardReadAhead::default());
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let done = Arc::new(Semaphore::new(0));
        let total = IN_FLIGHT + 4;
        let planner = {
            let (ahead, order, done) = (ahead.clone(), order.clone(), done.clone());
            tokio::spawn(async move {
                for i in 0..total {
                    let (order, done) = (order.clone(), done.clone());
                    ahead.start(async move {
                        order.lock().unwrap().push(i);
                        tokio::task::yield_now().await;
                        done.add_permits(1);
                    });
                }
            })
        };
        planner.await.unwrap();
        done.acquire_many(total as u32).await.unwrap().forget();
        assert_eq!(*order.lock().unwrap(), (0..total).collect::<Vec<_>>(), "nearest first");
    }
}
