//! The integration tests, one crate (one binary to build and link): each module is one
//! area, `common` holds the helpers they share (real mounts, S3 servers, ZarrFs drivers).

mod common;

mod consistency;
mod credentials;
mod disk_cache;
mod docs;
mod emulators;
mod faults;
mod faults_mount;
mod hostile_inputs;
mod hostile_keys;
mod hostile_metadata;
mod http;
mod layering;
mod metrics;
mod mount_flags;
mod mount_local;
mod presented_views;
mod references;
mod s3;
mod scale;
mod service;
mod soak;
mod unsharded_view;
mod zip_store;
