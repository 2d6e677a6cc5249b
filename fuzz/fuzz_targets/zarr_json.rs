//! v3 `zarr.json` parsing (`zarr::metadata::parse_zarr_json`) and everything the views derive from
//! a parsed document: the unsharded view's rewritten metadata and key mapping
//! (`views::unsharded::mapping`), the decoded view's document and chunk spec
//! (`views::presented::mapping::decoded`), the v2 view's `.zarray`/`.zattrs`/`.zmetadata`
//! (`views::presented::mapping::v2`), and inline consolidated metadata.
//!
//! Input: the bytes of one `zarr.json`.
//!
//! Invariants: Python's JSON (`python_json`) reads back what it writes; parsing is a function of
//! the JSON value (re-serialising parses to the same thing); the unsharded rewrite changes only the
//! chunk grid and codecs, into the inner chunk shape and chain, and its key mapping round-trips
//! (key -> coordinates -> shard and index entry -> coordinates, and the directory plans lead to the
//! key); what the decoded and v2 views generate parses again and describes the same data type and
//! decoded chunk size.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use zarr_mount::python_json;
use zarr_mount::views::presented::mapping::decoded::{decoded_v3_array, rewrite_consolidated, DecodedPresenter};
use zarr_mount::views::presented::mapping::{ChunkShow, DirDocs, DirShow, Presenter};
use zarr_mount::views::unsharded::mapping::{rewrite_consolidated_v3, UnshardedArray};
use zarr_mount::views::presented::mapping::v2::{v2_array, V2Presenter};
use zarr_mount::zarr::chunk_specs::ChunkSpecs;
use zarr_mount::zarr::codecs::decoded_size;
use zarr_mount::zarr::data_type::DataType;
use zarr_mount::zarr::metadata::{parse_zarr_json, ArrayMetadata, NodeMetadata};
use zarr_mount::zarr::sharding::MAX_INDEX_ENTRIES;
use zarr_mount::zarr::v2::V2Array;

fuzz_target!(init: zarr_mount_fuzz::init(), |data: &[u8]| {
    // Python's JSON: what parses is written back to the same value.
    if let Ok(v) = python_json::parse(data) {
        assert_eq!(python_json::parse(&python_json::to_vec(&v)).expect("written JSON parses"), v);
    }
    let Ok(node) = parse_zarr_json(data) else {
        presenters(data);
        return;
    };
    // Parsing depends only on the JSON value.
    let json = match &node {
        NodeMetadata::Array(a) => &a.json,
        NodeMetadata::Group(g) => &g.json,
    };
    let again = python_json::to_vec(&Value::Object(json.clone()));
    assert_eq!(parse_zarr_json(&again).expect("re-serialized document parses"), node);

    match node {
        NodeMetadata::Array(meta) => array(meta),
        NodeMetadata::Group(group) => {
            let mut j = group.json.clone();
            rewrite_consolidated_v3(&mut j);
            let mut j = group.json;
            rewrite_consolidated(&mut j);
        }
    }
    presenters(data);
});

fn array(meta: ArrayMetadata) {
    if let Some(cs) = &meta.chunk_shape() {
        assert_eq!(cs.len(), meta.shape.len());
        assert!(!cs.contains(&0));
    }
    if let Some(counts) = meta.chunk_counts() {
        assert_eq!(counts.len(), meta.shape.len());
    }
    if let Ok(a) = UnshardedArray::new(meta.clone()) {
        unsharded(&a);
    }
    if let Ok(specs) = ChunkSpecs::from_v3(&meta) {
        // A rectilinear grid's chunks: the first one decodes at its own shape.
        if let Some(grid) = specs.varying() {
            if let Some(first) = grid.counts().iter().all(|&n| n > 0).then(|| vec![0; grid.ndim()])
            {
                let spec = specs.of(&first).expect("inside the grid");
                assert_eq!(spec.chunk_shape, grid.chunk_shape(&first).unwrap());
                spec.decoded_size().expect("checked spec has a size");
            }
        }
        let spec = specs.base();
        let size = spec.decoded_size().expect("checked spec has a size");
        if size <= 1 << 20 {
            assert_eq!(spec.fill_chunk().expect("checked spec fills").len() as u64, size);
        }
        let (doc, _) = decoded_v3_array(&meta).expect("decodable array has a decoded form");
        let doc = python_json::to_vec(&Value::Object(doc));
        let Ok(NodeMetadata::Array(shown)) = parse_zarr_json(&doc) else {
            panic!("decoded zarr.json does not parse")
        };
        let shown = ChunkSpecs::from_v3(&shown).expect("decoded zarr.json is decodable");
        assert_eq!(shown.base().codecs.len(), 1);
        assert_eq!(shown.base().decoded_size().unwrap(), size);
    }
    // V2Array (the v2 reader side) takes the core data types only; the v2 view also shows
    // datetimes, strings and the like (issue 18).
    if let (Ok(form), Ok(dt)) = (v2_array(&meta), DataType::from_json(&meta.data_type)) {
        let doc = python_json::to_vec(&Value::Object(form.zarray));
        let v2 = V2Array::parse(&doc).expect("generated .zarray parses");
        assert_eq!(v2.data_type, dt);
        // A truly rectilinear array is re-tiled on its longest chunks.
        let tile = meta.chunk_grid.truly_rectilinear().map(|g| g.largest_chunk());
        assert_eq!(Some(v2.chunks.clone()), tile.or(meta.chunk_shape()));
        assert_eq!(v2.shape, meta.shape);
        if matches!(&form.chunks, ChunkShow::Stored(s) if s.decode.is_none()) {
            // The stored chunks are served as they are (a trailing crc32c cut off), so the v2
            // document describes them; numcodecs codecs the daemon does not decode are
            // written in v2 all the same, so only a spec that exists is checked.
            if let Ok(spec) = v2.chunk_spec() {
                assert_eq!(spec.decoded_size().ok(), decoded_size(&dt, &v2.chunks).ok());
            }
        }
    }
}

