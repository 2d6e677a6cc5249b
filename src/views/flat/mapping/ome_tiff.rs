//! `IMAGE.ome.tif`: an OME-Zarr image (the first multiscale of a group, OME-Zarr 0.4 or 0.5)
//! as an OME-TIFF. The full-resolution planes are the pages, in the C order of the array's
//! leading dimensions (OME's DimensionOrder says which); each page's lower-resolution planes
//! are its SubIFDs, as OME-TIFF pyramids are stored. Levels whose planes do not correspond
//! one to one with level 0 (a pyramid that also shrinks z, t or c) stop the pyramid there.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::imagej::c_order;
use super::ome_xml::{length_unit, ome_xml, pixel_type, time_unit, OmeImage};
use super::tiff::{
    check_size, layout, plane_count, Blocks, Page, Plane, Sample, TiffSpec, CLASSIC_LIMIT,
};
use super::{FlatArray, GroupFormat, Layout};

/// Pyramid levels an OME-TIFF is made from at most. Each level halves (or so) the one before,
/// so a real pyramid of u64 sides has fewer; a multiscale naming more datasets (each one an
/// array to look up) gets no `.ome.tif`, with a log line.
pub const MAX_LEVELS: usize = 64;

pub struct OmeTif;

impl GroupFormat for OmeTif {
    fn suffix(&self) -> &'static str {
        ".ome.tif"
    }

    fn arrays(&self, group: &Map<String, Value>) -> Vec<String> {
        let Some(ms) = multiscale(group) else { return vec![] };
        let datasets = ms.get("datasets").and_then(Value::as_array);
        if let Some(d) = datasets.filter(|d| d.len() > MAX_LEVELS) {
            tracing::info!(
                datasets = d.len(),
                "no OME-TIFF for a multiscale of more than {MAX_LEVELS} datasets"
            );
            return vec![];
        }
        datasets
            .into_iter()
            .flatten()
            .map_while(|d| d.get("path").and_then(Value::as_str).map(String::from))
            .collect()
    }

    fn layout(
        &self,
        group: &Map<String, Value>,
        arrays: &[Arc<FlatArray>],
    ) -> Result<Option<Layout>, String> {
        let Some(ms) = multiscale(group) else { return Ok(None) };
        let spec = ome_tif(group, ms, arrays)?;
        Ok(Some(layout(&spec, CLASSIC_LIMIT)))
    }
}

/// The group's attributes: v3 `attributes` (0.5 under `ome`), or v2 `.zattrs` itself (0.4).
fn attributes(group: &Map<String, Value>) -> &Map<String, Value> {
    let attrs = match group.get("attributes") {
        Some(Value::Object(a)) => a,
        _ => group,
    };
    match attrs.get("ome") {
        Some(Value::Object(ome)) => ome,
        _ => attrs,
    }
}

fn multiscale(group: &Map<String, Value>) -> Option<&Map<String, Value>> {
    attributes(group).get("multiscales")?.as_array()?.first()?.as_object()
}

/// OME's name for each dimension of the image (`Z`, `C`, `T`, then `Y`, `X`) from the
/// multiscale's axes, by type (or, without one, by name).
fn ome_axes(ms: &Map<String, Value>, ndim: usize) -> Result<Vec<char>, String> {
    let axes = ms.get("axes").and_then(Value::as_array).ok_or("a multiscale without axes")?;
    if axes.len() != ndim {
        return Err(format!("{} axes for an array of {ndim} dimensions", axes.len()));
    }
    if ndim < 2 {
        return Err("an image of fewer than 2 dimensions".into());
    }
    let mut out = Vec::with_capacity(ndim);
    for (i, axis) in axes.iter().enumerate() {
        let name = axis.get("name").and_then(Value::as_str).unwrap_or("");
        let kind = axis.get("type").and_then(Value::as_str);
        let letter = if i + 2 >= ndim {
            if kind.is_some_and(|k| k != "space") {
                return Err(format!("axis {name:?} is not spatial but one of the last two"));
            }
            if i + 2 == ndim {
                'Y'
            } else {
                'X'
            }
        } else {
            match (kind, name) {
                (Some("time"), _) | (None, "t") => 'T',
                (Some("channel"), _) | (None, "c") => 'C',
                (Some("space"), _) | (None, "z") => 'Z',
                _ => return Err(format!("axis {name:?} is not time, channel or space")),
            }
        };
        if out.contains(&letter) {
            return Err(format!("two axes are OME's {letter}"));
        }
        out.push(letter);
    }
    Ok(out)
}

