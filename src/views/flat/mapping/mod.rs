//! `--view flat`: every array as single files that tools without Zarr open (`NAME.npy`, and the
//! formats added beside it), groups as directories. Pure: what an array is ([`FlatArray`]), which
//! files it shows and the byte layout of each ([`Layout`]); the fs side (`views::flat::namespace`)
//! reads metadata, finds the chunks under a byte range and assembles them.
//!
//! # Adding a format
//! A format is an [`ArrayFormat`] (one file per array, e.g. `.npy`, `.tif`) or a
//! [`GroupFormat`] (one file per group, from arrays inside it, e.g. an OME-Zarr image as
//! `.ome.tif`), listed in [`ARRAY_FORMATS`] / [`GROUP_FORMATS`]. A format only builds a
//! [`Layout`]: the file's exact size and its parts in order, each literal bytes
//! ([`Content::Bytes`]: headers, IFDs, XML) or a box of elements of one of its arrays
//! ([`Content::Elements`]: in C order, the box may overhang the array, the overhang reading as
//! the fill value), in the layout's byte order. Nothing else changes: the fs side lists,
//! sizes and reads every format's files from their layouts.

pub mod array;
pub mod array_tif;
pub mod imagej;
pub mod layout;
pub mod npy;
pub mod ome_tiff;
pub mod ome_xml;
pub mod tiff;
pub mod tiff_ifd;

pub use array::FlatArray;
pub use layout::{ByteOrder, Content, ElementBox, Layout, LayoutBuilder, Part};

use std::sync::Arc;

use serde_json::{Map, Value};

/// A format of one file per array.
pub trait ArrayFormat: Send + Sync {
    /// The file's name after the array's, e.g. `.npy`.
    fn suffix(&self) -> &'static str;
    /// The file's layout (every [`Content::Elements`] with `source: 0`); `Ok(None)` when the
    /// format does not apply to such an array (no log line), `Err(why)` when it should but
    /// cannot (logged once as the reason the file is left out).
    fn layout(&self, array: &FlatArray) -> Result<Option<Layout>, String>;
}

/// A format of one file per group, made from arrays inside the group.
pub trait GroupFormat: Send + Sync {
    /// The file's name after the group's, e.g. `.ome.tif`.
    fn suffix(&self) -> &'static str;
    /// The arrays the file draws from (paths relative to the group, from its attributes
    /// `group`, the whole `zarr.json` or `.zattrs`); empty when the format does not apply.
    fn arrays(&self, group: &Map<String, Value>) -> Vec<String>;
    /// The file's layout, [`Content::Elements`] `source` indexing `arrays` (in the order
    /// `arrays` named them); as [`ArrayFormat::layout`] for `None` and errors.
    fn layout(
        &self,
        group: &Map<String, Value>,
        arrays: &[Arc<FlatArray>],
    ) -> Result<Option<Layout>, String>;
}

/// The largest file the kernel takes (FUSE refuses an attribute size above `i64::MAX` with
/// `EIO`): a larger layout (an `.npy` of 2^63 bytes) is left out with a log line.
pub const MAX_FILE_SIZE: u64 = i64::MAX as u64;

/// A format's answer, with a layout larger than [`MAX_FILE_SIZE`] turned into the reason it
/// is left out.
pub fn within_file_size(layout: Result<Option<Layout>, String>) -> Result<Option<Layout>, String> {
    match layout? {
        Some(l) if l.size > MAX_FILE_SIZE => {
            Err(format!("{} bytes, more than the largest file ({MAX_FILE_SIZE})", l.size))
        }
        other => Ok(other),
    }
}

/// Every per-array format, in listing order.
pub static ARRAY_FORMATS: &[&dyn ArrayFormat] = &[&npy::Npy, &array_tif::Tif];

/// Every per-group format.
pub static GROUP_FORMATS: &[&dyn GroupFormat] = &[&ome_tiff::OmeTif];

/// One file of the view: its layout over the arrays it draws from.
#[derive(Debug, Clone, PartialEq)]
pub struct FlatFile {
    pub layout: Layout,
    /// The arrays' directories in the view below, indexed by `ElementBox::source`.
    pub dirs: Vec<String>,
    pub arrays: Vec<Arc<FlatArray>>,
}

impl FlatFile {
    /// A token that changes when the layout or the arrays' metadata changes (chunks are
    /// read when asked; see docs/VIEWS.md on what a reader sees when chunks change).
    pub fn version(&self) -> String {
        let mut h = crc32c::crc32c(format!("{:?}", self.dirs).as_bytes());
        for a in &self.arrays {
            h = crc32c::crc32c_append(h, a.version.as_bytes());
        }
        format!("flat-{h:08x}-{}", self.layout.size)
    }
}

/// The files of array `name` (its directory `dir` below), each `(file name, file)`; formats
/// that cannot hold it say why in a log line.
pub fn array_files(dir: &str, name: &str, array: &Arc<FlatArray>) -> Vec<(String, FlatFile)> {
    let mut out = Vec::new();
    for format in ARRAY_FORMATS {
        match within_file_size(format.layout(array)) {
            Ok(Some(layout)) => {
                let file =
                    FlatFile { layout, dirs: vec![dir.to_string()], arrays: vec![array.clone()] };
                out.push((format!("{name}{}", format.suffix()), file));
            }
            Ok(None) => {}
            Err(why) => {
                tracing::info!(array = ?dir, format = format.suffix(), reason = %why, "no flat file")
            }
        }
    }
    out
}

/// Whether `name` could be a file of some format: the array or group names it may belong to.
pub fn owners(name: &str) -> impl Iterator<Item = &str> {
    let array = ARRAY_FORMATS.iter().map(|f| f.suffix());
    let group = GROUP_FORMATS.iter().map(|f| f.suffix());
    array.chain(group).filter_map(move |suffix| name.strip_suffix(suffix).filter(|n| !n.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_beyond_the_largest_file_are_refused() {
        // One byte of header and `n` elements of 2 bytes.
        let sized = |n: u64| {
            let mut b = LayoutBuilder::new(ByteOrder::Little);
            b.bytes(vec![0]);
            b.elements(ElementBox {
                source: 0,
                region: std::iter::once(0..n).collect(),
                item: 2,
                swap: 2,
            });
            Ok(Some(b.build()))
        };
        let largest = within_file_size(sized(MAX_FILE_SIZE / 2)).unwrap().unwrap();
        assert_eq!(largest.size, MAX_FILE_SIZE);
        let err = within_file_size(sized(1 << 62)).unwrap_err();
        assert!(err.contains("largest file"), "{err}");
        assert_eq!(within_file_size(Ok(None)), Ok(None));
    }
}
