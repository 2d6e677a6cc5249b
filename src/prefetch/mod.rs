//! The read-ahead and prefetch policies of a mount that no single view owns: each decides what
//! to fetch before a reader asks, within a budget of its own, and is counted under its
//! `metrics::Ahead` kind. The views, the filesystem (`fs`) and the FUSE session call into these;
//! the fetching itself is the store's (`StoreHints::prefetch` fetches an object whole into the
//! memory cache of `store/layers/`). A view's own read-ahead lives with the view
//! (`views::unsharded::read_ahead`).
//!
//! The layer sits between `views` and the two leaves: it may use `store` and `zarr`, and
//! `views`, `fs`, `fuse` and the entry modules may use it (`tests/it/layering.rs`).

pub mod across_files;
pub mod array;
pub mod documents;
pub mod kernel_window;
pub mod next_directories;
pub mod per_mount;
pub mod within_file;
