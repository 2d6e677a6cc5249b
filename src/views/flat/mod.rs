//! `--view flat`: every array as single files (`NAME.npy`, ...) in its parent directory.
//! `mapping` (pure: the formats and their byte layouts) and `namespace` (the async side:
//! metadata read, chunks assembled under a byte range).

pub mod mapping;
pub mod namespace;
