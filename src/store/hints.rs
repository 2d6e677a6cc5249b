//! What a store says about itself rather than the data it holds: `StoreHints`.

use crate::store::capability::capability;
use crate::store::{validate_key, StoreResult};

/// A read-ahead policy of the layers above the store (`src/prefetch/`): the directories a
/// reader of `dir` goes on to. A store that confirms a directory's cached objects (the disk
/// cache) confirms theirs beside it; it knows keys, and the policy what they name.
pub type NextDirs = fn(dir: &str) -> DirsAhead;

/// What a `NextDirs` policy answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirsAhead {
    /// These directories (keys), nearest first.
    Named(Vec<String>),
    /// The next this many sibling directories in name order.
    Siblings(usize),
}

capability! {
    /// How to name the store in logs, whether it has real directories, which keys it can hold,
    /// its capacity, and hints that change no data (how much to read whole, what to fetch
    /// early, local copies for the kernel).
    pub trait StoreHints, layer HintsLayer {
        /// A short human description for logs ("local:/data/x.zarr"). Never contains
        /// credentials.
        required fn describe(&self) -> String;

        /// Whether empty directories exist in the store itself (local filesystem) rather than
        /// only as prefixes of keys (object stores, zips).
        required fn has_real_dirs(&self) -> bool;

        /// Capacity figures for statfs: (total bytes, free bytes); None when unknown.
        provided fn capacity(&self) -> Option<(u64, u64)> {
            None
        }

        /// Whether this store can hold an object (or directory) named `key`, checked before a
        /// file is created, made or renamed through the mount: a name the backend would refuse
        /// must fail at create(2) with EINVAL, not later at close(2) or unmount with data lost.
        provided fn check_key(&self, key: &str) -> StoreResult<()> {
            validate_key(key)
        }

        /// Objects up to this many bytes are kept whole in memory once a read returns all of
        /// them (0: no such cache). A reader that needs a small piece of an object likely to be
        /// read whole soon (a shard index) may then ask for this much at once and save a
        /// request.
        provided fn whole_object_limit(&self) -> u64 {
            0
        }

        /// A hint that `key` (of `size` bytes, or at most that when its size is not known yet)
        /// will likely be read soon: a store may start fetching it now. `why` names the guess
        /// in the metrics. Errors are not reported; the read itself will meet them.
        provided async fn prefetch(&self, _key: &str, _size: u64, _why: crate::metrics::Ahead) {}

        /// A local file holding exactly the bytes of `key` at `version`, for the kernel to read
        /// directly (FUSE passthrough), when this store keeps one (the disk cache's copies).
        /// May block on file I/O: call it off the async runtime.
        provided fn local_copy(&self, _key: &str, _version: &str) -> Option<std::fs::File> {
            None
        }

        /// Whether a local copy of `key` at its current version (known without a request) is
        /// kept: a read of the object only to learn its size would then be wasted work. No I/O.
        provided fn keeps_local_copy(&self, _key: &str) -> bool {
            false
        }
    }
}
