//! Conditional puts and deletes (`PutMode`, `delete_if_version`), checked the same way on every
//! writable backend and through every wrapper: a wrapper that turned a conditional put into an
//! overwrite fails here.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::backends::local::LocalStore;
use super::backends::memory::MemoryStore;
use super::backends::object::ObjectStoreBackend;
use super::layers::cache::{CacheConfig, CachingStore};
use super::layers::fault::{FaultPlan, FaultStore};
use super::layers::recording::RecordingStore;
use super::prelude::*;
use super::{PutMode, StoreError};

fn b(s: &'static str) -> Bytes {
    Bytes::from_static(s.as_bytes())
}

async fn content(s: &dyn Store, key: &str) -> Option<Bytes> {
    s.get_versioned(key).await.unwrap().map(|(data, _)| data)
}

/// The contract, one step at a time.
async fn check_modes(s: &dyn Store) {
    let key = "d/sub/k";
    s.put_opts(key, b("one"), PutMode::Create).await.unwrap();
    let err = s.put_opts(key, b("two"), PutMode::Create).await.unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists(_)), "create over an object: {err:?}");
    assert_eq!(content(s, key).await.unwrap(), b("one"), "a refused create wrote");

    let (_, v1) = s.get_versioned(key).await.unwrap().unwrap();
    s.put_opts(key, b("three"), PutMode::Update(v1.version.clone())).await.unwrap();
    let err = s.put_opts(key, b("four"), PutMode::Update(v1.version.clone())).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "update of an old version: {err:?}");
    assert_eq!(content(s, key).await.unwrap(), b("three"), "a refused update wrote");
    let err = s.put_opts("d/none", b("x"), PutMode::Update(v1.version.clone())).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "update of a missing key: {err:?}");
    assert!(content(s, "d/none").await.is_none());

    let (_, v3) = s.get_versioned(key).await.unwrap().unwrap();
    assert_ne!(v1.version, v3.version);
    let err = s.delete_if_version(key, &v1.version).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)), "delete of an old version: {err:?}");
    assert_eq!(content(s, key).await.unwrap(), b("three"));
    s.delete_if_version(key, &v3.version).await.unwrap();
    assert!(content(s, key).await.is_none());
    let err = s.delete_if_version(key, &v3.version).await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "delete of a missing key: {err:?}");

    // Plain overwrites still replace, and the version moves on.
    s.put(key, b("five")).await.unwrap();
    s.put(key, b("six")).await.unwrap();
    assert_eq!(content(s, key).await.unwrap(), b("six"));
}

