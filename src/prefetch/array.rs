//! Every chunk of a small array, fetched at the lookup of its first chunk. Readers ask for a
//! few chunks at a time (zarr-python 3 up to 10, through a mount 6 on 2 cores; zarr-python 2
//! and most plain readers one), one round trip per wave; a small array is most often read
//! whole (coordinates, masks, thumbnails), so its later waves are then served from memory.

use std::sync::Arc;

use crate::metrics::Ahead;
use crate::store::Store;

/// An array of more chunk objects than this is never prefetched whole, however small: a
/// request each would be many requests for one guess.
const MAX_CHUNKS: u64 = 256;
/// Prefetch requests of one array in flight at once.
const IN_FLIGHT: usize = 16;

/// Arrays whose chunks take at most `bytes` (by their metadata's estimate) are fetched whole.
#[derive(Debug, Clone, Copy, Default)]
pub struct ArrayPrefetch {
    /// 0: never.
    bytes: u64,
}

impl ArrayPrefetch {
    pub fn new(bytes: u64) -> Self {
        ArrayPrefetch { bytes }
    }

    /// Whether an array of `count` chunk objects of at most `bound` bytes each is fetched
    /// whole, on a store that fetches objects of up to `whole_limit` bytes whole.
    pub fn wants(&self, count: u64, bound: u64, whole_limit: u64) -> bool {
        count.saturating_mul(bound) <= self.bytes
            && (2..=MAX_CHUNKS).contains(&count)
            && bound <= whole_limit
    }

    /// Fetch `keys` (objects of at most `bound` bytes) into the store's cache in the
    /// background, `IN_FLIGHT` at a time. Nothing outside a tokio runtime.
    pub fn start(store: Arc<dyn Store>, keys: Vec<String>, bound: u64) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else { return };
        rt.spawn(async move {
            use futures::StreamExt;
            futures::stream::iter(keys)
                .for_each_concurrent(IN_FLIGHT, |k| {
                    let store = store.clone();
                    async move { store.prefetch(&k, bound, Ahead::Array).await }
                })
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_arrays_of_a_few_small_chunks_within_the_budget() {
        let p = ArrayPrefetch::new(1 << 20);
        assert!(p.wants(4, 1000, 8 << 20));
        assert!(!p.wants(1, 1000, 8 << 20), "a single chunk is the read itself");
        assert!(!p.wants(MAX_CHUNKS + 1, 10, 8 << 20), "too many requests");
        assert!(!p.wants(4, 1 << 20, 8 << 20), "over the budget");
        assert!(!p.wants(4, 1000, 500), "chunks the store would not keep whole");
        assert!(!ArrayPrefetch::default().wants(2, 1, 8 << 20), "off");
    }
}
