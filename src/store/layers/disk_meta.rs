//! The metadata half of the disk cache: listings and lookups the store answered, kept in a
//! journal in the cache directory so that a restarted daemon can use its cached blocks
//! without asking the store first.
//!
//! Consistency rule: an answer of the store is trusted for the metadata TTL counted from when
//! the store gave it (wall clock), in this daemon and in the next one on the same directory.
//! A restarted daemon serves listings and lookups recorded by an earlier one while they are
//! younger than its own `--metadata-ttl`; after that it asks the store again, and a changed
//! object shows with its new version (its old blocks are never used: blocks are keyed by
//! version). Listings and lookups past the TTL are reduced at start to the versions they name
//! (`Object` records), which the block layer revalidates rather than trusts. Answers recorded
//! during this run are only written down for the next one: within a run the file system's own
//! metadata cache decides, as without `--cache-dir`.
//!
//! Writes through the mount record an invalidation of the key, its ancestors' listings and
//! lookups (and, for a directory rename, the whole subtree) before they reach the store, so a
//! daemon killed mid-write never replays what the write made stale.
//!
//! File: `DIR/meta-<hash of the store>.journal` (one per store, as a cache directory may serve
//! different stores at different times), a sequence of frames `len (u32 LE) | CRC-32C (u32 LE) | JSON`.
//! Replay stops at the first frame that fails its check (a torn tail after a crash); the file
//! is then rewritten with only the live records (temp file, rename), and again whenever it
//! has grown to twice what is live. No fsync: a power loss can lose the newest records (the
//! next daemon then asks the store), never make a damaged frame count.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lru::LruCache;
use serde::{Deserialize, Serialize};

use crate::store::{split_key, Listing, Lookup, ObjectMeta};

/// The journal of the store described by `identity` in `dir`.
fn journal_path(dir: &Path, identity: &str) -> PathBuf {
    let d = ring::digest::digest(&ring::digest::SHA256, identity.as_bytes());
    let hex: String = d.as_ref()[..8].iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("meta-{hex}.journal"))
}
/// Encoded records kept for rewriting the journal; past this the least recently recorded are
/// not carried into the next rewrite (a later daemon asks the store for those).
const LIVE_BYTES: u64 = 64 << 20;
/// Slack before the journal is rewritten.
const REWRITE_SLACK: u64 = 4 << 20;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Meta {
    size: u64,
    /// Modification time, nanoseconds since the epoch.
    mtime: u64,
    version: String,
}

impl From<&ObjectMeta> for Meta {
    fn from(m: &ObjectMeta) -> Meta {
        let mtime = m.modified.duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        Meta { size: m.size, mtime, version: m.version.clone() }
    }
}