/// Racing creators of one key: exactly one wins. Racing read-modify-write incrementers with
/// update-if-version and retries: no increment is lost. `stores` are several handles on one
/// backing store (two daemons, as far as the store can tell).
async fn check_races(stores: Vec<Arc<dyn Store>>) {
    let mut tasks = Vec::new();
    for i in 0..16 {
        let s = stores[i % stores.len()].clone();
        tasks.push(tokio::spawn(async move {
            s.put_opts("race/once", Bytes::from(format!("{i}")), PutMode::Create).await
        }));
    }
    let mut wins = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(()) => wins += 1,
            Err(StoreError::AlreadyExists(_)) => {}
            Err(e) => panic!("racing create: {e:?}"),
        }
    }
    assert_eq!(wins, 1, "racing creates of one key");

    const WRITERS: usize = 6;
    const EACH: usize = 15;
    stores[0].put("race/counter", b("0")).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..WRITERS {
        let s = stores[i % stores.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0;
            for _ in 0..EACH {
                loop {
                    let (data, meta) = s.get_versioned("race/counter").await.unwrap().unwrap();
                    let n: usize = std::str::from_utf8(&data).unwrap().parse().unwrap();
                    let next = Bytes::from((n + 1).to_string());
                    match s.put_opts("race/counter", next, PutMode::Update(meta.version)).await {
                        Ok(()) => break,
                        Err(StoreError::Conflict(_)) => conflicts += 1,
                        Err(e) => panic!("update: {e:?}"),
                    }
                    tokio::task::yield_now().await;
                }
            }
            conflicts
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let data = content(&*stores[0], "race/counter").await.unwrap();
    assert_eq!(std::str::from_utf8(&data).unwrap(), (WRITERS * EACH).to_string(), "lost updates");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store() {
    check_modes(&MemoryStore::new()).await;
    let m: Arc<dyn Store> = Arc::new(MemoryStore::new());
    check_races(vec![m.clone(), m]).await;
}

/// Two `LocalStore`s on one directory stand for two daemons: each has its own descriptors, so
/// their `flock`s exclude each other as another process's would.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_store_across_two_handles() {
    let tmp = tempfile::tempdir().unwrap();
    check_modes(&LocalStore::open(tmp.path()).unwrap()).await;
    let one: Arc<dyn Store> = Arc::new(LocalStore::open(tmp.path()).unwrap());
    let two: Arc<dyn Store> = Arc::new(LocalStore::open(tmp.path()).unwrap());
    check_races(vec![one, two]).await;
    // No temp file is left behind by refused creates and updates.
    let left: Vec<_> = std::fs::read_dir(tmp.path().join("race"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left.len(), 2, "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn object_store_backend() {
    let mem = Arc::new(object_store::memory::InMemory::new());
    check_modes(&ObjectStoreBackend::new(mem.clone(), "pre", "mem".into())).await;
    let one: Arc<dyn Store> = Arc::new(ObjectStoreBackend::new(mem.clone(), "pre", "a".into()));
    let two: Arc<dyn Store> = Arc::new(ObjectStoreBackend::new(mem, "pre", "b".into()));
    check_races(vec![one, two]).await;
}

/// Each wrapper passes the mode through: over a memory store, a create of an existing key
/// must still be refused, an update of an old version too, and a stale delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wrappers_forward_modes() {
    let cache =
        CacheConfig { capacity: 1 << 20, object_limit: 1 << 16, ttl: Duration::from_secs(60) };
    type Wrap = Box<dyn Fn(Arc<dyn Store>) -> Arc<dyn Store>>;
    let wrappers: Vec<(&str, Wrap)> = vec![
        ("cache", Box::new(move |s| CachingStore::new(s, cache))),
        ("fault", Box::new(|s| Arc::new(FaultStore::new(s, FaultPlan::new())))),
        ("recording", Box::new(|s| Arc::new(RecordingStore::new(s)))),
    ];
    for (name, wrap) in wrappers {
        eprintln!("wrapper: {name}");
        let inner = Arc::new(MemoryStore::new());
        let s = wrap(inner.clone());
        check_modes(&*s).await;
        // Two wrapped handles on one store (a cache each: two daemons' caches).
        check_races(vec![wrap(inner.clone()), wrap(inner)]).await;
    }
}

/// A cache that holds an old copy must not make a writer conflict forever: a refused update
/// drops the cached copy, so the writer's next read sees the current version.
#[tokio::test]
async fn a_stale_cached_copy_costs_one_conflict() {
    let inner = Arc::new(MemoryStore::new());
    let cache =
        CacheConfig { capacity: 1 << 20, object_limit: 1 << 16, ttl: Duration::from_secs(600) };
    let s = CachingStore::new(inner.clone(), cache);
    s.put("k", b("old")).await.unwrap();
    let (_, v) = s.get_versioned("k").await.unwrap().unwrap(); // cached now
    inner.put("k", b("changed by another daemon")).await.unwrap();
    let (_, stale) = s.get_versioned("k").await.unwrap().unwrap();
    assert_eq!(stale.version, v.version, "the cache was expected to serve its copy");
    let err = s.put_opts("k", b("new"), PutMode::Update(stale.version)).await.unwrap_err();
    assert!(matches!(err, StoreError::Conflict(_)));
    let (data, fresh) = s.get_versioned("k").await.unwrap().unwrap();
    assert_eq!(data, b("changed by another daemon"));
    s.put_opts("k", b("new"), PutMode::Update(fresh.version)).await.unwrap();
    assert_eq!(inner.get("k").await.unwrap(), b("new"));
}
