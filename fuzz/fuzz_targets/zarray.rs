//! v2 metadata: `.zarray` parsing (`zarr::metadata::parse_zarray`, `zarr::v2::V2Array::parse` and
//! its v3 codec chain `chunk_spec`), the decoded view's rewritten `.zarray` and `.zmetadata`
//! (`views::presented::mapping::decoded`), and the unsharded view's `.zmetadata` rewrite
//! (`views::unsharded::mapping`).
//!
//! Input: the bytes of one document, tried both as a `.zarray` and as a `.zmetadata`.
//!
//! Invariants: `V2Array::parse` accepts only what `parse_zarray` accepts; chunk keys
//! round-trip; a checked chunk spec decodes chunks of exactly `prod(chunks) * itemsize` bytes;
//! the decoded view's `.zarray` parses again as a little-endian, C-order, uncompressed array of
//! the same shape, chunks and data type.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use zarr_mount::python_json;
use zarr_mount::views::presented::mapping::decoded::DecodedPresenter;
use zarr_mount::views::presented::mapping::{DirDocs, DirShow, Presenter};
use zarr_mount::views::unsharded::mapping::rewrite_zmetadata_v2;
use zarr_mount::zarr::codecs::decoded_size;
use zarr_mount::zarr::metadata::parse_zarray;
use zarr_mount::zarr::v2::V2Array;

fuzz_target!(init: zarr_mount_fuzz::init(), |data: &[u8]| {
    let plain = parse_zarray(data);
    if let Ok(a) = V2Array::parse(data) {
        assert!(plain.is_ok());
        array(&a, data);
    }
    // As a group's consolidated metadata.
    let docs = DirDocs {
        zgroup: Some(Bytes::from_static(b"{\"zarr_format\":2}")),
        zmetadata: Some(Bytes::copy_from_slice(data)),
        ..Default::default()
    };
    if let DirShow::Group(files) = DecodedPresenter.present("fuzz", &docs) {
        let doc = files.get(".zmetadata").expect("a rewritten group shows .zmetadata");
        let doc = python_json::parse(doc).expect(".zmetadata is JSON");
        assert!(doc.get("metadata").is_some_and(Value::is_object));
    }
    if let Ok(Value::Object(mut doc)) = python_json::parse(data) {
        rewrite_zmetadata_v2(&mut doc);
    }
});

fn array(a: &V2Array, data: &[u8]) {
    assert_eq!(a.chunks.len(), a.shape.len());
    assert!(!a.chunks.contains(&0));
    // Chunk keys round-trip.
    let enc = a.key_encoding();
    let last: Vec<u64> =
        a.shape.iter().zip(&a.chunks).map(|(s, c)| s.div_ceil(*c).saturating_sub(1)).collect();
    assert_eq!(enc.decode(&enc.encode(&last), last.len()), Some(last));

    let Ok(spec) = a.chunk_spec() else { return };
    let size = decoded_size(&a.data_type, &a.chunks).expect("checked spec has a size");
    assert_eq!(spec.decoded_size().unwrap(), size);
    assert_eq!(spec.fill_value.len(), a.data_type.itemsize);

    let docs = DirDocs { zarray: Some(Bytes::copy_from_slice(data)), ..Default::default() };
    let DirShow::Array(show) = DecodedPresenter.present("fuzz", &docs) else {
        panic!("a decodable .zarray is not shown decoded")
    };
    let shown = show.files.get(".zarray").expect("decoded .zarray");
    let shown = V2Array::parse(shown).expect("decoded .zarray parses");
    assert!(!shown.big_endian && !shown.order_f);
    assert_eq!(
        (&shown.shape, &shown.chunks, &shown.data_type),
        (&a.shape, &a.chunks, &a.data_type)
    );
    let shown_spec = shown.chunk_spec().expect("decoded .zarray has a chunk spec");
    assert_eq!(
        shown_spec.codecs.len(),
        1,
        "decoded .zarray still has codecs: {:?}",
        shown_spec.codecs
    );
    assert_eq!(shown_spec.decoded_size().unwrap(), size);
    let decode = show.stored().and_then(|s| s.decode.as_ref());
    assert_eq!(decode.map(|s| s.base().decoded_size().unwrap()), Some(size));
}
