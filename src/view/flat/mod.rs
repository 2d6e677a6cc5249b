//! The flat view's file formats.

pub mod array_tif;
pub mod imagej;
pub mod tiff;
pub mod tiff_ifd;
