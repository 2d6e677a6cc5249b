//! An in-memory store: keys in a sorted map, directories implied by key prefixes.
//! Used by tests of the layers above, and as the model the other backends are checked against.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::{
    validate_key, ByteRange, Listing, Lookup, ObjectMeta, PutMode, StoreError, StoreResult,
};
use crate::store::{ListStore, ReadStore, StoreHints, WriteStore};

#[derive(Default)]
pub struct MemoryStore {
    objects: Mutex<BTreeMap<String, (Bytes, ObjectMeta)>>,
    generation: std::sync::atomic::AtomicU64,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn meta_for(&self, data: &Bytes) -> ObjectMeta {
        let g = self.generation.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ObjectMeta {
            size: data.len() as u64,
            modified: SystemTime::now(),
            version: format!("m{g}"),
            perms: None,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, (Bytes, ObjectMeta)>) -> T) -> T {
        f(&mut crate::locks::lock(&self.objects))
    }
}

/// The part of `key` one level below `prefix`, and whether more levels follow.
fn child_of<'a>(prefix: &str, key: &'a str) -> Option<(&'a str, bool)> {
    let rest = if prefix.is_empty() { key } else { key.strip_prefix(prefix)?.strip_prefix('/')? };
    Some(match rest.find('/') {
        Some(i) => (&rest[..i], true),
        None => (rest, false),
    })
}

impl StoreHints for MemoryStore {
    fn describe(&self) -> String {
        "memory".into()
    }

    fn has_real_dirs(&self) -> bool {
        false
    }
}

#[async_trait]
impl ReadStore for MemoryStore {
    async fn get(&self, key: &str) -> StoreResult<Bytes> {
        self.with(|m| {
            m.get(key).map(|(b, _)| b.clone()).ok_or_else(|| StoreError::NotFound(key.into()))
        })
    }

    async fn get_range(&self, key: &str, range: std::ops::Range<u64>) -> StoreResult<Bytes> {
        let data = self.get(key).await?;
        let r = ByteRange::Range(range).clip(data.len() as u64);
        Ok(data.slice(r.start as usize..r.end as usize))
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        Ok(self.with(|m| m.get(key).map(|(_, meta)| meta.clone())))
    }

    /// Bytes and version from one look at the map, so they always belong together.
    async fn get_ranged(
        &self,
        key: &str,
        range: ByteRange,
    ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
        Ok(self.with(|m| {
            m.get(key).map(|(b, meta)| {
                let r = range.clip(b.len() as u64);
                (b.slice(r.start as usize..r.end as usize), meta.clone())
            })
        }))
    }
}

#[async_trait]
impl ListStore for MemoryStore {
    async fn list(&self, prefix: &str) -> StoreResult<Listing> {
        let mut listing = Listing::default();
        self.with(|m| {
            for (key, (_, meta)) in m.range(prefix.to_string()..) {
                if !prefix.is_empty() && !key.starts_with(prefix) {
                    break;
                }
                match child_of(prefix, key) {
                    Some((name, true)) if listing.dirs.last().map(String::as_str) != Some(name) => {
                        listing.dirs.push(name.to_string());
                    }
                    Some((_, true)) => {}
                    Some((name, false)) if !name.is_empty() => {
                        listing.files.push((name.to_string(), meta.clone()))
                    }
                    _ => {}
                }
            }
        });
        listing.dirs.dedup();
        Ok(listing)
    }

    async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
        let file = self.head(key).await?;
        let dir_prefix = format!("{key}/");
        let dir = key.is_empty()
            || self.with(|m| {
                m.range(dir_prefix.clone()..)
                    .next()
                    .is_some_and(|(k, _)| k.starts_with(&dir_prefix))
            });
        Ok(Lookup { file, dir, dir_perms: None })
    }
}

#[async_trait]
impl WriteStore for MemoryStore {
    /// The condition is checked and the object replaced under one lock of the map.
    async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
        validate_key(key)?;
        let meta = self.meta_for(&data);
        self.with(|m| {
            match (&mode, m.get(key)) {
                (PutMode::Overwrite, _) | (PutMode::Create, None) => {}
                (PutMode::Create, Some(_)) => return Err(StoreError::AlreadyExists(key.into())),
                (PutMode::Update(v), Some((_, cur))) if cur.version == *v => {}
                (PutMode::Update(_), _) => return Err(StoreError::Conflict(key.into())),
            }
            m.insert(key.to_string(), (data, meta));
            Ok(())
        })
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.with(|m| m.remove(key)).map(|_| ()).ok_or_else(|| StoreError::NotFound(key.into()))
    }

    async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
        self.with(|m| match m.get(key) {
            None => Err(StoreError::NotFound(key.into())),
            Some((_, cur)) if cur.version != version => Err(StoreError::Conflict(key.into())),
            Some(_) => {
                m.remove(key);
                Ok(())
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lists_one_level_with_implicit_dirs() {
        let s = MemoryStore::new();
        for k in ["a/zarr.json", "a/c/0/0", "a/c/0/1", "a/c/1/0", "b", "a.txt"] {
            s.put(k, Bytes::from_static(b"x")).await.unwrap();
        }
        let root = s.list("").await.unwrap();
        assert_eq!(root.dirs, vec!["a"]);
        assert_eq!(root.files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), vec!["a.txt", "b"]);
        let a = s.list("a").await.unwrap();
        assert_eq!(a.dirs, vec!["c"]);
        assert_eq!(a.files.len(), 1);
        assert_eq!(s.list("a/c").await.unwrap().dirs, vec!["0", "1"]);
        assert!(s.lookup("a/c").await.unwrap().dir);
        assert!(!s.lookup("a/zarr.json").await.unwrap().dir);
        assert!(s.lookup("a/zarr.json").await.unwrap().file.is_some());
        assert!(!s.lookup("a/x").await.unwrap().dir);
    }
}
