//! FUSE: the thin fuser adapter and the mount session (mount, signals, readiness, unmount).

pub mod adapter;
pub mod notify;
pub mod session;