fn unsharded(a: &UnshardedArray) {
    let layout = &a.sharding.largest;
    assert!(layout.n_entries <= MAX_INDEX_ENTRIES);
    let doc = a.rewritten_metadata();
    let Ok(NodeMetadata::Array(shown)) = parse_zarr_json(&a.rewritten_zarr_json()) else {
        panic!("rewritten zarr.json does not parse")
    };
    assert_eq!(shown.shape, a.meta.shape);
    assert_eq!(shown.chunk_shape().as_ref(), Some(&layout.inner_chunk_shape));
    assert_eq!(shown.codecs, layout.inner_codecs);
    assert_eq!(shown.key_encoding, a.meta.key_encoding);
    // Every other key kept, in place.
    let keys = |m: &Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&doc), keys(&a.meta.json));
    for (k, v) in &a.meta.json {
        if k != "codecs" && k != "chunk_grid" {
            assert_eq!(&doc[k], v, "{k} changed");
        }
    }

    // Key mapping at the corners of the inner grid.
    let grid = a.inner_grid_shape().to_vec();
    if grid.contains(&0) {
        return;
    }
    let corners = [
        grid.iter().map(|_| 0).collect::<Vec<u64>>(),
        grid.iter().map(|n| n - 1).collect(),
        grid.iter().map(|n| n / 2).collect(),
    ];
    for c in corners {
        let key = a.inner_key(&c);
        assert_eq!(a.parse_inner_key(&key), Some(c.clone()), "key {key}");
        let loc = a.locate(&c).expect("inside the grid");
        let shard = a.layout_of(&loc.shard_coords).expect("a shard of the grid");
        assert!(loc.local_index < shard.n_entries);
        assert_eq!(a.inner_coords(&loc.shard_coords, loc.local_index), Some(c.clone()));
        assert_eq!(a.shard_coords_of_key(&loc.shard_key), Some(loc.shard_coords.clone()));
        // Listing: from the array directory down, each directory's plan names the next
        // component of the key and consults the chunk's shard.
        let comps: Vec<&str> = key.split('/').collect();
        for depth in 0..comps.len() {
            let dir = comps[..depth].join("/");
            let plan =
                a.dir_plan(&dir).unwrap_or_else(|| panic!("no plan for {dir:?} above {key}"));
            assert!(
                plan.shards.iter().zip(&loc.shard_coords).all(|(r, s)| r.contains(s)),
                "plan of {dir:?} misses shard {:?}",
                loc.shard_coords
            );
            let child =
                a.child_in_dir(&plan, &c).unwrap_or_else(|| panic!("{key} not a child of {dir:?}"));
            let rest = comps[depth..].join("/");
            if child.is_dir {
                assert_eq!(child.name, comps[depth]);
            } else {
                assert_eq!(child.name, rest, "file name in {dir:?}");
                break;
            }
        }
    }
}

/// The decoded and v2 presenters over the document as a directory's `zarr.json`: whatever
/// they generate is JSON.
fn presenters(data: &[u8]) {
    let docs = DirDocs { zarr_json: Some(Bytes::copy_from_slice(data)), ..Default::default() };
    for show in
        [DecodedPresenter.present("fuzz", &docs), V2Presenter::default().present("fuzz", &docs)]
    {
        let files = match &show {
            DirShow::Group(f) => f,
            DirShow::Array(a) => &a.files,
            DirShow::PassThrough | DirShow::Hidden => continue,
        };
        for (name, content) in &files.generated {
            assert!(python_json::parse(content).is_ok(), "{name} is not JSON");
        }
    }
}
