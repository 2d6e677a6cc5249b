//! What the kernel holds of the mount: inode numbers for paths, and open handles.

pub(in crate::fs) mod handles;
pub mod table;
