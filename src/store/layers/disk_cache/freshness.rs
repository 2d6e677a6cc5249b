//! The versions this cache knows and how long it trusts them: every answer of the store that
//! passes through is observed, and a version past the TTL whose bytes are on disk is confirmed
//! with a conditional GET rather than fetched again.

use bytes::Bytes;

use super::super::disk_meta::{one_version, to_keep};
use super::super::write_watch::ReadStart;
use super::DiskCacheStore;
use crate::metrics::Revalidation;
use crate::store::{ByteRange, ObjectMeta, Revalidated, StoreResult};

/// What an answer about a key is to the known versions (see `observe`).
#[derive(Clone, Copy)]
pub(super) struct Answer {
    /// A lookup's, HEAD's or listing's: it counts as the revalidation of a version past the TTL.
    pub(super) confirms: bool,
    /// Also written down for the next daemon.
    pub(super) record: bool,
}

impl Answer {
    /// A read's: the version whose bytes it brought.
    pub(super) const READ: Answer = Answer { confirms: false, record: true };
    /// A read's that failed or found another version than the one it read by (not recorded).
    pub(super) const READ_MISMATCH: Answer = Answer { confirms: false, record: false };
    /// A lookup's or listing's (the journal records those whole).
    pub(super) const LOOKUP: Answer = Answer { confirms: true, record: false };
    /// A HEAD's or a confirming listing page's, recorded per object.
    pub(super) const CONFIRMED: Answer = Answer { confirms: true, record: true };
}

impl DiskCacheStore {
    /// Metadata of `key` seen within the TTL.
    pub(super) fn fresh_meta(&self, key: &str) -> Option<ObjectMeta> {
        let mut st = self.state();
        match st.known.get(key) {
            Some((m, at))
                if crate::clock::system_now()
                    .duration_since(*at)
                    .is_ok_and(|age| age < self.cfg.ttl) =>
            {
                Some(m.clone())
            }
            _ => None,
        }
    }

    /// Metadata of `key` known, however old: a version whose cached bytes a revalidation
    /// may confirm.
    pub(super) fn known_meta(&self, key: &str) -> Option<ObjectMeta> {
        self.state().known.peek(key).map(|(m, _)| m.clone())
    }

    /// What the store said of `key` now, trusted for the TTL from now on, unless a write of
    /// `key` through this layer overlapped the request (`since`: its start): then the answer
    /// may predate the write and nothing of it is kept. Returns whether it was kept.
    ///
    /// The overlap is checked under the state lock, which a write's `forget` takes after the
    /// write has begun: an answer kept just before a write begins is dropped by that write's
    /// forget, and one arriving later sees the write. (Checked before taking the lock, a late
    /// answer could be kept just after the write's last forget, and named the version before
    /// the write as current for the TTL.)
    ///
    /// An answer naming another version than the one known (or none) drops the known
    /// version's files: they can never be read again. A confirming answer (a lookup, HEAD or
    /// listing) that meets a known version past the TTL counts as its revalidation. A
    /// recorded one is also written down for the next daemon (disk_meta.rs,
    /// `Record::Object`), so that it can serve the blocks of objects that nothing looks up or
    /// lists (shards behind the unsharded view, metadata documents) without asking again.
    pub(super) fn observe(
        &self,
        key: &str,
        meta: Option<&ObjectMeta>,
        answer: Answer,
        since: &ReadStart,
    ) -> bool {
        let now = crate::clock::system_now();
        let before = {
            let mut st = self.state();
            if self.writes.overlapped(since) {
                return false;
            }
            let before = st.known.peek(key).cloned();
            // An untagged answer (an s3s-fs listing) that meets a tagged version only by size
            // and second cannot tell a rewrite within that second: it keeps the version but
            // not as confirmed, so a read past the TTL still asks with the tag.
            let untagged = crate::store::backends::object::is_untagged;
            let weak = |m: &ObjectMeta, old: &ObjectMeta| {
                untagged(m) && !untagged(old) && one_version(m, old)
            };
            match meta {
                Some(m) if before.as_ref().is_some_and(|(old, _)| weak(m, old)) => {
                    return true;
                }
                Some(m) => {
                    let m = match &before {
                        Some((old, _)) => to_keep(old, m).clone(),
                        None => m.clone(),
                    };
                    st.known.put(key.to_string(), (m, now));
                }
                None => {
                    st.known.pop(key);
                }
            }
            // Under the same lock, so that a write's forget comes after the record.
            if let (true, Some(m)) = (answer.record, meta) {
                self.journal.record_object(key, m);
            }
            before
        };
        let Some((old, at)) = before else { return true };
        let same = meta.is_some_and(|m| one_version(m, &old));
        if !same {
            self.drop_version(key, &old);
        }
        let stale = now.duration_since(at).map_or(true, |age| age >= self.cfg.ttl);
        if answer.confirms && stale {
            let found = match (same, meta) {
                (true, _) => Revalidation::Unchanged,
                (false, Some(_)) => Revalidation::Changed,
                (false, None) => Revalidation::Deleted,
            };
            tracing::debug!(key, found = found.name(), known = ?old, now = ?meta, "disk cache: a cached version confirmed");
            self.stats.revalidated(found);
        }
        true
    }

    pub(super) fn forget(&self, key: &str) {
        self.journal.forget(key, false);
        self.state().known.pop(key);
    }

    pub(super) fn forget_prefix(&self, prefix: &str) {
        self.journal.forget(prefix, true);
        let mut st = self.state();
        for k in st.known.keys_below(prefix) {
            st.known.pop(&k);
        }
    }

    /// Confirm `known`, a version of `key` past the TTL whose bytes are on disk, with the
    /// cheapest request the store has (a conditional GET of `fetch`: a 304 carries no body):
    /// `Ok(known)` when unchanged (trusted for the TTL again), else the store's answer to a
    /// read of `fetch` now (`None`: deleted).
    pub(super) async fn revalidate(
        &self,
        key: &str,
        fetch: &ByteRange,
        known: ObjectMeta,
    ) -> StoreResult<Result<ObjectMeta, Option<(Bytes, ObjectMeta)>>> {
        let start = self.writes.read_starts(key);
        match self.inner.get_if_changed(key, fetch.clone(), &known).await? {
            Revalidated::Unchanged => {
                self.stats.revalidated(Revalidation::Unchanged);
                self.observe(key, Some(&known), Answer::READ, &start);
                Ok(Ok(known))
            }
            Revalidated::Changed(now) => {
                let found = match &now {
                    Some(_) => Revalidation::Changed,
                    None => Revalidation::Deleted,
                };
                let now_meta = now.as_ref().map(|(_, m)| m);
                tracing::debug!(key, found = found.name(), ?known, now = ?now_meta, "disk cache: a cached version confirmed");
                self.stats.revalidated(found);
                Ok(Err(now))
            }
        }
    }

    /// The known version of `key`, past the TTL, when some of `range` of it is on disk: what a
    /// read confirms rather than fetches.
    pub(super) fn stale_on_disk(&self, key: &str, range: &ByteRange) -> Option<ObjectMeta> {
        self.fresh_meta(key).is_none().then_some(())?;
        self.known_meta(key).filter(|m| self.holds_any(key, m, range))
    }
}
