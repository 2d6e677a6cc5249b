//! The OME-Zarr translation of the v2 views (`views::presented::mapping::ome::group_attributes`):
//! 0.5 and 0.6 attributes written as 0.4.
//!
//! Input: a group's attributes as JSON (an object with an `ome` member to translate).
//!
//! Invariants: no panic; a translation keeps every attribute but `ome` and adds no `ome`; what
//! it gives is JSON again (written and read back the same); a refusal hands the attributes
//! back unchanged, with a reason; `keep` changes nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use zarr_mount::python_json;
use zarr_mount::views::presented::mapping::ome::{group_attributes, OmeInV2};

fuzz_target!(init: zarr_mount_fuzz::init(), |data: &[u8]| {
    let Ok(Value::Object(attrs)) = python_json::parse(data) else { return };
    assert_eq!(group_attributes(attrs.clone(), OmeInV2::Keep).expect("keep"), attrs);
    match group_attributes(attrs.clone(), OmeInV2::Translate) {
        Ok(out) => {
            let had_ome = matches!(attrs.get("ome"), Some(Value::Object(_)));
            if had_ome {
                for (k, v) in &attrs {
                    if k != "ome" && !out.contains_key(k) {
                        panic!("attribute {k:?} lost: {v}");
                    }
                }
            } else {
                assert_eq!(out, attrs);
            }
            let text = python_json::to_vec(&Value::Object(out.clone()));
            assert_eq!(python_json::parse(&text).expect("translated attributes parse"), Value::Object(out));
        }
        Err((back, why)) => {
            assert_eq!(back, attrs);
            assert!(!why.is_empty());
        }
    }
});
