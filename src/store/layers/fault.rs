//! A store adapter that injects failures and latency, for tests of how the layers above behave
//! when a backend misbehaves (EIO on one file only, a failed write keeping the old content,
//! caches that must not keep errors). What goes wrong is decided by a `FaultPlan` that the test
//! keeps a handle to and changes while the filesystem runs.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::{
    ByteRange, EntryPages, ListPages, Listing, Lookup, MetaWanted, ObjectMeta, PutMode, Store,
    StoreError, StoreResult,
};

/// The kinds of store requests a rule can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// get, get_range, get_ranged
    Read,
    /// head, lookup
    Stat,
    List,
    Put,
    Delete,
    /// rename, rename_dir
    Rename,
    /// create_dir, remove_dir
    Dir,
}

/// The error a failing request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// A generic backend failure (EIO).
    Backend,
    NoSpace,
    Timeout,
    PermissionDenied,
}

impl Fault {
    fn error(self, key: &str) -> StoreError {
        match self {
            Fault::Backend => {
                StoreError::Backend { key: key.to_string(), message: "injected fault".into() }
            }
            Fault::NoSpace => StoreError::NoSpace,
            Fault::Timeout => StoreError::Timeout(format!("injected timeout on {key}")),
            Fault::PermissionDenied => StoreError::PermissionDenied(key.to_string()),
        }
    }
}

/// One rule: requests of `ops` (all kinds when empty) on keys containing `key_contains`
/// wait `delay`, then fail with `fault` (if set) while `remaining` lasts (`None` = forever).
#[derive(Debug, Clone)]
struct Rule {
    ops: Vec<Op>,
    key_contains: Option<String>,
    fault: Option<Fault>,
    delay: Duration,
    remaining: Option<u64>,
}

impl Rule {
    fn matches(&self, op: Op, key: &str) -> bool {
        (self.ops.is_empty() || self.ops.contains(&op))
            && self.key_contains.as_deref().is_none_or(|k| key.contains(k))
            && self.remaining != Some(0)
    }
}

/// What goes wrong, shared between a test and the `FaultStore`s built on it.
#[derive(Default)]
pub struct FaultPlan {
    rules: Mutex<Vec<Rule>>,
    injected: AtomicU64,
}

impl FaultPlan {
    pub fn new() -> Arc<FaultPlan> {
        Arc::new(FaultPlan::default())
    }

    fn add(&self, rule: Rule) {
        crate::locks::lock(&self.rules).push(rule);
    }

    /// The next `n` requests of kind `op` fail with `fault`.
    pub fn fail_next(&self, op: Op, n: u64, fault: Fault) {
        self.add(Rule {
            ops: vec![op],
            key_contains: None,
            fault: Some(fault),
            delay: Duration::ZERO,
            remaining: Some(n),
        });
    }

    /// Every request of the given kinds (all kinds when `ops` is empty) on a key containing
    /// `key_part` fails with `fault`, until `clear`.
    pub fn fail_matching(&self, ops: &[Op], key_part: &str, fault: Fault) {
        self.add(Rule {
            ops: ops.to_vec(),
            key_contains: Some(key_part.to_string()),
            fault: Some(fault),
            delay: Duration::ZERO,
            remaining: None,
        });
    }

    /// Every request of the given kinds (all kinds when empty) waits `delay` first, until `clear`.
    pub fn delay(&self, ops: &[Op], delay: Duration) {
        self.add(Rule {
            ops: ops.to_vec(),
            key_contains: None,
            fault: None,
            delay,
            remaining: None,
        });
    }

    /// Stop injecting anything.
    pub fn clear(&self) {
        crate::locks::lock(&self.rules).clear();
    }

    /// How many requests were failed so far (lets a test prove its faults were hit).
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    /// The delay and the fault (if any) for one request; counts down `fail_next` rules.
    fn decide(&self, op: Op, key: &str) -> (Duration, Option<Fault>) {
        let mut rules = crate::locks::lock(&self.rules);
        let mut delay = Duration::ZERO;
        let mut fault = None;
        for rule in rules.iter_mut().filter(|r| r.matches(op, key)) {
            delay += rule.delay;
            if fault.is_none() && rule.fault.is_some() {
                fault = rule.fault;
                if let Some(n) = rule.remaining.as_mut() {
                    *n -= 1;
                }
            }
        }
        if fault.is_some() {
            self.injected.fetch_add(1, Ordering::SeqCst);
        }
        (delay, fault)
    }
}

pub struct FaultStore {
    inner: Arc<dyn Store>,
    plan: Arc<FaultPlan>,
}

impl FaultStore {
    pub fn new(inner: Arc<dyn Store>, plan: Arc<FaultPlan>) -> Self {
        FaultStore { inner, plan }
    }

    /// Apply the plan to one request: wait, then fail or let it through.
    async fn gate(&self, op: Op, key: &str) -> StoreResult<()> {
        let (delay, fault) = self.plan.decide(op, key);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        match fault {
            Some(f) => Err(f.error(key)),
            None => Ok(()),
        }
    }

