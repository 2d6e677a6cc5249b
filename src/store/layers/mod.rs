//! Store wrappers (metering, caches, test doubles) as layers over another store.
//!
//! A wrapper implements `Layer` (the store below) and the layer twin of each capability
//! (`ReadLayer`, `ListLayer`, `WriteLayer`, `HintsLayer`), writing only the operations it
//! changes; everything else goes to the store below, never to a backend's default (a
//! forgotten forward once made `check_key` accept names the backend refused). How the
//! forwarding is declared: `crate::store::capability`.
//!
//! Name the layer twins by path (`layers::ReadLayer`) rather than importing them beside the
//! capabilities: a type with both in scope has two `get`s and every call is ambiguous.

pub mod cache;
pub mod disk_cache;
mod disk_meta;
#[cfg(any(test, feature = "test-doubles"))]
pub mod fault;
mod filling;
mod known_objects;
mod listing_flights;
pub mod metered;
#[cfg(any(test, feature = "test-doubles"))]
pub mod recording;
mod write_watch;

pub use crate::store::{HintsLayer, ListLayer, ReadLayer, WriteLayer};

/// A store over another store.
pub trait Layer: Send + Sync + 'static {
    /// What is below: `dyn Store` for a wrapper, a backend's type for `ReadOnly`.
    type Below: ?Sized + Send + Sync;
    fn inner(&self) -> &Self::Below;
}

/// `Layer` for a wrapper holding the store below as an `Arc<dyn Store>` in its field `inner`,
/// or in the field path given (`layer_over!(DiskCache, 0.inner)`).
macro_rules! layer_over {
    ($t:ty) => {
        $crate::store::layers::layer_over!($t, inner);
    };
    ($t:ty, $($field:tt).+) => {
        impl $crate::store::layers::Layer for $t {
            type Below = dyn $crate::store::Store;
            fn inner(&self) -> &dyn $crate::store::Store {
                &*self.$($field).+
            }
        }
    };
}
pub(crate) use layer_over;

/// What a write through a caching layer changes: objects by key, or whole trees by prefix.
pub enum Changes<'a> {
    Keys(&'a [&'a str]),
    Trees(&'a [&'a str]),
}