/// `XY` then the leading dimensions fastest first, then those the image lacks.
fn dimension_order(letters: &[char]) -> String {
    let leading = &letters[..letters.len() - 2];
    let mut order: String = "XY".into();
    order.extend(leading.iter().rev());
    order.extend(['Z', 'C', 'T'].into_iter().filter(|l| !leading.contains(l)));
    order
}

/// Level 0's scale per dimension: the dataset's scale times the multiscale's, if any.
fn scale(ms: &Map<String, Value>, ndim: usize) -> Vec<Option<f64>> {
    let scale_of = |transforms: Option<&Value>| -> Option<Vec<f64>> {
        let t = transforms?
            .as_array()?
            .iter()
            .find(|t| t.get("type").and_then(Value::as_str) == Some("scale"))?;
        let s: Option<Vec<f64>> = t.get("scale")?.as_array()?.iter().map(Value::as_f64).collect();
        s.filter(|s| s.len() == ndim)
    };
    let first = ms.get("datasets").and_then(Value::as_array).and_then(|d| d.first());
    let dataset = scale_of(first.and_then(|d| d.get("coordinateTransformations")));
    let overall = scale_of(ms.get("coordinateTransformations"));
    (0..ndim)
        .map(|d| {
            let s = dataset.as_ref()?[d];
            Some(s * overall.as_ref().map_or(1.0, |o| o[d]))
        })
        .collect()
}

fn channel_names(group: &Map<String, Value>) -> Vec<Option<String>> {
    let omero = attributes(group).get("omero").and_then(|o| o.get("channels"));
    let channels = omero.and_then(Value::as_array).into_iter().flatten();
    channels.map(|c| c.get("label").and_then(Value::as_str).map(String::from)).collect()
}

/// The planes of `array` (level `source`), in the C order of its leading dimensions.
fn plane(array: &FlatArray, source: usize, index: Vec<u64>) -> Plane {
    let n = array.shape.len();
    let chunks = array.grid.largest_chunk();
    Plane {
        source,
        index,
        height: array.shape[n - 2],
        width: array.shape[n - 1],
        blocks: Blocks::for_chunk(chunks[n - 2], chunks[n - 1]),
    }
}

/// The pyramid levels after level 0 that a TIFF can hold as SubIFDs: same type, same leading
/// dimensions; the first that is not stops the pyramid (with a log line).
fn reduced_levels(arrays: &[Arc<FlatArray>], sample: Sample) -> &[Arc<FlatArray>] {
    let full = &arrays[0];
    let n = full.shape.len();
    let fits = |a: &FlatArray| {
        Sample::of(a.kind(), a.item) == Some(sample)
            && a.shape.len() == n
            && a.shape[..n - 2] == full.shape[..n - 2]
    };
    let count = arrays[1..].iter().take_while(|a| fits(a)).count();
    if count + 1 < arrays.len() {
        tracing::info!(
            level = count + 1,
            "OME-TIFF pyramid stops before a level of another type or other leading dimensions"
        );
    }
    &arrays[1..1 + count]
}

