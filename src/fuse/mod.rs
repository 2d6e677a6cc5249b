//! FUSE: the thin fuser adapter and the mount session (mount, signals, readiness, unmount).

pub mod adapter;
pub mod io_modes;
pub mod kernel_mount;
pub mod notify;
pub mod openers;
pub mod passed_fd;
pub mod session;
