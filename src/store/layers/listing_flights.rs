//! Directory listings a disk cache sends to confirm its stale objects (`disk_cache/confirm.rs`):
//! single-flight per directory, so that the concurrent reads of one directory's objects wait
//! for one listing instead of each sending its own request; and whether this store's listings
//! can confirm at all, learned from the first that could not.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

#[derive(Default)]
pub struct ListingFlights {
    under_way: Mutex<HashMap<String, Arc<OnceCell<()>>>>,
    /// A listing came back without versions (s3s-fs lists no ETags), empty, or refused: the
    /// cache confirms object by object from then on.
    useless: AtomicBool,
}

impl ListingFlights {
    pub fn may_confirm(&self) -> bool {
        !self.useless.load(Ordering::Relaxed)
    }

    pub fn cannot_confirm(&self) {
        self.useless.store(true, Ordering::Relaxed);
    }

    /// Run `list` for `dir`, or wait for the run under way (a run given up half way, its
    /// future dropped, is taken over by a waiter).
    pub async fn run<F: Future<Output = ()>>(&self, dir: &str, list: impl FnOnce() -> F) {
        let flight = {
            let mut under_way = crate::locks::lock(&self.under_way);
            under_way.entry(dir.to_string()).or_default().clone()
        };
        flight.get_or_init(list).await;
        let mut under_way = crate::locks::lock(&self.under_way);
        if under_way.get(dir).is_some_and(|f| Arc::ptr_eq(f, &flight)) {
            under_way.remove(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[tokio::test(start_paused = true)]
    async fn concurrent_runs_of_one_directory_share_one_listing() {
        let flights = ListingFlights::default();
        let runs = AtomicUsize::new(0);
        let list = || async {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        let same = (0..5).map(|_| flights.run("a/c/0", list));
        let other = flights.run("a/c/1", list);
        futures::future::join(futures::future::join_all(same), other).await;
        assert_eq!(runs.load(Ordering::SeqCst), 2, "one per directory");
        flights.run("a/c/0", list).await;
        assert_eq!(runs.load(Ordering::SeqCst), 3, "a later run lists again");
        assert!(crate::locks::lock(&flights.under_way).is_empty());
    }
}
