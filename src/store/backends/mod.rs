//! The backends: each one maps the `Store` trait onto one kind of storage.

pub mod aws_chain;
pub mod http;
pub mod icechunk;
pub mod icechunk_http;
pub mod local;
pub mod memory;
pub mod object;
pub mod reference;
pub mod renewing;
pub mod zip;
