//! The jinja2 subset of kerchunk reference templates (`store::backends::reference::template`).
//!
//! Input: up to the first NUL, `NAME=VALUE` lines of global templates (at most 8); then one
//! template to render with the `gen` dimensions `i`, `j` bound to the next two bytes.
//!
//! Invariants: no panic, no unbounded output (rendering is linear in the template and its
//! values: the output is at most 64 times the input); a template without `{{` renders as it is.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use zarr_mount::store::backends::reference::template::{render, Scope};

fuzz_target!(init: zarr_mount_fuzz::init(), |data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (globals, rest) = text.split_once('\0').unwrap_or(("", text));
    let global: HashMap<String, String> = globals
        .lines()
        .take(8)
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut chars = rest.chars();
    let i = chars.next().map_or(0, |c| i64::from(u32::from(c) % 1000));
    let j = chars.next().map_or(0, |c| i64::from(u32::from(c) % 1000) - 500);
    let template: String = chars.collect();
    let local = [("i".to_string(), i), ("j".to_string(), j)];
    let scope = Scope { global: &global, local: &local };
    if let Ok(out) = render(&template, &scope) {
        assert!(out.len() <= 64 * (data.len() + 32), "{} bytes from {}", out.len(), data.len());
        if !template.contains("{{") && !template.contains("{%") && !template.contains("{#") {
            assert_eq!(out, template);
        }
    }
});
