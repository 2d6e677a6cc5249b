//! `--view raw`: the store as stored. `mapping` decides lookups inside an array's chunk tree
//! from its metadata; `namespace` asks the store, and every other view wraps it.

pub mod mapping;
pub mod namespace;
