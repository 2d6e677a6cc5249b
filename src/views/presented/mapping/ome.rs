//! OME-Zarr 0.5 (and what 0.4 can express of 0.6) written as OME-Zarr 0.4, for the v2 views.
//!
//! The readers that need a v2 view are the 0.4-only bioimaging readers, which look for
//! `multiscales`, `plate`, `well`, `labels` and `image-label` at the top level of `.zattrs`
//! and check each one's `version`. 0.5 keeps the same objects under `attributes.ome`, with one
//! `ome.version`; axes, datasets and scale/translation transformations share one schema in
//! both versions, so the translation only moves keys and adds versions.
//!
//! 0.6 (RFC-5) names coordinate systems and gives each dataset one transformation with an
//! `input` and an `output`; 0.4 can express that when every dataset maps into one coordinate
//! system by a scale, an identity, or a scale followed by a translation, and nothing else is
//! said about the multiscale as a whole.

use serde_json::{json, Map, Value};

/// What the v2 views do with OME-Zarr metadata of Zarr v3 groups (`--v2-ome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OmeInV2 {
    /// Write it as OME-Zarr 0.4 (top-level keys, per-object versions).
    #[default]
    Translate,
    /// Leave the attributes as they are (an `ome` key holding 0.5 metadata).
    Keep,
}

/// The OME version written by the translation.
const VERSION: &str = "0.4";

/// The objects that carry a `version` of their own in 0.4.
const VERSIONED: [&str; 4] = ["plate", "well", "image-label", "omero"];

/// A group's attributes as the v2 views show them: an `ome` object translated to 0.4 when
/// `mode` says so and 0.4 can express it; anything else unchanged. `Err` carries the
/// unchanged attributes and why they were not translated (for one log line).
pub fn group_attributes(
    attrs: Map<String, Value>,
    mode: OmeInV2,
) -> Result<Map<String, Value>, (Map<String, Value>, String)> {
    let Some(Value::Object(ome)) = attrs.get("ome") else { return Ok(attrs) };
    if mode == OmeInV2::Keep {
        return Ok(attrs);
    }
    match to_0_4(ome) {
        Ok(members) => {
            let mut out = attrs;
            out.remove("ome");
            for (k, v) in members {
                out.insert(k, v);
            }
            Ok(out)
        }
        Err(why) => Err((attrs, why)),
    }
}

/// The top-level 0.4 keys for the members of one `ome` object.
fn to_0_4(ome: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    // ome-zarr-py (0.18 to 0.21) writes a labels group's `ome` without `version`; `ome` in a
    // Zarr v3 group is 0.5 or later, so an absent version is read as 0.5.
    let version = match ome.get("version") {
        None => "0.5",
        Some(v) => v.as_str().unwrap_or(""),
    };
    let from_0_6 = match version {
        "0.5" => false,
        v if v.starts_with("0.6") => true,
        v if v.starts_with("0.5") => false,
        other => return Err(format!("OME-Zarr version {other:?} has no 0.4 form here")),
    };
    let mut out = Map::new();
    for (key, value) in ome {
        let value = match key.as_str() {
            "version" => continue,
            "multiscales" => multiscales(value, from_0_6)?,
            k if VERSIONED.contains(&k) => with_version(value),
            _ => value.clone(),
        };
        out.insert(key.clone(), value);
    }
    Ok(out)
}

/// An object with `"version": "0.4"` added (replacing any version it had); other values as
/// they are.
fn with_version(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut m = m.clone();
            m.insert("version".into(), json!(VERSION));
            Value::Object(m)
        }
        other => other.clone(),
    }
}

