//! What `NAME.tif` holds for one array: one page per plane of its last two dimensions, cut
//! into one tile per chunk (or strips), in the page order of [`super::imagej`].

use super::imagej::page_order;
use super::tiff::{
    check_size, layout, plane_count, Blocks, Page, Plane, Sample, TiffSpec, CLASSIC_LIMIT,
};
use super::{ArrayFormat, FlatArray, Layout};

/// `NAME.tif`.
pub struct Tif;

impl ArrayFormat for Tif {
    fn suffix(&self) -> &'static str {
        ".tif"
    }

    /// Not for arrays of fewer than 2 dimensions (silently: they are not images).
    fn layout(&self, array: &FlatArray) -> Result<Option<Layout>, String> {
        if array.shape.len() < 2 {
            return Ok(None);
        }
        let sample = Sample::of(array.kind(), array.item)
            .ok_or_else(|| format!("TIFF holds no {} samples", array.descr))?;
        let names: Option<Vec<String>> = array.dimension_names.iter().cloned().collect();
        // A rectilinear grid has no one chunk shape: tiles of its longest chunks.
        let chunks = array.grid.largest_chunk();
        let spec = array_tif(&array.shape, &chunks, sample, names.as_deref())?;
        Ok(Some(layout(&spec, CLASSIC_LIMIT)))
    }
}

/// The TIFF of an array of `shape` stored in (inner) chunks of `chunk_shape`, or why the array
/// has none (for one log line).
pub fn array_tif(
    shape: &[u64],
    chunk_shape: &[u64],
    sample: Sample,
    names: Option<&[String]>,
) -> Result<TiffSpec, String> {
    let n = shape.len();
    if n < 2 {
        return Err(format!("a TIFF needs 2 or more dimensions, the array has {n}"));
    }
    if chunk_shape.len() != n {
        return Err(format!("chunks of {} dimensions in an array of {n}", chunk_shape.len()));
    }
    let blocks = Blocks::for_chunk(chunk_shape[n - 2], chunk_shape[n - 1]);
    let (height, width) = (shape[n - 2], shape[n - 1]);
    let first = Plane { source: 0, index: vec![], height, width, blocks };
    check_size(plane_count(shape), [&first])?;
    let order = page_order(shape, names, sample);
    let mut description = order.description;
    let pages = order
        .pages
        .into_iter()
        .map(|index| Page {
            plane: Plane { index, ..first.clone() },
            description: description.take(),
            reduced: vec![],
        })
        .collect();
    Ok(TiffSpec { sample, pages })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_page_per_plane_tiled_by_chunk() {
        let u8 = Sample::of('u', 1).unwrap();
        let spec = array_tif(&[3, 40, 50], &[2, 16, 32], u8, None).unwrap();
        assert_eq!(spec.sample, Sample { bits: 8, format: 1 });
        assert_eq!(spec.pages.len(), 3);
        assert_eq!(spec.pages[2].plane.index, vec![2]);
        assert_eq!(spec.pages[0].plane.blocks, Blocks::Tiles { length: 16, width: 32 });
        assert_eq!((spec.pages[0].plane.height, spec.pages[0].plane.width), (40, 50));
    }

    #[test]
    fn only_the_first_page_has_the_description() {
        let f32 = Sample::of('f', 4).unwrap();
        let names: Vec<String> = ["z", "y", "x"].map(String::from).to_vec();
        let spec = array_tif(&[3, 40, 50], &[1, 10, 10], f32, Some(&names)).unwrap();
        assert!(spec.pages[0].description.as_deref().unwrap().contains("slices=3"));
        assert_eq!(spec.pages[1].description, None);
        assert_eq!(spec.pages[0].plane.blocks, Blocks::Strips { rows: 10 });
    }

    #[test]
    fn arrays_a_tiff_cannot_hold() {
        let u8 = Sample::of('u', 1).unwrap();
        assert!(array_tif(&[10], &[5], u8, None).unwrap_err().contains("dimensions"));
        assert!(array_tif(&[4, 4], &[2], u8, None).is_err());
    }

    /// Shapes claiming more tiles or pages than a layout may hold are refused before a page
    /// is listed (2^54 pages, 2^42 tiles in one page, a product beyond u64); the largest
    /// allowed is laid out.
    #[test]
    fn absurd_shapes_are_refused_before_allocating() {
        use crate::views::flat::mapping::tiff::MAX_BLOCKS;
        let u8 = Sample::of('u', 1).unwrap();
        for (shape, chunks) in [
            (vec![1 << 54, 16, 16], vec![1, 16, 16]),
            (vec![1 << 31, 1 << 31], vec![1024, 1024]),
            (vec![1 << 40, 1 << 40, 1 << 40, 16, 16], vec![1, 1, 1, 16, 16]),
            (vec![1 << 62, 1 << 62], vec![1, 1]),
            (vec![MAX_BLOCKS + 1, 16, 16], vec![1, 16, 16]),
        ] {
            let err = array_tif(&shape, &chunks, u8, None).unwrap_err();
            assert!(err.contains("tiles or strips"), "{shape:?}: {err}");
        }
        let spec = array_tif(&[MAX_BLOCKS / 4, 32, 32], &[1, 16, 16], u8, None).unwrap();
        assert_eq!(spec.pages.len() as u64, MAX_BLOCKS / 4);
    }
}

