//! The page order of an array's TIFF and, where the array is an ImageJ hyperstack, its ImageJ
//! `ImageDescription`.
//!
//! ImageJ reads the pages of a hyperstack in one order only, channel fastest, then slice (z),
//! then frame (t) (TZCYX in C order), and takes the sizes from the description. So when the
//! dimension names say the array is an image of t, c, z, y, x (any subset of t, c, z before
//! y, x, in any order) and its type is one ImageJ holds (8-bit, 16-bit unsigned, float32),
//! the pages are written in ImageJ's order, whatever the array's order (OME-Zarr's is t, c,
//! z); otherwise one page per index of the leading dimensions in C order, and no description.

use super::tiff::Sample;

/// The ImageJ version tifffile writes; ImageJ reads any.
const IMAGEJ_VERSION: &str = "1.11a";

/// The samples ImageJ holds as hyperstacks: 8-bit, 16-bit unsigned, float32.
const IMAGEJ_SAMPLES: [Sample; 3] =
    [Sample { bits: 8, format: 1 }, Sample { bits: 16, format: 1 }, Sample { bits: 32, format: 3 }];

/// ImageJ's hyperstack axes, slowest first.
const IMAGEJ_AXES: [char; 3] = ['t', 'z', 'c'];

/// The pages of an array's TIFF: each one's index into the leading dimensions, in file order,
/// and the ImageDescription of the first page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageOrder {
    pub pages: Vec<Vec<u64>>,
    pub description: Option<String>,
}

/// The page order of an array of `shape` (at least 2 dimensions) whose dimensions are named
/// `names` (if it says).
pub fn page_order(shape: &[u64], names: Option<&[String]>, sample: Sample) -> PageOrder {
    let leading = &shape[..shape.len().saturating_sub(2)];
    match names.and_then(|n| hyperstack_axes(n, sample)) {
        Some(axes) if !leading.is_empty() => imagej_order(leading, &axes),
        _ => PageOrder { pages: c_order(leading), description: None },
    }
}

/// For each of ImageJ's axes t, z, c, the leading dimension that holds it, if the names make
/// the array an ImageJ hyperstack.
fn hyperstack_axes(names: &[String], sample: Sample) -> Option<[Option<usize>; 3]> {
    if !IMAGEJ_SAMPLES.contains(&sample) || names.len() < 2 {
        return None;
    }
    let lower: Vec<String> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
    let (leading, plane) = lower.split_at(lower.len() - 2);
    if plane != ["y", "x"] {
        return None;
    }
    let mut axes = [None; 3];
    for (dim, name) in leading.iter().enumerate() {
        let slot = IMAGEJ_AXES.iter().position(|a| name.len() == 1 && name.starts_with(*a))?;
        if axes[slot].replace(dim).is_some() {
            return None;
        }
    }
    Some(axes)
}

fn imagej_order(leading: &[u64], axes: &[Option<usize>; 3]) -> PageOrder {
    let size = |slot: usize| axes[slot].map_or(1, |d| leading[d]);
    let (frames, slices, channels) = (size(0), size(1), size(2));
    let mut pages = Vec::new();
    for t in 0..frames {
        for z in 0..slices {
            for c in 0..channels {
                let mut index = vec![0; leading.len()];
                for (slot, i) in [t, z, c].into_iter().enumerate() {
                    if let Some(d) = axes[slot] {
                        index[d] = i;
                    }
                }
                pages.push(index);
            }
        }
    }
    let mut lines = vec![format!("ImageJ={IMAGEJ_VERSION}"), format!("images={}", pages.len())];
    for (key, n) in [("channels", channels), ("slices", slices), ("frames", frames)] {
        if n > 1 {
            lines.push(format!("{key}={n}"));
        }
    }
    lines.extend(["hyperstack=true".into(), "mode=grayscale".into()]);
    if frames > 1 {
        lines.push("loop=false".into());
    }
    let description = Some(lines.join("\n") + "\n");
    PageOrder { pages, description }
}

/// Every index of `shape` in C order.
pub fn c_order(shape: &[u64]) -> Vec<Vec<u64>> {
    let total: u64 = shape.iter().product();
    (0..total)
        .map(|mut i| {
            let mut index = vec![0; shape.len()];
            for (d, &n) in shape.iter().enumerate().rev() {
                index[d] = i % n;
                i /= n;
            }
            index
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(s: &str) -> Vec<String> {
        s.chars().map(String::from).collect()
    }

    fn u16() -> Sample {
        Sample::of('u', 2).unwrap()
    }

    #[test]
    fn ome_order_is_written_in_imagej_order() {
        let order = page_order(&[2, 3, 4, 8, 8], Some(&names("tczyx")), u16());
        assert_eq!(
            order.description.as_deref(),
            Some(
                "ImageJ=1.11a\nimages=24\nchannels=3\nslices=4\nframes=2\n\
                 hyperstack=true\nmode=grayscale\nloop=false\n"
            )
        );
        // Channel fastest, then z, then t: indices are (t, c, z) of the array.
        assert_eq!(order.pages[..4], [vec![0, 0, 0], vec![0, 1, 0], vec![0, 2, 0], vec![0, 0, 1]]);
        assert_eq!(order.pages[12], vec![1, 0, 0]);
        assert_eq!(order.pages.len(), 24);
    }

    #[test]
    fn a_z_stack_has_slices_only() {
        let order = page_order(&[5, 8, 8], Some(&names("ZYX")), u16());
        assert_eq!(
            order.description.as_deref(),
            Some("ImageJ=1.11a\nimages=5\nslices=5\nhyperstack=true\nmode=grayscale\n")
        );
        assert_eq!(order.pages, c_order(&[5]));
    }

    #[test]
    fn other_arrays_are_in_c_order_without_a_description() {
        let c_order_only = |shape: &[u64], n: Option<&str>, t: &str| {
            let n = n.map(names);
            let sample = Sample::of(t.chars().next().unwrap(), t[1..].parse().unwrap()).unwrap();
            let order = page_order(shape, n.as_deref(), sample);
            assert_eq!(order.description, None, "{n:?} {t}");
            assert_eq!(order.pages, c_order(&shape[..shape.len() - 2]));
        };
        c_order_only(&[2, 3, 8, 8], None, "u2");
        c_order_only(&[2, 3, 8, 8], Some("abyx"), "u2");
        c_order_only(&[2, 3, 8, 8], Some("zzyx"), "u2");
        c_order_only(&[2, 3, 8, 8], Some("tcxy"), "u2");
        c_order_only(&[2, 3, 8, 8], Some("tcyx"), "i4");
        c_order_only(&[8, 8], Some("yx"), "u1");
        assert_eq!(c_order(&[2, 2]), [vec![0, 0], vec![0, 1], vec![1, 0], vec![1, 1]]);
        assert_eq!(c_order(&[]), [Vec::<u64>::new()]);
    }
}