    /// A rename is planned for under both of its keys.
    async fn gate_rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.gate(Op::Rename, from).await?;
        self.gate(Op::Rename, to).await
    }
}

/// A listing that first passes the gate: a refused gate is the listing's one page, an error;
/// otherwise the inner listing, opened only then. Serves both page types.
fn gated_pages<'a, P: Send + 'a>(
    gate: impl std::future::Future<Output = StoreResult<()>> + Send + 'a,
    open: impl FnOnce() -> futures::stream::BoxStream<'a, StoreResult<P>> + Send + 'a,
) -> futures::stream::BoxStream<'a, StoreResult<P>> {
    use futures::stream::{once, BoxStream, StreamExt};
    let pages = async move {
        let pages: BoxStream<'a, StoreResult<P>> = match gate.await {
            Ok(()) => open(),
            Err(e) => Box::pin(once(async { Err(e) })),
        };
        pages
    };
    Box::pin(once(pages).flatten())
}

crate::store::layers::layer_over!(FaultStore);

#[async_trait]
impl crate::store::layers::ReadLayer for FaultStore {
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.gate(Op::Read, key).await?;
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
        self.gate(Op::Read, key).await?;
        self.inner.get_range(key, range).await
    }
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        self.gate(Op::Read, key).await?;
        self.inner.get_ranged(key, range).await
    }
    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.gate(Op::Stat, key).await?;
        self.inner.head(key).await
    }
}

#[async_trait]
impl crate::store::layers::ListLayer for FaultStore {
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        self.gate(Op::List, prefix).await?;
        self.inner.list(prefix).await
    }
    /// The plan applies once, before the first page.
    fn list_pages<'a>(&'a self, prefix: &'a str) -> ListPages<'a> {
        gated_pages(self.gate(Op::List, prefix), move || self.inner.list_pages(prefix))
    }
    /// As `list_pages`.
    fn list_entry_pages<'a>(&'a self, prefix: &'a str, wanted: MetaWanted) -> EntryPages<'a> {
        gated_pages(self.gate(Op::List, prefix), move || {
            self.inner.list_entry_pages(prefix, wanted)
        })
    }
    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        self.gate(Op::Stat, key).await?;
        self.inner.lookup(key).await
    }
    async fn lookup_reading(&self, key: &str, limit: u64) -> StoreResult<(Lookup, Option<Bytes>)> {
        self.gate(Op::Stat, key).await?;
        self.inner.lookup_reading(key, limit).await
    }
}

#[async_trait]
impl crate::store::layers::WriteLayer for FaultStore {
    async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        self.gate(Op::Put, key).await?;
        self.inner.put_opts(key, data, mode).await
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.gate(Op::Delete, key).await?;
        self.inner.delete(key).await
    }
    async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
        self.gate(Op::Delete, key).await?;
        self.inner.delete_if_version(key, version).await
    }
    async fn rename(&self, from: &str, to: &str) -> StoreResult<()> {
        self.gate_rename(from, to).await?;
        self.inner.rename(from, to).await
    }
    async fn create_dir(&self, key: &str) -> StoreResult<()> {
        self.gate(Op::Dir, key).await?;
        self.inner.create_dir(key).await
    }
    async fn remove_dir(&self, key: &str) -> StoreResult<()> {
        self.gate(Op::Dir, key).await?;
        self.inner.remove_dir(key).await
    }
    async fn rename_dir(&self, from: &str, to: &str) -> StoreResult<()> {
        self.gate_rename(from, to).await?;
        self.inner.rename_dir(from, to).await
    }
}

impl crate::store::layers::HintsLayer for FaultStore {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::prelude::*;

    #[tokio::test]
    async fn rules_count_down_match_keys_and_clear() {
        let plan = FaultPlan::new();
        let s = FaultStore::new(Arc::new(MemoryStore::new()), plan.clone());
        s.put("a/x", Bytes::from_static(b"1")).await.unwrap();
        plan.fail_next(Op::Read, 2, Fault::Timeout);
        assert!(matches!(s.get("a/x").await, Err(StoreError::Timeout(_))));
        assert!(matches!(s.get("a/x").await, Err(StoreError::Timeout(_))));
        assert_eq!(s.get("a/x").await.unwrap(), Bytes::from_static(b"1"), "only the next two fail");
        assert!(s.head("a/x").await.unwrap().is_some(), "other kinds are untouched");

        plan.fail_matching(&[], "a/", Fault::NoSpace);
        assert!(matches!(s.put("a/y", Bytes::new()).await, Err(StoreError::NoSpace)));
        assert!(s.list("a").await.is_ok(), "the prefix 'a' does not contain 'a/'");
        s.put("b", Bytes::new()).await.unwrap();
        assert_eq!(plan.injected(), 3);
        plan.clear();
        s.put("a/y", Bytes::new()).await.unwrap();
        assert_eq!(plan.injected(), 3);
    }
}
