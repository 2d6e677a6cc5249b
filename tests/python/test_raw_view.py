"""--view raw shows the backing store exactly: every directory, file path and byte."""

from __future__ import annotations

import os

import pytest
import zarr

import zarr_view_ref as ref
from zm_harness import fixture_array_paths
from zm_readers import assert_same_array, zp_read

pytestmark = pytest.mark.mount


def _dirs(root):
    return sorted(os.path.relpath(d, root) for d, _, _ in os.walk(root))


def test_raw_tree_equals_backing(raw_mount, fixtures_dir):
    src = ref.tree_files(fixtures_dir)
    got = ref.tree_files(raw_mount.path)
    assert sorted(got) == sorted(src)
    assert _dirs(raw_mount.path) == _dirs(fixtures_dir)
    bad = []
    for rel, p in src.items():
        data = got[rel].read_bytes()
        if data != p.read_bytes():
            bad.append(rel)
        if got[rel].stat().st_size != p.stat().st_size:
            bad.append(f"{rel} (stat size)")
    assert not bad, f"{len(bad)} files differ: {bad[:20]}"


def test_raw_partial_reads(raw_mount, fixtures_dir):
    """Reads at offsets (what a shard-aware reader does with byte ranges) return the same bytes."""
    rel = "zp/i32_end_blosc_lz4_shuffle/c/1/1"
    want = (fixtures_dir / rel).read_bytes()
    with open(raw_mount.path / rel, "rb") as f:
        for off, n in [(0, 16), (len(want) - 68, 68), (7, 33), (len(want) - 1, 10), (len(want), 5)]:
            f.seek(off)
            assert f.read(n) == want[off: off + n], (off, n)


@pytest.mark.parametrize("path", fixture_array_paths())
def test_raw_zarr_python_reads(path, raw_mount, fixtures_dir):
    arr = zarr.open_array(str(raw_mount.path / path), mode="r")
    assert_same_array(arr[...], zp_read(fixtures_dir, path), path)
    native = zarr.open_array(str(fixtures_dir / path), mode="r")
    assert (arr.shape, arr.chunks, arr.shards) == (native.shape, native.chunks, native.shards)