/// Writes sample TIFFs to `$ZM_TIFF_OUT` for checking with other readers by hand:
/// `ZM_TIFF_OUT=/tmp/t cargo test --lib write_samples -- --ignored`.
#[cfg(test)]
mod samples {
    use super::*;
    use crate::views::flat::mapping::tiff::materialize;

    /// Name, numpy type, shape, chunk shape, dimension names, classic TIFF limit.
    type Case<'a> = (&'a str, &'a str, &'a [u64], &'a [u64], Option<&'a str>, u64);

    #[test]
    #[ignore]
    fn write_samples() {
        let dir = std::env::var("ZM_TIFF_OUT").unwrap();
        let cases: [Case; 5] = [
            ("tiled_u16", "u2", &[3, 50, 70], &[2, 16, 32], None, CLASSIC_LIMIT),
            ("strips_u8", "u1", &[45, 37], &[10, 10], None, CLASSIC_LIMIT),
            ("big_f64", "f8", &[2, 33, 20], &[1, 16, 16], None, 0),
            (
                "hyper_u16",
                "u2",
                &[2, 3, 4, 32, 48],
                &[1, 1, 2, 16, 16],
                Some("tczyx"),
                CLASSIC_LIMIT,
            ),
            ("i32", "i4", &[20, 30], &[7, 7], None, CLASSIC_LIMIT),
        ];
        for (name, t, shape, chunks, names, limit) in cases {
            let item = t[1..].parse().unwrap();
            let sample = Sample::of(t.chars().next().unwrap(), item).unwrap();
            let names: Option<Vec<String>> = names.map(|n| n.chars().map(String::from).collect());
            let spec = array_tif(shape, chunks, sample, names.as_deref()).unwrap();
            let count: u64 = shape.iter().product();
            // Element i holds i (as bytes of its type) so every pixel is recognisable.
            let data: Vec<u8> = (0..count)
                .flat_map(|i| match t {
                    "u2" => (i as u16).to_le_bytes().to_vec(),
                    "u1" => vec![i as u8],
                    "f8" => (i as f64).to_le_bytes().to_vec(),
                    _ => (i as i32 - 300).to_le_bytes().to_vec(),
                })
                .collect();
            let l = layout(&spec, limit);
            let bytes = materialize(&l, &[(&data, shape)]);
            assert_eq!(bytes.len() as u64, l.size);
            std::fs::write(format!("{dir}/{name}.tif"), bytes).unwrap();
        }
    }
}
