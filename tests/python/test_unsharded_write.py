"""Writes through the unsharded view (issue 6): zarr-python writes an *unsharded* array
through the mount, and the backing store, read natively (not through the mount) by
zarr-python and tensorstore, is still a valid sharded array with exactly the expected data."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
import zarr

SHAPE, SHARDS, CHUNKS = (40, 30), (20, 16), (5, 4)


def make_array(path: Path, index_location: str = "end", compressors="auto"):
    a = zarr.create_array(str(path), shape=SHAPE, shards=SHARDS, chunks=CHUNKS, dtype="int32", fill_value=0,
                          compressors=compressors,
                          serializer=zarr.codecs.BytesCodec())
    expected = np.arange(np.prod(SHAPE), dtype="int32").reshape(SHAPE)
    a[:] = expected
    if index_location == "start":
        # Rewrite with the index at the start (zarr-python's ShardingCodec option).
        import shutil
        shutil.rmtree(path)
        codec = zarr.codecs.ShardingCodec(chunk_shape=CHUNKS, index_location="start",
                                          codecs=[zarr.codecs.BytesCodec(), zarr.codecs.ZstdCodec()])
        a = zarr.create_array(str(path), shape=SHAPE, chunks=SHARDS, dtype="int32", fill_value=0,
                              serializer=codec, compressors=None)
        a[:] = expected
    return expected


def native(path: Path):
    z = zarr.open_array(str(path), mode="r")
    assert z.shards == SHARDS, "the backing array must stay sharded"
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}).result()
    return z[:], t.read().result()


@pytest.mark.parametrize("index_location", ["end", "start"])
def test_region_writes_keep_a_valid_sharded_store(tmp_path, mount_factory, index_location):
    src = tmp_path / "store"
    src.mkdir()
    expected = make_array(src / "a", index_location)
    m = mount_factory(src)
    via = zarr.open_array(str(m.path / "a"), mode="r+")
    assert via.chunks == CHUNKS and via.shards is None, "the mount shows an unsharded array"

    via[3:17, 5:13] = -5
    expected[3:17, 5:13] = -5
    via[38:40, 28:30] = 77  # ragged corner chunk
    expected[38:40, 28:30] = 77
    via[20:40, 0:16] = 0  # exactly shard (1, 0): every inner chunk becomes fill value
    expected[20:40, 0:16] = 0

    zp, tsr = native(src / "a")
    np.testing.assert_array_equal(zp, expected)
    np.testing.assert_array_equal(tsr, expected)
    assert not (src / "a" / "c" / "1" / "0").exists(), "an all-fill shard must be deleted"
    np.testing.assert_array_equal(zarr.open_array(str(m.path / "a"), mode="r")[:], expected)
    # Only shards in the store, no leftover temp files.
    leftovers = [p for p in (src / "a").rglob("*") if p.is_file() and ".partial" in p.name]
    assert leftovers == []


def test_attribute_updates_and_refused_metadata_changes(tmp_path, mount_factory):
    src = tmp_path / "store"
    src.mkdir()
    make_array(src / "a")
    m = mount_factory(src)
    via = zarr.open_array(str(m.path / "a"), mode="r+")
    via.attrs["units"] = "K"
    assert zarr.open_array(str(src / "a"), mode="r").attrs["units"] == "K"
    assert zarr.open_array(str(src / "a"), mode="r").shards == SHARDS
    with pytest.raises(OSError):
        via.resize((50, 30))  # a shape change cannot be written through the unsharded view
    assert zarr.open_array(str(src / "a"), mode="r").shape == SHAPE


def _writer(args):
    mnt, rows, value = args
    a = zarr.open_array(str(mnt), mode="r+")
    for r in rows:
        a[r * 5:(r + 1) * 5, 0:16] = value + r
    return True


def test_many_processes_writing_one_shard_lose_nothing(tmp_path, mount_factory):
    src = tmp_path / "store"
    src.mkdir()
    expected = make_array(src / "a")
    m = mount_factory(src)
    # Shard (0, 0) holds inner rows 0..3 x cols 0..3; four processes each write one row of it.
    jobs = [(m.path / "a", [r], 1000 * (r + 1)) for r in range(4)]
    with mp.get_context("spawn").Pool(4) as pool:
        assert all(pool.map(_writer, jobs))
    for r in range(4):
        expected[r * 5:(r + 1) * 5, 0:16] = 1000 * (r + 1) + r
    zp, tsr = native(src / "a")
    np.testing.assert_array_equal(zp, expected)
    np.testing.assert_array_equal(tsr, expected)


def test_deleting_the_array_through_the_mount(tmp_path, mount_factory):
    src = tmp_path / "store"
    src.mkdir()
    zarr.open_group(str(src), mode="w")
    make_array(src / "a")
    m = mount_factory(src)
    g = zarr.open_group(str(m.path), mode="r+")
    del g["a"]
    assert not (src / "a").exists()
    assert "a" not in os.listdir(m.path)
