"""Checks of the fixtures and of the Python reference model (no binary needed).

These validate the checker itself: the independent shard-index parser and key mapping in
zarr_view_ref.py must find every inner chunk the writers stored, so that a reference view
materialised on disk reads back, with zarr-python and tensorstore, exactly like the original.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
import zarr

import zarr_view_ref as ref
from zm_harness import fixture_array_paths
from zm_readers import (
    assert_looks_unpacked,
    assert_same_array,
    entry_for,
    ts_read,
    zp_open_via_consolidated,
    zp_read,
)

ARRAYS = fixture_array_paths()


@pytest.fixture(scope="module")
def reference_dir(fixtures_dir, tmp_path_factory) -> Path:
    """The unsharded view as the reference model says it must be, written to a plain dir."""
    out = tmp_path_factory.mktemp("reference-view")
    ref.write_view(ref.reference_view(fixtures_dir), out)
    return out


# --------------------------------------------------------------------------- key mapping


@pytest.mark.parametrize(
    "coords, encoding, key",
    [
        ((1, 0, 2), ("default", "/"), "c/1/0/2"),
        ((1, 0, 2), ("default", "."), "c.1.0.2"),
        ((1, 0, 2), ("v2", "."), "1.0.2"),
        ((1, 0, 2), ("v2", "/"), "1/0/2"),
        ((), ("default", "/"), "c"),
        ((), ("v2", "."), "0"),
        ((12,), ("default", "/"), "c/12"),
    ],
)
def test_chunk_key(coords, encoding, key):
    assert ref.chunk_key(coords, encoding) == key


@pytest.mark.parametrize(
    "meta, expected",
    [
        ({"zarr_format": 3}, ("default", "/")),
        ({"zarr_format": 3, "chunk_key_encoding": {"name": "default"}}, ("default", "/")),
        ({"zarr_format": 3, "chunk_key_encoding": {"name": "v2"}}, ("v2", ".")),
        ({"zarr_format": 3, "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "/"}}}, ("v2", "/")),
        ({"zarr_format": 3, "chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}}},
         ("default", ".")),
        ({"zarr_format": 2}, ("v2", ".")),
        ({"zarr_format": 2, "dimension_separator": "/"}, ("v2", "/")),
    ],
)
def test_key_encoding(meta, expected):
    assert ref.key_encoding(meta) == expected


# --------------------------------------------------------------------------- fixture inventory


def test_manifest_lists_every_array(manifest, fixtures_dir):
    assert [e["path"] for e in manifest["arrays"]] == list(ARRAYS)
    for e in manifest["arrays"]:
        d = fixtures_dir / e["path"]
        assert (d / "zarr.json").is_file() or (d / ".zarray").is_file(), e["path"]


def test_manifest_agrees_with_metadata(manifest, fixtures_dir):
    for e in manifest["arrays"]:
        d = fixtures_dir / e["path"]
        if e["zarr_format"] == 2:
            meta = json.loads((d / ".zarray").read_text())
            assert meta["shape"] == e["shape"] and e["sharded"] is False
            continue
        meta = json.loads((d / "zarr.json").read_text())
        assert meta["shape"] == e["shape"], e["path"]
        assert e["unpack"] == ref.unpack_decision(meta)[0], e["path"]
        assert ref.key_encoding(meta) == (e["chunk_key_encoding"]["name"], e["chunk_key_encoding"]["separator"])
        if e["sharded"]:
            lay = ref.shard_layout(meta)
            assert list(lay.shard_shape) == e["shard_shape"], e["path"]
            assert list(lay.chunk_shape) == e["inner_chunk_shape"], e["path"]
            assert lay.index_location == e["index_location"], e["path"]
            assert lay.index_crc == e["index_crc32c"], e["path"]
            assert [c["name"] for c in lay.inner_codecs] == e["inner_codecs"], e["path"]


def test_fixture_coverage(manifest):
    """The fixtures cover what issue 5 asks for; a generator change that drops a case fails here."""
    arrays = manifest["arrays"]
    sharded = [e for e in arrays if e["sharded"] and e["unpack"]]

    def has(pred):
        return any(pred(e) for e in sharded)

    for loc in ("start", "end"):
        for writer in ("zarr-python", "tensorstore"):
            assert has(lambda e: e["index_location"] == loc and e["writer"] == writer), (loc, writer)
    for codec in ("blosc", "zstd", "gzip", "crc32c", "sharding_indexed"):
        assert has(lambda e: codec in e["inner_codecs"]), codec
    assert has(lambda e: e["inner_codecs"] == ["bytes"]), "no-compression inner chain"
    assert has(lambda e: not e["index_crc32c"]), "index without crc32c"
    for enc in (("default", "/"), ("default", "."), ("v2", "."), ("v2", "/")):
        assert has(lambda e: (e["chunk_key_encoding"]["name"], e["chunk_key_encoding"]["separator"]) == enc), enc
    for ndim in range(0, 5):
        assert has(lambda e: len(e["shape"]) == ndim), f"{ndim}-d sharded array"
    assert has(lambda e: any(s % c for s, c in zip(e["shape"], e["shard_shape"]))), "ragged edge"
    assert has(lambda e: e["write_empty_chunks"]), "write_empty_chunks=True"
    assert has(lambda e: e["consolidated_root"]), "consolidated parent"
    assert has(lambda e: e["writer"] == "tensorstore" and e["index_location"] == "end"
               and "zstd" in e["inner_codecs"])
    assert has(lambda e: e["writer"] == "tensorstore" and e["index_location"] == "start"
               and "crc32c" in e["inner_codecs"])
    assert any(e["zarr_format"] == 2 for e in arrays), "v2 array"
    assert any(e["zarr_format"] == 3 and not e["sharded"] for e in arrays), "unsharded v3 array"
    assert any(e["sharded"] and not e["unpack"] for e in arrays), "non-unpackable sharded array"
    assert any(e["path"] == "zp/empty" for e in arrays)
    assert any(g["attributes"] for g in manifest["groups"])
    assert any(e["attributes"] for e in arrays)


def test_big_endian_fixture_is_big_endian(fixtures_dir):
    meta = json.loads((fixtures_dir / "zp/i16_bigendian_gzip_start/zarr.json").read_text())
    inner = ref.shard_layout(meta).inner_codecs
    assert inner[0] == {"name": "bytes", "configuration": {"endian": "big"}}


# --------------------------------------------------------------------------- parser vs writers


@pytest.mark.parametrize("path", ARRAYS)
def test_reference_view_reads_like_original(path, manifest, fixtures_dir, reference_dir):
    """zarr-python (and tensorstore) read the reference view exactly like the source.

    If the parser missed, misplaced or mis-sliced an inner chunk, or mapped it to the wrong
    key, this read differs (absent chunks read as the fill value)."""
    e = entry_for(manifest, path)
    native = zp_read(fixtures_dir, path)
    view = zarr.open_array(str(reference_dir / path), mode="r")
    assert_same_array(view[...], native, f"zarr-python, reference view of {path}")
    if e["unpack"]:
        assert_looks_unpacked(view, e, f"reference view of {path}")
    if e["tensorstore_readable"]:
        assert_same_array(ts_read(reference_dir, e), native, f"tensorstore, reference view of {path}")
    if e["consolidated_root"]:
        arr = zp_open_via_consolidated(reference_dir, e)
        assert_same_array(arr[...], native, f"consolidated reference view of {path}")
        if e["unpack"]:
            assert_looks_unpacked(arr, e, f"consolidated reference view of {path}")


def test_parser_accounts_for_every_stored_chunk(manifest, fixtures_dir):
    """In every stored shard of every unpackable array, the index names byte ranges that lie
    inside the shard, do not overlap each other or the index, and the shard is not empty."""
    checked = 0
    for e in manifest["arrays"]:
        if not (e["sharded"] and e["unpack"]):
            continue
        d = fixtures_dir / e["path"]
        meta = json.loads((d / "zarr.json").read_text())
        lay = ref.shard_layout(meta)
        for coord, key in ref.shard_keys(meta):
            p = d / key
            if not p.is_file():
                continue
            shard = p.read_bytes()
            where = f"{e['path']}/{key}"
            ranges = sorted(x for x in ref.parse_index(shard, lay) if x is not None)
            assert ranges, f"{where}: a stored shard with no chunks (writers delete empty shards)"
            idx_lo = 0 if lay.index_location == "start" else len(shard) - lay.index_size
            for (o1, n1), (o2, _) in zip(ranges, ranges[1:]):
                assert o1 + n1 <= o2, f"{where}: overlapping inner chunks"
            for o, n in ranges:
                assert o + n <= idx_lo or o >= idx_lo + lay.index_size, f"{where}: chunk overlaps index"
            checked += 1
    assert checked > 100


def test_shrunk_array_hides_chunks_past_edge(fixtures_dir):
    d = fixtures_dir / "zp/shrunk_stored_past_edge"
    meta = json.loads((d / "zarr.json").read_text())
    outside = []
    for coord, key in ref.shard_keys(meta):
        if (d / key).is_file():
            for g, data, inside in ref.inner_chunks_of_shard((d / key).read_bytes(), coord, meta):
                if data is not None and not inside:
                    outside.append(g)
    assert outside, "fixture no longer stores inner chunks past the array edge"
    keys = ref.expected_inner_chunks(d, meta)
    enc = ref.key_encoding(meta)
    for g in outside:
        assert ref.chunk_key(g, enc) not in keys


def test_write_empty_chunks_stores_fill_chunks(fixtures_dir):
    def keys(name):
        d = fixtures_dir / "zp" / name
        return set(ref.expected_inner_chunks(d, json.loads((d / "zarr.json").read_text())))

    omit, keep = keys("sparse_omit_fill"), keys("sparse_write_empty")
    assert omit < keep, "write_empty_chunks=True must store more inner chunks"
    # shard (2,4) was written with fill only: inner chunks (4..5, 8..9)
    assert "c/4/8" in keep and "c/4/8" not in omit
    # the fill-valued inner chunk (2,2) inside written shard (1,1)
    assert "c/2/2" in keep and "c/2/2" not in omit
    assert not (fixtures_dir / "zp/sparse_omit_fill/c/2/4").exists(), "all-fill shard must not be stored"


def test_nested_sharding_inner_chunks_are_shards(fixtures_dir):
    d = fixtures_dir / "zp/nested_sharding"
    meta = json.loads((d / "zarr.json").read_text())
    view_meta = ref.rewritten_metadata(meta)
    assert view_meta["codecs"][0]["name"] == "sharding_indexed"
    inner = ref.expected_inner_chunks(d, meta)
    assert inner
    for key, data in inner.items():
        # each inner chunk is itself a shard whose index (at start) parses
        ref.parse_index(data, ref.shard_layout(view_meta))


# --------------------------------------------------------------------------- corruption


def _flip_index_byte(shard: bytes, lay: ref.ShardLayout) -> bytes:
    pos = 3 if lay.index_location == "start" else len(shard) - lay.index_size + 3
    b = bytearray(shard)
    b[pos] ^= 0x40
    return bytes(b)


@pytest.mark.parametrize("path", ["zp/i32_end_blosc_lz4_shuffle", "zp/i32_start_blosc_zstd_bitshuffle"])
def test_parser_rejects_corrupt_index(path, fixtures_dir):
    d = fixtures_dir / path
    meta = json.loads((d / "zarr.json").read_text())
    lay = ref.shard_layout(meta)
    shard = (d / "c/1/1").read_bytes()
    assert len(ref.parse_index(shard, lay)) == lay.n
    with pytest.raises(ref.CorruptShard, match="crc32c"):
        ref.parse_index(_flip_index_byte(shard, lay), lay)
    with pytest.raises(ref.CorruptShard):
        ref.parse_index(shard[: lay.index_size - 1], lay)


def test_parser_rejects_entry_past_end():
    lay = ref.ShardLayout((2,), (1,), [], [{"name": "bytes", "configuration": {"endian": "little"}}], "end")
    body = struct.pack("<4Q", 0, 4, 4, 100)
    with pytest.raises(ref.CorruptShard, match="past the end"):
        ref.parse_index(b"abcdefgh" + body, lay)
    body = struct.pack("<4Q", 0, 4, ref.ABSENT, ref.ABSENT)
    assert ref.parse_index(b"abcd" + body, lay) == [(0, 4), None]


def test_reference_view_detects_a_change(fixtures_dir, tmp_path):
    """The tree comparison used against the mount notices one wrong byte in one chunk."""
    src = tmp_path / "src"
    shutil.copytree(fixtures_dir / "zp/u8_1d_nocompress", src / "a")
    view = ref.reference_view(src)
    rel, exp = next((k, v) for k, v in view.items() if v.kind == "inner-chunk")
    assert ref.check_file(rel, exp, exp.data) is None
    assert ref.check_file(rel, exp, exp.data[:-1] + bytes([exp.data[-1] ^ 1])) is not None
    meta_rel = "a/zarr.json"
    original = (src / meta_rel).read_bytes()
    assert ref.check_file(meta_rel, view[meta_rel], original) is not None, "unrewritten metadata must not pass"
    assert ref.check_file(meta_rel, view[meta_rel], json.dumps(view[meta_rel].json).encode()) is None


def test_dropped_consolidated_metadata_is_accepted_but_stale_is_not(fixtures_dir):
    view = ref.reference_view(fixtures_dir)
    exp = view["nested/zarr.json"]
    assert exp.kind == "group-metadata"
    original = (fixtures_dir / "nested/zarr.json").read_bytes()
    assert ref.check_file("nested/zarr.json", exp, original) is not None, "stale consolidated metadata"
    dropped = {k: v for k, v in json.loads(original).items() if k != "consolidated_metadata"}
    assert ref.check_file("nested/zarr.json", exp, json.dumps(dropped).encode()) is None
