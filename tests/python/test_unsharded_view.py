"""Issue 5: the default (unsharded) view of the fixture store, read with real Zarr clients.

The expected content comes from zarr_view_ref.py, which parses shard indexes independently of
the Rust code; test_reference.py checks that model against the writers.
"""

from __future__ import annotations

import json
import os
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
    zp_open_via_parent,
    zp_read,
)

pytestmark = pytest.mark.mount

ARRAYS = fixture_array_paths()


@pytest.fixture(scope="module")
def reference(fixtures_dir) -> dict[str, ref.Expect]:
    return ref.reference_view(fixtures_dir)


def _mismatches(mnt: Path, expected: dict[str, ref.Expect], prefix: str = "") -> list[str]:
    """Compare the files under mnt/prefix with the reference view (restricted to prefix)."""
    base = mnt / prefix if prefix else mnt
    want = {k: v for k, v in expected.items() if not prefix or k.startswith(prefix + "/")}
    got = {(f"{prefix}/{k}" if prefix else k): p for k, p in ref.tree_files(base).items()}
    problems = []
    for k in sorted(set(got) - set(want)):
        problems.append(f"unexpected file in the mount: {k}")
    for k in sorted(set(want) - set(got)):
        problems.append(f"missing from the mount: {k} ({want[k].kind})")
    for k in sorted(set(want) & set(got)):
        try:
            data = got[k].read_bytes()
        except OSError as e:
            problems.append(f"{k}: read failed: {e}")
            continue
        msg = ref.check_file(k, want[k], data)
        if msg:
            problems.append(msg)
        st = got[k].stat()
        if st.st_size != len(data):
            problems.append(f"{k}: stat size {st.st_size} but {len(data)} bytes read")
    return problems


def test_whole_tree_matches_reference(unsharded_mount, reference):
    problems = _mismatches(unsharded_mount.path, reference)
    assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems[:60])


@pytest.mark.parametrize("path", ARRAYS)
def test_array_files(path, unsharded_mount, fixtures_dir, manifest, reference):
    """Per array: the file set and bytes (virtual chunks = inner chunk bytes from the shard)."""
    problems = _mismatches(unsharded_mount.path, reference, prefix=path)
    assert not problems, "\n".join(problems[:60])


@pytest.mark.parametrize("path", ARRAYS)
def test_array_metadata(path, unsharded_mount, fixtures_dir, manifest):
    e = entry_for(manifest, path)
    src, mnt = fixtures_dir / path, unsharded_mount.path / path
    if e["zarr_format"] == 2:
        for name in (".zarray", ".zattrs"):
            if (src / name).exists():
                assert (mnt / name).read_bytes() == (src / name).read_bytes(), name
        return
    original = (src / "zarr.json").read_bytes()
    shown = (mnt / "zarr.json").read_bytes()
    if not e["unpack"]:
        assert shown == original, "metadata of an array that is not unpacked must be byte-identical"
        return
    meta = json.loads(original)
    got = json.loads(shown)
    assert got == ref.rewritten_metadata(meta)
    assert got.get("attributes") == meta.get("attributes")


@pytest.mark.parametrize("path", ARRAYS)
def test_no_shard_or_absent_keys_resolve(path, unsharded_mount, fixtures_dir, manifest):
    """Lookups (not only readdir): shard keys that are not inner keys, absent inner chunks and
    inner chunks past the array edge have no file."""
    e = entry_for(manifest, path)
    if not e["unpack"]:
        pytest.skip("not unpacked")
    src, mnt = fixtures_dir / path, unsharded_mount.path / path
    meta = json.loads((src / "zarr.json").read_text())
    present = ref.expected_inner_chunks(src, meta)
    enc = ref.key_encoding(meta)
    for coord, key in ref.shard_keys(meta):
        if key not in present:
            assert not os.path.lexists(mnt / key), f"shard key {key} visible"
        shard = src / key
        if not shard.is_file():
            continue
        for g, data, inside in ref.inner_chunks_of_shard(shard.read_bytes(), coord, meta):
            k = ref.chunk_key(g, enc)
            if data is None or not inside:
                if k not in present:
                    assert not os.path.lexists(mnt / k), f"{k} exists (absent={data is None}, inside={inside})"
            else:
                assert (mnt / k).is_file(), f"inner chunk {k} missing"


@pytest.mark.parametrize("path", ARRAYS)
def test_zarr_python_reads(path, unsharded_mount, fixtures_dir, manifest):
    e = entry_for(manifest, path)
    native = zp_read(fixtures_dir, path)
    mnt = unsharded_mount.path
    arr = zarr.open_array(str(mnt / path), mode="r")
    assert_same_array(arr[...], native, f"zarr-python open_array through the mount: {path}")
    if e["unpack"]:
        assert_looks_unpacked(arr, e, path)
    arr = zp_open_via_parent(mnt, e)
    assert_same_array(arr[...], native, f"zarr-python via parent group {e['parent']!r}: {path}")
    if e["consolidated_root"]:
        arr = zp_open_via_consolidated(mnt, e)
        assert_same_array(arr[...], native, f"zarr-python via consolidated {e['consolidated_root']!r}: {path}")
        if e["unpack"]:
            assert_looks_unpacked(arr, e, f"{path} via consolidated metadata")


@pytest.mark.parametrize("path", ARRAYS)
def test_tensorstore_reads(path, unsharded_mount, fixtures_dir, manifest):
    e = entry_for(manifest, path)
    if not e["tensorstore_readable"]:
        pytest.skip("tensorstore cannot open this array even natively (see manifest)")
    native = zp_read(fixtures_dir, path)
    assert_same_array(ts_read(unsharded_mount.path, e), native, f"tensorstore through the mount: {path}")


def test_groups_and_attributes(unsharded_mount, manifest):
    for g in manifest["groups"]:
        grp = zarr.open_group(str(unsharded_mount.path / g["path"]), mode="r", zarr_format=g["zarr_format"])
        assert dict(grp.attrs) == g["attributes"], g["path"]


def test_group_members_listed(unsharded_mount, fixtures_dir):
    for gpath in ("zp", "ts", "nested/g1"):
        want = sorted(zarr.open_group(str(fixtures_dir / gpath), mode="r", use_consolidated=False).array_keys())
        got = sorted(zarr.open_group(str(unsharded_mount.path / gpath), mode="r",
                                     use_consolidated=False).array_keys())
        assert got == want, gpath


def test_default_view_is_unsharded(mount_factory, fixtures_dir):
    m = mount_factory(fixtures_dir, view=None, read_only=True)
    meta = json.loads((m.path / "zp/i32_end_blosc_lz4_shuffle/zarr.json").read_text())
    assert meta["codecs"][0]["name"] != "sharding_indexed"
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [5, 4]
