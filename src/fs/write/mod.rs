//! The write path: a file open for writing is buffered (in memory, or spilled to an anonymous
//! file) and stored as one object at close; inner chunks of the unsharded view are spliced into
//! their shards.

pub mod shard_writer;
pub mod spill;
pub(crate) mod write_buf;