fn ome_tif(
    group: &Map<String, Value>,
    ms: &Map<String, Value>,
    arrays: &[Arc<FlatArray>],
) -> Result<TiffSpec, String> {
    let full = arrays.first().ok_or("a multiscale without datasets")?;
    let n = full.shape.len();
    let letters = ome_axes(ms, n)?;
    let sample = Sample::of(full.kind(), full.item)
        .ok_or_else(|| format!("TIFF holds no {} samples", full.descr))?;
    let pixel_type = pixel_type(sample.bits, sample.format)
        .ok_or_else(|| format!("OME has no pixel type for {}", full.descr))?;
    let size_of = |l: char| letters.iter().position(|&x| x == l).map_or(1, |d| full.shape[d]);
    let units: Vec<Option<&str>> = ms
        .get("axes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|a| a.get("unit").and_then(Value::as_str))
        .collect();
    let scale = scale(ms, n);
    let physical_of = |l: char, unit_of: fn(&str) -> Option<&'static str>| {
        let d = letters.iter().position(|&x| x == l)?;
        let value = scale[d].filter(|v| *v > 0.0)?;
        Some((value, unit_of(units[d]?)?))
    };
    let image = OmeImage {
        name: ms.get("name").and_then(Value::as_str).map(String::from),
        dimension_order: dimension_order(&letters),
        pixel_type,
        sizes: ['X', 'Y', 'Z', 'C', 'T'].map(size_of),
        physical: ['X', 'Y', 'Z'].map(|l| physical_of(l, length_unit)),
        time_increment: physical_of('T', time_unit),
        channel_names: channel_names(group),
    };
    let mut description = Some(ome_xml(&image));
    let reduced = reduced_levels(arrays, sample);
    let first: Vec<Plane> = std::iter::once(plane(full, 0, vec![]))
        .chain(reduced.iter().enumerate().map(|(l, a)| plane(a, l + 1, vec![])))
        .collect();
    check_size(plane_count(&full.shape), &first)?;
    let pages = c_order(&full.shape[..n - 2])
        .into_iter()
        .map(|index| Page {
            plane: plane(full, 0, index.clone()),
            description: description.take(),
            reduced: reduced
                .iter()
                .enumerate()
                .map(|(l, a)| plane(a, l + 1, index.clone()))
                .collect(),
        })
        .collect();
    Ok(TiffSpec { sample, pages })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn arrays_of_0_4_and_0_5_images() {
        let datasets = json!([{"path": "0"}, {"path": "1"}]);
        let v05 = obj(json!({"zarr_format": 3, "node_type": "group",
            "attributes": {"ome": {"version": "0.5", "multiscales": [{"datasets": datasets}]}}}));
        let v04 = obj(json!({"multiscales": [{"version": "0.4", "datasets": datasets}]}));
        assert_eq!(OmeTif.arrays(&v05), ["0", "1"]);
        assert_eq!(OmeTif.arrays(&v04), ["0", "1"]);
        assert!(OmeTif.arrays(&obj(json!({"attributes": {}}))).is_empty());
    }

    #[test]
    fn a_multiscale_of_too_many_datasets_has_no_ome_tiff() {
        let datasets = |n: usize| Value::Array(vec![json!({"path": "0"}); n]);
        let group = |n| obj(json!({"multiscales": [{"version": "0.4", "datasets": datasets(n)}]}));
        assert_eq!(OmeTif.arrays(&group(MAX_LEVELS)).len(), MAX_LEVELS);
        assert!(OmeTif.arrays(&group(MAX_LEVELS + 1)).is_empty());
    }

    #[test]
    fn axes_to_ome_letters_and_order() {
        let ms = |axes: Value| obj(json!({ "axes": axes }));
        let tczyx = json!([{"name": "t", "type": "time"}, {"name": "c", "type": "channel"},
            {"name": "z", "type": "space"}, {"name": "y", "type": "space"},
            {"name": "x", "type": "space"}]);
        let letters = ome_axes(&ms(tczyx), 5).unwrap();
        assert_eq!(letters, ['T', 'C', 'Z', 'Y', 'X']);
        assert_eq!(dimension_order(&letters), "XYZCT");
        let cyx = json!([{"name": "c"}, {"name": "y"}, {"name": "x"}]);
        let letters = ome_axes(&ms(cyx), 3).unwrap();
        assert_eq!(dimension_order(&letters), "XYCZT");
        assert_eq!(dimension_order(&['Z', 'C', 'Y', 'X']), "XYCZT");
        let two_z = json!([{"name": "z", "type": "space"}, {"name": "w", "type": "space"},
            {"name": "y", "type": "space"}, {"name": "x", "type": "space"}]);
        assert!(ome_axes(&ms(two_z), 4).unwrap_err().contains("two axes"));
        let odd = json!([{"name": "a", "type": "angle"}, {"name": "y"}, {"name": "x"}]);
        assert!(ome_axes(&ms(odd), 3).is_err());
        assert!(ome_axes(&ms(json!([{"name": "y"}, {"name": "x"}])), 3).is_err());
    }

    #[test]
    fn scale_of_level_0_times_the_multiscale() {
        let ms = obj(json!({
            "datasets": [{"path": "0", "coordinateTransformations": [
                {"type": "scale", "scale": [1.0, 0.5, 0.25]},
                {"type": "translation", "translation": [0, 0, 0]}]}],
            "coordinateTransformations": [{"type": "scale", "scale": [2.0, 2.0, 2.0]}]
        }));
        assert_eq!(scale(&ms, 3), [Some(2.0), Some(1.0), Some(0.5)]);
        assert_eq!(scale(&obj(json!({"datasets": [{"path": "0"}]})), 2), [None, None]);
    }

    #[test]
    fn channel_labels_from_omero() {
        let g = obj(json!({"attributes": {"ome": {"omero": {"channels": [
            {"label": "DAPI"}, {"color": "FF0000"}]}}}}));
        assert_eq!(channel_names(&g), [Some("DAPI".to_string()), None]);
    }
}