/// A caching layer's write: `write` (to the store below) sent with what the layer holds of
/// `changes` forgotten before and after it (`forget_key`, `forget_tree`), so that whatever its
/// outcome (a lost condition included) the next read asks the store below again.
pub async fn forgetting<T>(
    changes: Changes<'_>,
    forget_key: impl Fn(&str),
    forget_tree: impl Fn(&str),
    write: impl std::future::Future<Output = T>,
) -> T {
    let forget = || match changes {
        Changes::Keys(keys) => keys.iter().for_each(|k| forget_key(k)),
        Changes::Trees(prefixes) => prefixes.iter().for_each(|p| forget_tree(p)),
    };
    forget();
    let r = write.await;
    forget();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::backends::memory::MemoryStore;
    use crate::store::{
        ListStore, Listing, Lookup, ObjectMeta, PutMode, ReadStore, Store, StoreError, StoreHints,
        StoreResult, WriteStore,
    };
    use async_trait::async_trait;
    use bytes::Bytes;
    use std::ops::Range;
    use std::sync::Arc;

    /// A backend whose hints differ from `Store`'s defaults, so a call that fell back to a
    /// default instead of reaching it would be seen.
    struct Particular(MemoryStore);

    impl StoreHints for Particular {
        fn describe(&self) -> String {
            "particular".into()
        }
        fn has_real_dirs(&self) -> bool {
            true
        }
        fn capacity(&self) -> Option<(u64, u64)> {
            Some((7, 3))
        }
        fn check_key(&self, key: &str) -> StoreResult<()> {
            Err(StoreError::InvalidKey(key.into(), "particular"))
        }
        fn whole_object_limit(&self) -> u64 {
            42
        }
    }

    #[async_trait]
    impl ReadStore for Particular {
        async fn get(&self, key: &str) -> StoreResult<Bytes> {
            self.0.get(key).await
        }
        async fn get_range(&self, key: &str, range: Range<u64>) -> StoreResult<Bytes> {
            self.0.get_range(key, range).await
        }
        async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
            self.0.head(key).await
        }
    }

    #[async_trait]
    impl ListStore for Particular {
        async fn list(&self, prefix: &str) -> StoreResult<Listing> {
            self.0.list(prefix).await
        }
        async fn lookup(&self, key: &str) -> StoreResult<Lookup> {
            self.0.lookup(key).await
        }
    }

    #[async_trait]
    impl WriteStore for Particular {
        async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
            self.0.put_opts(key, data, mode).await
        }
        async fn delete(&self, key: &str) -> StoreResult<()> {
            self.0.delete(key).await
        }
        async fn delete_if_version(&self, key: &str, version: &str) -> StoreResult<()> {
            self.0.delete_if_version(key, version).await
        }
        async fn rename_dir(&self, _from: &str, _to: &str) -> StoreResult<()> {
            Err(StoreError::NoSpace)
        }
        async fn create_dir(&self, key: &str) -> StoreResult<()> {
            Err(StoreError::AlreadyExists(key.into()))
        }
    }

    /// A layer that writes nothing of its own.
    struct Plain(Arc<dyn Store>);

    impl Layer for Plain {
        type Below = dyn Store;
        fn inner(&self) -> &dyn Store {
            &*self.0
        }
    }
    impl ReadLayer for Plain {}
    impl ListLayer for Plain {}
    impl WriteLayer for Plain {}
    impl HintsLayer for Plain {}

    #[tokio::test]
    async fn a_layer_forwards_what_it_does_not_write() {
        let s: Arc<dyn Store> =
            Arc::new(Plain(Arc::new(Plain(Arc::new(Particular(MemoryStore::new()))))));
        assert_eq!(s.describe(), "particular");
        assert!(s.has_real_dirs());
        assert_eq!(s.capacity(), Some((7, 3)));
        assert_eq!(s.whole_object_limit(), 42);
        assert!(matches!(s.check_key("k"), Err(StoreError::InvalidKey(_, "particular"))));
        assert!(matches!(s.create_dir("d").await, Err(StoreError::AlreadyExists(_))));
        assert!(matches!(s.rename_dir("a", "b").await, Err(StoreError::NoSpace)));
        s.put("k", Bytes::from_static(b"v")).await.unwrap();
        assert_eq!(s.get_versioned("k").await.unwrap().unwrap().0.as_ref(), b"v");
        s.rename("k", "j").await.unwrap();
        assert_eq!(s.get("j").await.unwrap().as_ref(), b"v");
    }

    /// A layer that changes reads, listings and puts only through their primitive operations.
    struct Upper(Arc<dyn Store>);

    impl Layer for Upper {
        type Below = dyn Store;
        fn inner(&self) -> &dyn Store {
            &*self.0
        }
    }
    #[async_trait]
    impl ReadLayer for Upper {
        async fn get_ranged(
            &self,
            key: &str,
            range: crate::store::ByteRange,
        ) -> StoreResult<Option<(Bytes, ObjectMeta)>> {
            let got = self.0.get_ranged(key, range).await?;
            Ok(got.map(|(data, meta)| (Bytes::from(data.to_ascii_uppercase()), meta)))
        }
    }
    #[async_trait]
    impl ListLayer for Upper {
        async fn list(&self, prefix: &str) -> StoreResult<Listing> {
            let mut listing = self.0.list(prefix).await?;
            listing.dirs.push("LISTED".into());
            Ok(listing)
        }
    }
    #[async_trait]
    impl WriteLayer for Upper {
        async fn put_opts(&self, key: &str, data: Bytes, mode: PutMode) -> StoreResult<()> {
            self.0.put_opts(&format!("{key}.seen"), data, mode).await
        }
    }
    impl HintsLayer for Upper {}

    /// Operations made of others (`derived` in their capability) go through the layer's own
    /// versions of their parts, not past them to the store below.
    #[tokio::test]
    async fn derived_operations_are_made_of_the_layers_own() {
        use futures::StreamExt;
        let s: Arc<dyn Store> = Arc::new(Upper(Arc::new(MemoryStore::new())));
        s.put("k", Bytes::from_static(b"v")).await.unwrap();
        assert!(s.head("k").await.unwrap().is_none(), "put went past put_opts");
        let range = crate::store::ByteRange::Range(0..9);
        assert_eq!(s.get_versioned("k.seen").await.unwrap().unwrap().0.as_ref(), b"V");
        let (_, mut body) = s.get_streamed("k.seen", range).await.unwrap().unwrap();
        assert_eq!(body.next().await.unwrap().unwrap().as_ref(), b"V");
        let page = s.list_pages("").next().await.unwrap().unwrap();
        assert!(page.dirs.contains(&"LISTED".to_string()), "{page:?}");
        let wanted = crate::store::MetaWanted::new(false);
        let page = s.list_entry_pages("", wanted).next().await.unwrap().unwrap();
        assert!(page.dirs.contains(&"LISTED".to_string()), "{page:?}");
    }
}