impl From<&Meta> for ObjectMeta {
    fn from(m: &Meta) -> ObjectMeta {
        ObjectMeta {
            size: m.size,
            modified: UNIX_EPOCH + Duration::from_nanos(m.mtime),
            version: m.version.clone(),
            perms: None, // object stores keep no modes: nothing to persist
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Record {
    /// The store listed `prefix` at `at` (milliseconds since the epoch).
    List { prefix: String, at: u64, files: Vec<(String, Meta)>, dirs: Vec<String> },
    /// The store answered a lookup of `key`.
    Lookup { key: String, at: u64, file: Option<Meta>, dir: bool },
    /// A write changed `key` (and, with `subtree`, everything below it).
    Forget { key: String, subtree: bool },
    /// A read of `key` saw this version: not a lookup answer (it says nothing of a directory
    /// of the same name), only the version that names the object's cached blocks, so that the
    /// next daemon can serve them within the TTL (objects read without a lookup or listing,
    /// as the shards behind the unsharded view and the metadata documents it reads).
    Object { key: String, at: u64, meta: Meta },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Subject {
    List(String),
    Lookup(String),
    Object(String),
}

struct State {
    file: Option<File>,
    /// Bytes in the journal file.
    written: u64,
    /// The newest record of each subject, encoded (what a rewrite keeps), with its time.
    live: LruCache<Subject, (u64, Arc<Vec<u8>>)>,
    live_bytes: u64,
    /// What an earlier daemon recorded, still to be served (until invalidated or answered
    /// again in this run).
    lists: HashMap<String, (u64, Listing)>,
    lookups: HashMap<String, (u64, Lookup)>,
    objects: HashMap<String, (u64, ObjectMeta)>,
    /// Writes forgotten so far (`forget`): a lookup answered across one is not recorded.
    forgets: u64,
}

pub struct MetaJournal {
    path: PathBuf,
    ttl: Duration,
    state: Mutex<State>,
}

fn now_ms() -> u64 {
    crate::clock::unix_millis()
}

fn frame(rec: &Record) -> Vec<u8> {
    let body = serde_json::to_vec(rec).expect("records serialize");
    let mut out = Vec::with_capacity(body.len() + 8);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The records of a journal, up to the first damaged frame.
fn parse(raw: &[u8]) -> Vec<Record> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while let Some(head) = raw.get(at..at + 8) {
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        let Some(body) = raw.get(at + 8..at + 8 + len) else { break };
        if crc32c::crc32c(body) != crc {
            break;
        }
        match serde_json::from_slice(body) {
            Ok(r) => out.push(r),
            Err(_) => break,
        }
        at += 8 + len;
    }
    out
}

/// Is `p` `key` itself or one of its ancestors ("" is the root)?
fn is_ancestor_or_self(p: &str, key: &str) -> bool {
    p.is_empty() || p == key || (key.starts_with(p) && key.as_bytes().get(p.len()) == Some(&b'/'))
}

/// Is `k` strictly below `key`?
fn is_below(k: &str, key: &str) -> bool {
    key.is_empty() || (k.starts_with(key) && k.as_bytes().get(key.len()) == Some(&b'/'))
}

fn affected(subject: &str, key: &str, subtree: bool) -> bool {
    is_ancestor_or_self(subject, key) || (subtree && is_below(subject, key))
}

/// Do `a` and `b` name one version of an object? The same version, or the same size and
/// modification second where one of them has no tag: s3s-fs lists objects without ETags,
/// which its HEADs and GETs give (HTTP dates have whole seconds).
pub fn one_version(a: &ObjectMeta, b: &ObjectMeta) -> bool {
    use crate::store::backends::object::is_untagged;
    let secs = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    crate::store::same_version(a, b)
        || (is_untagged(a) != is_untagged(b)
            && a.size == b.size
            && secs(a.modified) == secs(b.modified))
}

/// Which of `before` and `now`, two answers about one key, to remember: `now`, unless it is
/// `before`'s version without its tag (the tag names the cached blocks).
pub fn to_keep<'a>(before: &'a ObjectMeta, now: &'a ObjectMeta) -> &'a ObjectMeta {
    let untagged = crate::store::backends::object::is_untagged;
    if untagged(now) && !untagged(before) && one_version(before, now) {
        before
    } else {
        now
    }
}

impl MetaJournal {
    /// Open (or create) the journal in `dir`: replay it, keep what is younger than `ttl`,
    /// and rewrite it with only that.
    pub fn open(dir: &Path, identity: &str, ttl: Duration) -> std::io::Result<MetaJournal> {
        let path = journal_path(dir, identity);
        let raw = match std::fs::read(&path) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        let j = MetaJournal {
            path,
            ttl,
            state: Mutex::new(State {
                file: None,
                written: 0,
                live: LruCache::unbounded(),
                live_bytes: 0,
                lists: HashMap::new(),
                lookups: HashMap::new(),
                objects: HashMap::new(),
                forgets: 0,
            }),
        };
        {
            let mut st = j.lock();
            for rec in parse(&raw) {
                j.apply(&mut st, rec);
            }
            j.keep_stale_versions_only(&mut st);
            j.rewrite(&mut st)?;
        }
        Ok(j)
    }

    /// Did the store described by `identity` answer, within `ttl`, a lookup or listing of its
    /// root, any listing, a lookup that found something, or a read (as recorded in `dir`,
    /// with no write recorded since)? Then it was reachable with these settings (endpoint,
    /// bucket, credentials) less than a TTL ago, and the mount skips its start-up request
    /// (itself a one-key listing of the root). A lookup that found nothing does not count:
    /// a missing bucket can answer a HEAD with "not found"; errors are never recorded.
    pub fn root_answered_within(dir: &Path, identity: &str, ttl: Duration) -> bool {
        let Ok(raw) = std::fs::read(journal_path(dir, identity)) else { return false };
        let mut at: Option<u64> = None;
        for rec in parse(&raw) {
            let t = match rec {
                Record::List { at: t, .. } | Record::Object { at: t, .. } => t,
                Record::Lookup { key, at: t, file, dir }
                    if key.is_empty() || file.is_some() || dir =>
                {
                    t
                }
                // Every key is below the root: any write may change its listing.
                Record::Forget { .. } => {
                    at = None;
                    continue;
                }
                Record::Lookup { .. } => continue,
            };
            at = Some(at.map_or(t, |a| a.max(t)));
        }
        let now = now_ms();
        at.is_some_and(|t| now >= t && Duration::from_millis(now - t) < ttl)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::locks::lock(&self.state)
    }

    fn fresh(&self, at: u64) -> bool {
        let now = now_ms();
        now >= at && Duration::from_millis(now - at) < self.ttl
    }

    /// Replay one record into the state (at open).
    fn apply(&self, st: &mut State, rec: Record) {
        match &rec {
            Record::List { prefix, at, files, dirs } => {
                let listing = Listing {
                    files: files.iter().map(|(n, m)| (n.clone(), m.into())).collect(),
                    dirs: dirs.clone(),
                    dir_perms: Default::default(),
                };
                st.lists.insert(prefix.clone(), (*at, listing));
                self.keep(st, Subject::List(prefix.clone()), *at, frame(&rec));
            }
            Record::Lookup { key, at, file, dir } => {
                let lookup =
                    Lookup { file: file.as_ref().map(|m| m.into()), dir: *dir, dir_perms: None };
                st.lookups.insert(key.clone(), (*at, lookup));
                self.keep(st, Subject::Lookup(key.clone()), *at, frame(&rec));
            }
            Record::Object { key, at, meta } => {
                st.objects.insert(key.clone(), (*at, meta.into()));
                self.keep(st, Subject::Object(key.clone()), *at, frame(&rec));
            }
            Record::Forget { key, subtree } => Self::drop_affected(st, key, *subtree),
        }
    }

    /// Listings and lookups past the TTL are not served again, but the versions they name
    /// are kept, as `Object` records with their times, so that cached blocks of those versions
    /// can be confirmed (revalidated) rather than fetched again.
    fn keep_stale_versions_only(&self, st: &mut State) {
        let stale_lists: Vec<String> = st
            .lists
            .iter()
            .filter(|(_, (at, _))| !self.fresh(*at))
            .map(|(p, _)| p.clone())
            .collect();
        let stale_lookups: Vec<String> = st
            .lookups
            .iter()
            .filter(|(_, (at, _))| !self.fresh(*at))
            .map(|(k, _)| k.clone())
            .collect();
        let mut versions: Vec<(String, u64, ObjectMeta)> = Vec::new();
        for prefix in stale_lists {
            let (at, listing) = st.lists.remove(&prefix).expect("listed above");
            for (name, meta) in listing.files {
                versions.push((crate::store::join_key(&prefix, &name), at, meta));
            }
            if let Some((_, e)) = st.live.pop(&Subject::List(prefix)) {
                st.live_bytes -= e.len() as u64;
            }
        }
        for key in stale_lookups {
            let (at, lookup) = st.lookups.remove(&key).expect("listed above");
            versions.extend(lookup.file.map(|meta| (key.clone(), at, meta)));
            if let Some((_, e)) = st.live.pop(&Subject::Lookup(key)) {
                st.live_bytes -= e.len() as u64;
            }
        }
        for (key, at, meta) in versions {
            let meta = match st.objects.get(&key) {
                Some((t, _)) if *t >= at => continue,
                Some((_, before)) => to_keep(before, &meta).clone(),
                None => meta,
            };
            let rec = Record::Object { key: key.clone(), at, meta: (&meta).into() };
            self.keep(st, Subject::Object(key.clone()), at, frame(&rec));
            st.objects.insert(key, (at, meta));
        }
    }

    fn keep(&self, st: &mut State, subject: Subject, at: u64, encoded: Vec<u8>) {
        let len = encoded.len() as u64;
        if let Some((_, old)) = st.live.put(subject, (at, Arc::new(encoded))) {
            st.live_bytes -= old.len() as u64;
        }
        st.live_bytes += len;
        while st.live_bytes > LIVE_BYTES {
            match st.live.pop_lru() {
                Some((_, (_, e))) => st.live_bytes -= e.len() as u64,
                None => break,
            }
        }
    }

    fn drop_affected(st: &mut State, key: &str, subtree: bool) {
        st.lists.retain(|p, _| !affected(p, key, subtree));
        st.lookups.retain(|k, _| !affected(k, key, subtree));
        st.objects.retain(|k, _| !affected(k, key, subtree));
        let gone: Vec<Subject> = if subtree {
            st.live
                .iter()
                .map(|(s, _)| s.clone())
                .filter(|s| match s {
                    Subject::List(p) | Subject::Lookup(p) | Subject::Object(p) => {
                        affected(p, key, true)
                    }
                })
                .collect()
        } else {
            // The key and its ancestors: no scan needed.
            let mut keys = vec![key.to_string()];
            let mut k = key;
            while !k.is_empty() {
                k = split_key(k).0;
                keys.push(k.to_string());
            }
            let mut gone: Vec<Subject> = keys
                .into_iter()
                .flat_map(|k| [Subject::List(k.clone()), Subject::Lookup(k)])
                .collect();
            gone.push(Subject::Object(key.to_string()));
            gone
        };
        for s in gone {
            if let Some((_, e)) = st.live.pop(&s) {
                st.live_bytes -= e.len() as u64;
            }
        }
    }

    /// Write the live records to a new journal and switch to it (stale ones too: the versions
    /// they name are revalidated, see `keep_stale_versions_only`).
    fn rewrite(&self, st: &mut State) -> std::io::Result<()> {
        let tmp = self.path.with_extension("journal.tmp");
        let mut out = Vec::with_capacity(st.live_bytes as usize);
        // Oldest first, so that a replay keeps the same LRU order.
        for (_, (_, e)) in st.live.iter().rev() {
            out.extend_from_slice(e);
        }
        std::fs::write(&tmp, &out)?;
        std::fs::rename(&tmp, &self.path)?;
        st.file = Some(OpenOptions::new().append(true).open(&self.path)?);
        st.written = out.len() as u64;
        Ok(())
    }

    /// Append one record (one write, so a crash leaves at most one torn frame at the end).
    fn append(&self, st: &mut State, encoded: &[u8]) {
        let ok = match st.file.as_mut() {
            Some(f) => f.write_all(encoded).is_ok(),
            None => false,
        };
        if !ok {
            // Without a journal the next daemon just asks the store.
            st.file = None;
            return;
        }
        st.written += encoded.len() as u64;
        if st.written > 2 * st.live_bytes + REWRITE_SLACK {
            if let Err(e) = self.rewrite(st) {
                tracing::debug!(error = %e, "disk cache: rewriting the metadata journal failed");
                st.file = None;
            }
        }
    }

    /// A listing recorded by an earlier daemon, still within the TTL.
    pub fn replayed_list(&self, prefix: &str) -> Option<Listing> {
        let st = self.lock();
        match st.lists.get(prefix) {
            Some((at, l)) if self.fresh(*at) => Some(l.clone()),
            _ => None,
        }
    }

    /// A lookup recorded by an earlier daemon (or implied by its listing of the parent),
    /// still within the TTL.
    pub fn replayed_lookup(&self, key: &str) -> Option<Lookup> {
        let st = self.lock();
        if let Some((at, l)) = st.lookups.get(key) {
            if self.fresh(*at) {
                return Some(l.clone());
            }
        }
        if key.is_empty() {
            return None;
        }
        let (parent, name) = split_key(key);
        match st.lists.get(parent) {
            Some((at, l)) if self.fresh(*at) => Some(Lookup {
                file: l.files.iter().find(|(n, _)| n == name).map(|(_, m)| m.clone()),
                dir: l.dirs.iter().any(|d| d == name),
                dir_perms: l.dir_perms.get(name).copied(),
            }),
            _ => None,
        }
    }

    /// What a HEAD of `key` would answer, from an earlier daemon's records within the TTL: its
    /// lookup or its parent's listing, else a version a read learned (an object, then).
    pub fn replayed_head(&self, key: &str) -> Option<Option<ObjectMeta>> {
        if let Some(l) = self.replayed_lookup(key) {
            return Some(l.file);
        }
        let st = self.lock();
        match st.objects.get(key) {
            Some((at, m)) if self.fresh(*at) => Some(Some(m.clone())),
            _ => None,
        }
    }

    /// Every object metadata of the replayed records, with its time (to seed the block
    /// layer's versions).
    pub fn replayed_objects(&self) -> Vec<(String, ObjectMeta, SystemTime)> {
        let st = self.lock();
        let time = |at: u64| UNIX_EPOCH + Duration::from_millis(at);
        let mut out = Vec::new();
        for (prefix, (at, l)) in &st.lists {
            for (name, m) in &l.files {
                out.push((crate::store::join_key(prefix, name), m.clone(), time(*at)));
            }
        }
        for (key, (at, l)) in &st.lookups {
            if let Some(m) = &l.file {
                out.push((key.clone(), m.clone(), time(*at)));
            }
        }
        for (key, (at, m)) in &st.objects {
            out.push((key.clone(), m.clone(), time(*at)));
        }
        // Older first, so that a newer record of the same key wins when they are applied.
        out.sort_by_key(|(_, _, t)| *t);
        out
    }

    /// A listing of `prefix`, sent when `forgets` said `since`: not recorded (false) when a
    /// write was forgotten meanwhile, as `record_lookup`: replayed, the listing would answer
    /// lookups of a key just written with its version before the write.
    pub fn record_list(&self, since: u64, prefix: &str, listing: &Listing) -> bool {
        let at = now_ms();
        let rec = Record::List {
            prefix: prefix.to_string(),
            at,
            files: listing.files.iter().map(|(n, m)| (n.clone(), m.into())).collect(),
            dirs: listing.dirs.clone(),
        };
        self.record_answer(since, Subject::List(prefix.to_string()), at, &rec)
    }

    /// How many writes were forgotten so far: taken before a lookup is sent, handed to
    /// `record_lookup`.
    pub fn forgets(&self) -> u64 {
        self.lock().forgets
    }

    /// A lookup of `key`, sent when `forgets` said `since`, answered `lookup`. Not recorded
    /// (false) when a write was forgotten meanwhile: the answer may predate it (a lookup
    /// sent before a create through the mount and answered after), and a replayed stale
    /// answer would outlive this daemon.
    pub fn record_lookup(&self, since: u64, key: &str, lookup: &Lookup) -> bool {
        let at = now_ms();
        let rec = Record::Lookup {
            key: key.to_string(),
            at,
            file: lookup.file.as_ref().map(|m| m.into()),
            dir: lookup.dir,
        };
        self.record_answer(since, Subject::Lookup(key.to_string()), at, &rec)
    }

    /// Append `rec`, the answer about `subject` (a listing or lookup) made at `at`, and keep it
    /// as the live one in place of what the journal held, unless a write was forgotten since
    /// `since` (then false: see `record_lookup`).
    fn record_answer(&self, since: u64, subject: Subject, at: u64, rec: &Record) -> bool {
        let encoded = frame(rec);
        let mut st = self.lock();
        if st.forgets != since {
            return false;
        }
        match &subject {
            Subject::List(prefix) => drop(st.lists.remove(prefix)),
            Subject::Lookup(key) => drop(st.lookups.remove(key)),
            Subject::Object(_) => {} // `record_object`'s, not an answer of this kind
        }
        self.append(&mut st, &encoded);
        self.keep(&mut st, subject, at, encoded);
        true
    }

    /// A read saw `key` at `meta` (see `Record::Object`).
    /// The same version recorded less than half a TTL ago (by this daemon, or replayed) is
    /// not written again: every read that fetches comes here, a large object's read-ahead
    /// parts included, and the next daemon gains nothing from a second copy.
    pub fn record_object(&self, key: &str, meta: &ObjectMeta) {
        let at = now_ms();
        let meta: Meta = meta.into();
        let subject = Subject::Object(key.to_string());
        if let Some((t, encoded)) = self.lock().live.peek(&subject) {
            let recent = at >= *t && Duration::from_millis(at - t) < self.ttl / 2;
            let same = || matches!(parse(encoded).first(), Some(Record::Object { meta: m, .. }) if *m == meta);
            if recent && same() {
                return;
            }
        }
        let encoded = frame(&Record::Object { key: key.to_string(), at, meta });
        let mut st = self.lock();
        st.objects.remove(key);
        self.append(&mut st, &encoded);
        self.keep(&mut st, subject, at, encoded);
    }

    /// A write to `key` (with `subtree`, a directory rename): what it may have changed is
    /// neither served nor carried to the next daemon.
    pub fn forget(&self, key: &str, subtree: bool) {
        let encoded = frame(&Record::Forget { key: key.to_string(), subtree });
        let mut st = self.lock();
        st.forgets += 1;
        Self::drop_affected(&mut st, key, subtree);
        self.append(&mut st, &encoded);
    }
}

/// How many `Object` records of `key` the journals in `dir` hold (for tests of how often
/// versions are written down).
#[cfg(test)]
pub(super) fn object_records(dir: &Path, key: &str) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with("meta-") && name.ends_with(".journal") {
            let raw = std::fs::read(&path).unwrap();
            n += parse(&raw)
                .iter()
                .filter(|r| matches!(r, Record::Object { key: k, .. } if k == key))
                .count();
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_version_is_written_once_per_half_ttl() {
        let tmp = tempfile::tempdir().unwrap();
        let j = MetaJournal::open(tmp.path(), "s3://b/p", Duration::from_secs(60)).unwrap();
        for _ in 0..5 {
            j.record_object("a/x", &meta("v1"));
        }
        assert_eq!(object_records(tmp.path(), "a/x"), 1);
        j.record_object("a/x", &meta("v2"));
        assert_eq!(object_records(tmp.path(), "a/x"), 2, "a new version is written");
        // After a write through the mount the version is written again when read.
        j.forget("a/x", false);
        j.record_object("a/x", &meta("v2"));
        assert_eq!(object_records(tmp.path(), "a/x"), 3);
        drop(j);
        // A replayed record counts as written: the next daemon does not repeat it.
        let j = MetaJournal::open(tmp.path(), "s3://b/p", Duration::from_secs(60)).unwrap();
        let before = object_records(tmp.path(), "a/x");
        j.record_object("a/x", &meta("v2"));
        assert_eq!(object_records(tmp.path(), "a/x"), before);
        // Half a TTL later it is written again, so that it lives on for the next daemon.
        let short = tempfile::tempdir().unwrap();
        let j = MetaJournal::open(short.path(), "s3://b/p", Duration::from_millis(80)).unwrap();
        j.record_object("a/x", &meta("v1"));
        tokio::time::advance(Duration::from_millis(39)).await;
        j.record_object("a/x", &meta("v1"));
        assert_eq!(object_records(short.path(), "a/x"), 1, "within half a TTL");
        tokio::time::advance(Duration::from_millis(1)).await;
        j.record_object("a/x", &meta("v1"));
        assert_eq!(object_records(short.path(), "a/x"), 2);
    }

    fn meta(v: &str) -> ObjectMeta {
        ObjectMeta {
            size: 5,
            modified: UNIX_EPOCH + Duration::from_secs(7),
            version: v.into(),
            perms: None,
        }
    }

    fn listing() -> Listing {
        Listing {
            files: vec![("f".into(), meta("v1"))],
            dirs: vec!["d".into()],
            dir_perms: Default::default(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn answers_survive_a_restart_within_the_ttl_only() {
        let tmp = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(60);
        let j = MetaJournal::open(tmp.path(), "s3://b/p", ttl).unwrap();
        j.record_list(j.forgets(), "a", &listing());
        j.record_lookup(j.forgets(), "a/x", &Lookup { file: None, dir: false, dir_perms: None });
        // This run's own answers are not served by the journal.
        assert!(j.replayed_list("a").is_none());
        drop(j);
        let j = MetaJournal::open(tmp.path(), "s3://b/p", ttl).unwrap();
        let l = j.replayed_list("a").unwrap();
        assert_eq!(l.files, listing().files);
        assert_eq!(l.dirs, vec!["d".to_string()]);
        let f = j.replayed_lookup("a/f").unwrap();
        assert_eq!(f.file.unwrap(), meta("v1"));
        assert!(!f.dir);
        assert!(j.replayed_lookup("a/d").unwrap().dir);
        let x = j.replayed_lookup("a/x").unwrap();
        assert!(x.file.is_none() && !x.dir);
        assert!(j.replayed_lookup("b/f").is_none());
        assert_eq!(j.replayed_objects().len(), 1);
        drop(j);
        // A daemon with a shorter TTL than the records' age trusts none of them.
        tokio::time::advance(Duration::from_millis(20)).await;
        let j = MetaJournal::open(tmp.path(), "s3://b/p", Duration::from_millis(20)).unwrap();
        assert!(j.replayed_list("a").is_none());
        assert!(j.replayed_lookup("a/f").is_none());
        drop(j);
        // ... and the rewrite at open dropped them for good.
        let j = MetaJournal::open(tmp.path(), "s3://b/p", ttl).unwrap();
        assert!(j.replayed_list("a").is_none());
    }

    #[test]
    fn writes_forget_the_key_its_ancestors_and_with_a_rename_the_subtree() {
        let tmp = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(60);
        let j = MetaJournal::open(tmp.path(), "s3://b/p", ttl).unwrap();
        for p in ["", "a", "a/b", "a/b/c", "ab", "z"] {
            j.record_list(j.forgets(), p, &listing());
            j.record_lookup(j.forgets(), p, &Lookup { file: None, dir: true, dir_perms: None });
        }
        j.forget("a/b/k", false);
        drop(j);
        let j = MetaJournal::open(tmp.path(), "s3://b/p", ttl).unwrap();
        for gone in ["", "a", "a/b"] {
            assert!(j.replayed_list(gone).is_none(), "{gone:?}");
        }
        for kept in ["a/b/c", "ab", "z"] {
            assert!(j.replayed_list(kept).is_some(), "{kept:?}");
            assert!(j.replayed_lookup(kept).is_some(), "{kept:?}");
        }
        // Forgotten in this run and across the next restart.
        j.forget("a", true);
        assert!(j.replayed_list("a/b/c").is_none());
        assert!(j.replayed_list("ab").is_some());
        drop(j);
        let j = MetaJournal::open(tmp.path(), "s3://b/p", ttl).unwrap();
        assert!(j.replayed_list("a/b/c").is_none());
        assert!(j.replayed_lookup("a/b/c").is_none());
        assert!(j.replayed_list("ab").is_some());
        assert!(j.replayed_list("z").is_some());
    }

    /// A lookup sent before a write through the mount and answered after it (a background
    /// fetch of a `*.zarr` node's documents racing its creation) is not carried to the next
    /// daemon: its "absent" would hide the new object there.
    #[test]
    fn a_lookup_answered_across_a_write_is_not_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(60);
        let j = MetaJournal::open(tmp.path(), "s3://b/p", ttl).unwrap();
        let since = j.forgets();
        j.forget("n.zarr/zarr.json", false);
        assert!(!j.record_lookup(
            since,
            "n.zarr/zarr.json",
            &Lookup { file: None, dir: false, dir_perms: None }
        ));
        assert!(j.record_lookup(
            j.forgets(),
            "n.zarr/.zattrs",
            &Lookup { file: None, dir: false, dir_perms: None }
        ));
        drop(j);
        let j = MetaJournal::open(tmp.path(), "s3://b/p", ttl).unwrap();
        assert!(j.replayed_lookup("n.zarr/zarr.json").is_none());
        assert!(j.replayed_lookup("n.zarr/.zattrs").is_some(), "one sent after the write is kept");
    }

    #[test]
    fn each_store_has_its_own_journal_and_the_root_vouches() {
        let tmp = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(60);
        let j = MetaJournal::open(tmp.path(), "s3://b/p", ttl).unwrap();
        j.record_lookup(
            j.forgets(),
            "a/missing",
            &Lookup { file: None, dir: false, dir_perms: None },
        );
        assert!(
            !MetaJournal::root_answered_within(tmp.path(), "s3://b/p", ttl),
            "not found proves nothing (a missing bucket answers so too)"
        );
        j.record_list(j.forgets(), "a", &listing());
        j.record_list(j.forgets(), "", &listing());
        drop(j);
        assert!(MetaJournal::root_answered_within(tmp.path(), "s3://b/p", ttl));
        assert!(!MetaJournal::root_answered_within(tmp.path(), "s3://b/q", ttl));
        assert!(!MetaJournal::root_answered_within(tmp.path(), "s3://b/p", Duration::ZERO));
        let other = MetaJournal::open(tmp.path(), "s3://b/q", ttl).unwrap();
        assert!(other.replayed_list("a").is_none());
        let j = MetaJournal::open(tmp.path(), "s3://b/p", ttl).unwrap();
        assert!(j.replayed_list("a").is_some());
        j.forget("x", false); // a write anywhere changes the root's listing
        assert!(!MetaJournal::root_answered_within(tmp.path(), "s3://b/p", ttl));
        // Below the root: a listing, a lookup that found something or a read vouches too
        // (the zarr-python warm remount reads `zarr.json` and shards, and lists nothing).
        let records: [fn(&MetaJournal); 4] = [
            |j| assert!(j.record_list(j.forgets(), "a", &listing())),
            |j| {
                assert!(j.record_lookup(
                    j.forgets(),
                    "a/f",
                    &Lookup { file: Some(meta("v")), dir: false, dir_perms: None }
                ))
            },
            |j| {
                assert!(j.record_lookup(
                    j.forgets(),
                    "a/d",
                    &Lookup { file: None, dir: true, dir_perms: None }
                ))
            },
            |j| j.record_object("a/o", &meta("v")),
        ];
        for (i, record) in records.iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let j = MetaJournal::open(dir.path(), "s3://b/p", ttl).unwrap();
            record(&j);
            drop(j);
            assert!(MetaJournal::root_answered_within(dir.path(), "s3://b/p", ttl), "record {i}");
            assert!(!MetaJournal::root_answered_within(dir.path(), "s3://b/p", Duration::ZERO));
        }
    }

    #[test]
    fn a_torn_or_damaged_tail_is_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(60);
        let j = MetaJournal::open(tmp.path(), "s3://b/p", ttl).unwrap();
        j.record_list(j.forgets(), "a", &listing());
        j.record_list(j.forgets(), "b", &listing());
        drop(j);
        let path = journal_path(tmp.path(), "s3://b/p");
        let raw = std::fs::read(&path).unwrap();
        // Every cut keeps "a" whole or drops it; "b", cut, is never served.
        let first = 8 + u32::from_le_bytes(raw[..4].try_into().unwrap()) as usize;
        for cut in [raw.len() - 1, first + 5, first, first - 1, 3] {
            std::fs::write(&path, &raw[..cut]).unwrap();
            let j = MetaJournal::open(tmp.path(), "s3://b/p", ttl).unwrap();
            assert_eq!(j.replayed_list("a").is_some(), cut >= first, "cut {cut}");
            assert!(j.replayed_list("b").is_none(), "cut {cut}");
        }
        // A flipped byte in the first frame: nothing after it counts either.
        let mut bad = raw.clone();
        bad[10] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let j = MetaJournal::open(tmp.path(), "s3://b/p", ttl).unwrap();
        assert!(j.replayed_list("a").is_none() && j.replayed_list("b").is_none());
    }

    #[test]
    fn the_journal_is_rewritten_when_it_grows() {
        let tmp = tempfile::tempdir().unwrap();
        let j = MetaJournal::open(tmp.path(), "s3://b/p", Duration::from_secs(60)).unwrap();
        let big = Listing {
            files: (0..2000).map(|i| (format!("file-{i}"), meta("v"))).collect(),
            dirs: vec![],
            dir_perms: Default::default(),
        };
        for _ in 0..200 {
            j.record_list(j.forgets(), "same", &big);
        }
        let len = std::fs::metadata(journal_path(tmp.path(), "s3://b/p")).unwrap().len();
        assert!(len < 3 * frame_len(&big) + REWRITE_SLACK, "{len}");
        drop(j);
        let j = MetaJournal::open(tmp.path(), "s3://b/p", Duration::from_secs(60)).unwrap();
        assert_eq!(j.replayed_list("same").unwrap().files.len(), 2000);
    }

    fn frame_len(l: &Listing) -> u64 {
        let rec = Record::List {
            prefix: "same".into(),
            at: 0,
            files: l.files.iter().map(|(n, m)| (n.clone(), m.into())).collect(),
            dirs: vec![],
        };
        frame(&rec).len() as u64
    }
}
