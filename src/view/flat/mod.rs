//! The flat view's file formats.

pub mod tiff;
pub mod tiff_ifd;
