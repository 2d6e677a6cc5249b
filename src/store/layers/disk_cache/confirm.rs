//! A directory's stale cached objects confirmed together by one listing page (a reader
//! opening files by name lists nothing, and a conditional GET each would be a round trip
//! each), and the directories a reader goes to next (as a policy above the store says)
//! confirmed beside it.

use std::sync::Arc;
use std::time::SystemTime;

use super::freshness::Answer;
use super::DiskCacheStore;
use crate::store::{ByteRange, DirsAhead, Listing, StoreError};

/// A directory's stale cached objects are confirmed by one listing page when there are at
/// least this many (for one, its own conditional GET costs the same round trip, and is exact).
pub(super) const LIST_TO_CONFIRM: usize = 2;

/// At most this many objects a listing is sent to confirm: the objects of an S3 listing page.
pub(super) const CONFIRM_PER_LISTING: usize = 1000;

/// A confirming page starts at most this many stale names before the one read.
pub(super) const RUN_BEFORE: usize = CONFIRM_PER_LISTING / 4;

impl DiskCacheStore {
    /// Before `key`'s cached version past the TTL is revalidated alone: confirm it together
    /// with the other stale cached objects of its directory, by one listing page, when there
    /// are `LIST_TO_CONFIRM` of them and this store's listings can confirm. The reads of that
    /// directory meanwhile wait for this listing rather than send their own requests. What the
    /// page did not confirm (not in it, untagged, overlapped by a write) stays past the TTL,
    /// for its own conditional GET.
    ///
    /// Its own directory, not an ancestor prefix: objects read together tend to share their
    /// directory, and a listing of an ancestor's whole subtree would be paged through names
    /// far from the ones being read. With `ahead`, the directories a reader goes to next are
    /// confirmed beside it (`confirm_next_directories`).
    pub(super) async fn confirm_directory(self: &Arc<Self>, key: &str, ahead: bool) {
        if !self.listings.may_confirm() {
            return;
        }
        let (dir, _) = crate::store::split_key(key);
        self.listings
            .run(dir, || async move {
                let whole = ByteRange::Range(0..u64::MAX);
                let now = crate::clock::system_now();
                let stale =
                    |at: &SystemTime| now.duration_since(*at).map_or(true, |a| a >= self.cfg.ttl);
                // The page starts at the run of stale names just before `key` (concurrent
                // reads of a directory arrive in about name order), and holds the names after
                // it that a reader in name order wants next. A name's proper
                // prefix sorts just before it: the listing starts after that.
                let (after, candidates) = {
                    let st = self.state();
                    let first = st.known.run_start(dir, key, RUN_BEFORE, |_, (_, at)| stale(at));
                    let (_, name) = crate::store::split_key(&first);
                    let after = name.char_indices().last().map_or("", |(i, _)| &name[..i]);
                    let candidates = st.known.in_dir(dir, after, CONFIRM_PER_LISTING);
                    (after.to_string(), candidates)
                };
                let stale: Vec<String> = candidates
                    .into_iter()
                    .filter(|(k, (m, at))| stale(at) && self.holds_any(k, m, &whole))
                    .map(|(k, _)| k)
                    .collect();
                if stale.len() >= LIST_TO_CONFIRM && stale.iter().any(|k| k == key) {
                    if ahead {
                        self.confirm_next_directories(dir);
                    }
                    self.confirm_in_listing(dir, &after, &stale).await;
                }
            })
            .await;
    }

    /// A reader confirming one directory's cached objects goes on to other directories, each
    /// of which would cost it another round trip when it gets there: their listings go out
    /// now, beside this one, in the background. Which directories is the read-ahead policy's
    /// (`next_dirs`, given by the layers above: the store knows keys, not what they name);
    /// among them, those this cache holds objects of. Each lists only if it has stale cached
    /// objects of its own (`confirm_directory`), and goes no further ahead itself.
    fn confirm_next_directories(self: &Arc<Self>, dir: &str) {
        let Some(next_dirs) = self.next_dirs else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        if dir.is_empty() {
            return;
        }
        let ahead = next_dirs(dir);
        let firsts: Vec<String> = {
            let st = self.state();
            match ahead {
                DirsAhead::Named(dirs) => {
                    dirs.iter().filter_map(|d| st.known.first_key_below(d)).collect()
                }
                DirsAhead::Siblings(n) => {
                    let (parent, name) = crate::store::split_key(dir);
                    st.known.first_keys_of_dirs_after(parent, name, n)
                }
            }
        };
        for key in firsts {
            let this = self.clone();
            runtime.spawn(async move { this.confirm_directory(&key, false).await });
        }
    }

    /// One listing page of `dir` from after the name `after`, taken as the answer to a
    /// revalidation of each of `stale` (keys of `dir`) that it names: as the same version, confirmed; as another, the old
    /// version's files dropped (the read fetches the new one). A page with an entry without a
    /// version tag, with no object, or a listing refused, says this store's listings cannot
    /// confirm.
    pub(super) async fn confirm_in_listing(&self, dir: &str, after: &str, stale: &[String]) {
        use futures::StreamExt;
        let start = self.writes.listing_starts();
        let page = self.inner.list_pages_after(dir, after).next().await;
        let page = match page {
            Some(Ok(page)) => page,
            Some(Err(e)) => {
                tracing::debug!(dir, error = %e, "disk cache: a confirming listing failed");
                // Not allowed to list (no ListBucket) or no listing at all: not again. A
                // passing failure (an outage) only sends these reads their own requests.
                if matches!(e, StoreError::PermissionDenied(_) | StoreError::Unsupported(_)) {
                    self.listings.cannot_confirm();
                }
                return;
            }
            None => Listing::default(),
        };
        let untagged = crate::store::backends::object::is_untagged;
        if page.files.is_empty() || page.files.iter().any(|(_, m)| untagged(m)) {
            tracing::debug!(dir, "disk cache: listings of this store cannot confirm");
            self.listings.cannot_confirm();
            return;
        }
        for (name, meta) in &page.files {
            let key = crate::store::join_key(dir, name);
            if stale.binary_search(&key).is_ok() {
                self.observe(&key, Some(meta), Answer::CONFIRMED, &start.of(&key));
            }
        }
    }
}