fn multiscales(v: &Value, from_0_6: bool) -> Result<Value, String> {
    let Value::Array(items) = v else { return Ok(v.clone()) };
    let items = items
        .iter()
        .map(|m| match (m, from_0_6) {
            (Value::Object(m), true) => multiscale_from_0_6(m).map(Value::Object),
            (m, _) => Ok(with_version(m)),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Value::Array(items))
}

/// One 0.6 multiscale in 0.4 form: the axes of the coordinate system every dataset maps into,
/// each dataset's transformation as the 0.4 list (scale, then an optional translation).
fn multiscale_from_0_6(m: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    if m.contains_key("coordinateTransformations") {
        return Err("0.6 transformations between coordinate systems have no 0.4 form".into());
    }
    let datasets =
        m.get("datasets").and_then(Value::as_array).ok_or("a 0.6 multiscale without datasets")?;
    let mut transforms = Vec::new();
    for d in datasets {
        let list = d.get("coordinateTransformations").and_then(Value::as_array);
        let [t] = list.map(Vec::as_slice).unwrap_or_default() else {
            return Err("a 0.6 dataset without exactly one transformation".into());
        };
        transforms.push(t);
    }
    let output_of = |t: &Value| t.get("output")?.get("name")?.as_str().map(str::to_owned);
    let outputs: Vec<Option<String>> = transforms.iter().map(|t| output_of(t)).collect();
    let output = match outputs.first() {
        Some(Some(first)) if outputs.iter().all(|o| o.as_ref() == Some(first)) => first,
        Some(Some(_)) => {
            return Err("0.6 datasets that map into different coordinate systems".into())
        }
        _ => return Err("a 0.6 dataset transformation without an output name".into()),
    };
    let systems = m.get("coordinateSystems").and_then(Value::as_array);
    let system = systems
        .into_iter()
        .flatten()
        .find(|s| s.get("name").and_then(Value::as_str) == Some(output.as_str()))
        .ok_or_else(|| format!("0.6 coordinate system {output:?} is not defined"))?;
    let axes = system
        .get("axes")
        .and_then(Value::as_array)
        .ok_or("a 0.6 coordinate system without axes")?;
    let axes = axes.iter().map(axis_0_4).collect::<Result<Vec<_>, _>>()?;
    let mut out_datasets = Vec::new();
    for (d, t) in datasets.iter().zip(transforms) {
        let mut dataset = d.as_object().cloned().unwrap_or_default();
        dataset.insert(
            "coordinateTransformations".into(),
            Value::Array(transform_0_4(t, axes.len())?),
        );
        out_datasets.push(Value::Object(dataset));
    }
    let mut out = Map::new();
    for (k, v) in m {
        match k.as_str() {
            "coordinateSystems" => {}
            "datasets" => {
                out.insert("axes".into(), Value::Array(axes.clone()));
                out.insert(k.clone(), Value::Array(out_datasets.clone()));
            }
            _ => {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    out.insert("version".into(), json!(VERSION));
    Ok(out)
}

/// A 0.6 axis with only what 0.4 knows (name, type, unit).
fn axis_0_4(a: &Value) -> Result<Value, String> {
    let a = a.as_object().ok_or("a 0.6 axis that is not an object")?;
    if a.get("type").and_then(Value::as_str) == Some("array") {
        return Err("0.6 array-type axes have no 0.4 form".into());
    }
    let mut out = Map::new();
    for key in ["name", "type", "unit"] {
        if let Some(v) = a.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    Ok(Value::Object(out))
}

/// One 0.6 dataset transformation as 0.4's list: identity -> a unit scale over `ndim` axes;
/// scale -> scale; sequence [scale, translation] -> both. `input`, `output` and `name` are
/// dropped.
fn transform_0_4(t: &Value, ndim: usize) -> Result<Vec<Value>, String> {
    let kind = t.get("type").and_then(Value::as_str).unwrap_or("");
    let plain = |t: &Value, key: &str| -> Result<Value, String> {
        let values = t.get(key).and_then(Value::as_array).ok_or_else(|| {
            format!("a 0.6 {key} transformation without inline values has no 0.4 form")
        })?;
        Ok(json!({ "type": key, key: values }))
    };
    match kind {
        "scale" => Ok(vec![plain(t, "scale")?]),
        "identity" => Ok(vec![json!({ "type": "scale", "scale": vec![1.0; ndim] })]),
        "sequence" => {
            let parts = t.get("transformations").and_then(Value::as_array);
            match parts.map(Vec::as_slice) {
                Some([s, tr])
                    if s.get("type").and_then(Value::as_str) == Some("scale")
                        && tr.get("type").and_then(Value::as_str) == Some("translation") =>
                {
                    Ok(vec![plain(s, "scale")?, plain(tr, "translation")?])
                }
                _ => Err("a 0.6 sequence other than scale then translation".into()),
            }
        }
        other => Err(format!("a 0.6 {other:?} transformation has no 0.4 form")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn axes() -> Value {
        json!([{"name": "c", "type": "channel"}, {"name": "y", "type": "space", "unit": "micrometer"},
               {"name": "x", "type": "space", "unit": "micrometer"}])
    }

    fn datasets() -> Value {
        json!([
            {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0, 0.5, 0.5]}]},
            {"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [1.0, 1.0, 1.0]},
                                                       {"type": "translation", "translation": [0.0, 0.25, 0.25]}]}
        ])
    }

    #[test]
    fn image_0_5_becomes_0_4() {
        let attrs = obj(json!({
            "ome": {"version": "0.5",
                    "multiscales": [{"name": "img", "axes": axes(), "datasets": datasets()}],
                    "omero": {"channels": [{"label": "DAPI", "color": "0000FF"}]}},
            "other": 1,
            "multiscales": "stale"
        }));
        let got = group_attributes(attrs, OmeInV2::Translate).unwrap();
        assert_eq!(
            Value::Object(got),
            json!({
                "other": 1,
                "multiscales": [{"name": "img", "axes": axes(), "datasets": datasets(), "version": "0.4"}],
                "omero": {"channels": [{"label": "DAPI", "color": "0000FF"}], "version": "0.4"}
            })
        );
    }

    #[test]
    fn labels_plates_wells_and_unknown_members() {
        let cases = [
            (json!({"labels": ["cells"]}), json!({"labels": ["cells"]})),
            (
                json!({"image-label": {"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]}}),
                json!({"image-label": {"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}],
                       "version": "0.4"}}),
            ),
            (
                json!({"plate": {"rows": [{"name": "A"}], "columns": [{"name": "1"}],
                                 "wells": [{"path": "A/1", "rowIndex": 0, "columnIndex": 0}]}}),
                json!({"plate": {"rows": [{"name": "A"}], "columns": [{"name": "1"}],
                                 "wells": [{"path": "A/1", "rowIndex": 0, "columnIndex": 0}],
                                 "version": "0.4"}}),
            ),
            (
                json!({"well": {"images": [{"path": "0"}]}}),
                json!({"well": {"images": [{"path": "0"}], "version": "0.4"}}),
            ),
            (
                json!({"bioformats2raw.layout": 3, "series": ["0"], "custom": {"a": 1}}),
                json!({"bioformats2raw.layout": 3, "series": ["0"], "custom": {"a": 1}}),
            ),
        ];
        for (members, want) in cases {
            let mut ome = obj(members);
            ome.insert("version".into(), json!("0.5"));
            let attrs = obj(json!({ "ome": ome }));
            let got = group_attributes(attrs, OmeInV2::Translate).unwrap();
            assert_eq!(Value::Object(got), want);
        }
    }

    #[test]
    fn kept_and_not_ome() {
        let attrs = obj(json!({"ome": {"version": "0.5", "labels": ["a"]}}));
        assert_eq!(group_attributes(attrs.clone(), OmeInV2::Keep).unwrap(), attrs);
        let plain = obj(json!({"title": "t", "multiscales": [1]}));
        assert_eq!(group_attributes(plain.clone(), OmeInV2::Translate).unwrap(), plain);
        // `ome` that is not an object is not OME metadata.
        let odd = obj(json!({"ome": "x"}));
        assert_eq!(group_attributes(odd.clone(), OmeInV2::Translate).unwrap(), odd);
    }

    #[test]
    fn an_absent_version_is_0_5() {
        let attrs = obj(json!({"ome": {"labels": ["cells"]}}));
        let got = group_attributes(attrs, OmeInV2::Translate).unwrap();
        assert_eq!(Value::Object(got), json!({"labels": ["cells"]}));
    }

    #[test]
    fn unknown_versions_are_left_as_they_are() {
        for version in [json!("0.4"), json!("1.0"), json!(5), Value::Null] {
            let attrs = obj(json!({"ome": {"version": version, "labels": ["a"]}}));
            let (kept, why) = group_attributes(attrs.clone(), OmeInV2::Translate).unwrap_err();
            assert_eq!(kept, attrs);
            assert!(why.contains("version"), "{why}");
        }
    }

    fn ms_0_6(datasets: Value, extra: Value) -> Map<String, Value> {
        let mut ms = obj(json!({
            "name": "img",
            "coordinateSystems": [
                {"name": "physical", "axes": [
                    {"name": "y", "type": "space", "unit": "micrometer", "discrete": false},
                    {"name": "x", "type": "space", "unit": "micrometer"}]},
                {"name": "other", "axes": [{"name": "u", "type": "space"}, {"name": "v", "type": "space"}]}
            ],
            "datasets": datasets
        }));
        for (k, v) in obj(extra) {
            ms.insert(k, v);
        }
        obj(json!({"ome": {"version": "0.6", "multiscales": [ms]}}))
    }

    fn io(path: &str) -> (Value, Value) {
        (json!({"path": path}), json!({"name": "physical"}))
    }

    #[test]
    fn expressible_0_6_is_translated() {
        let (i0, o0) = io("0");
        let (i1, o1) = io("1");
        let attrs = ms_0_6(
            json!([
                {"path": "0", "coordinateTransformations": [
                    {"type": "scale", "scale": [0.5, 0.5], "input": i0, "output": o0}]},
                {"path": "1", "coordinateTransformations": [
                    {"type": "sequence", "input": i1, "output": o1, "transformations": [
                        {"type": "scale", "scale": [1.0, 1.0]},
                        {"type": "translation", "translation": [0.25, 0.25]}]}]}
            ]),
            json!({}),
        );
        let got = group_attributes(attrs, OmeInV2::Translate).unwrap();
        assert_eq!(
            Value::Object(got),
            json!({"multiscales": [{
                "name": "img",
                "axes": [{"name": "y", "type": "space", "unit": "micrometer"},
                         {"name": "x", "type": "space", "unit": "micrometer"}],
                "datasets": [
                    {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [0.5, 0.5]}]},
                    {"path": "1", "coordinateTransformations": [
                        {"type": "scale", "scale": [1.0, 1.0]},
                        {"type": "translation", "translation": [0.25, 0.25]}]}
                ],
                "version": "0.4"
            }]})
        );
    }

    #[test]
    fn inexpressible_0_6_is_left_with_a_reason() {
        let (i0, o0) = io("0");
        let scale = json!({"type": "scale", "scale": [0.5, 0.5], "input": i0, "output": o0});
        let cases = [
            // a transformation 0.4 has no form for
            json!([{"path": "0", "coordinateTransformations": [
                {"type": "affine", "affine": [[1, 0, 0], [0, 1, 0]], "input": i0, "output": o0}]}]),
            // two outputs
            json!([{"path": "0", "coordinateTransformations": [scale]},
                   {"path": "1", "coordinateTransformations": [
                       {"type": "scale", "scale": [1, 1], "input": {"path": "1"}, "output": {"name": "other"}}]}]),
            // translation before scale
            json!([{"path": "0", "coordinateTransformations": [
                {"type": "sequence", "input": i0, "output": o0, "transformations": [
                    {"type": "translation", "translation": [1, 1]}, {"type": "scale", "scale": [1, 1]}]}]}]),
            // an undefined output system
            json!([{"path": "0", "coordinateTransformations": [
                {"type": "scale", "scale": [1, 1], "input": i0, "output": {"name": "nowhere"}}]}]),
            // scale values in an array instead of inline
            json!([{"path": "0", "coordinateTransformations": [
                {"type": "scale", "path": "s.zarr", "input": i0, "output": o0}]}]),
        ];
        for datasets in cases {
            let attrs = ms_0_6(datasets.clone(), json!({}));
            let (kept, why) = group_attributes(attrs.clone(), OmeInV2::Translate)
                .expect_err(&datasets.to_string());
            assert_eq!(kept, attrs);
            assert!(why.contains("0.6"), "{why}");
        }
        // a multiscale-level transformation between coordinate systems
        let attrs = ms_0_6(
            json!([{"path": "0", "coordinateTransformations": [scale]}]),
            json!({"coordinateTransformations": [
                {"type": "scale", "scale": [2, 2], "input": {"name": "physical"}, "output": {"name": "other"}}]}),
        );
        assert!(group_attributes(attrs, OmeInV2::Translate).is_err());
    }
}
