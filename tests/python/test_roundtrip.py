"""Issue 2 (foundation): zarr-python 3 writes through a --view raw mount of a local directory
and the backing directory holds exactly that store; and the other way round."""

from __future__ import annotations

import json
import os

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

import zarr_view_ref as ref
from zm_readers import assert_same_array

pytestmark = pytest.mark.mount


@pytest.fixture
def empty_raw_mount(mount_factory, tmp_path):
    src = tmp_path / "backing"
    src.mkdir()
    m = mount_factory(src, view="raw")
    return src, m


def assert_trees_equal(a, b):
    fa, fb = ref.tree_files(a), ref.tree_files(b)
    # zarr-python's temporary files must never survive a completed write
    leftovers = [k for k in fa if ".partial" in k] + [k for k in fb if ".partial" in k]
    assert not leftovers, leftovers
    assert sorted(fa) == sorted(fb)
    for k in fa:
        assert fa[k].read_bytes() == fb[k].read_bytes(), k


def assert_same_store(a, b, arrays, groups):
    for g, attrs in groups.items():
        for root in (a, b):
            grp = zarr.open_group(str(root / g) if g else str(root), mode="r", use_consolidated=False)
            assert dict(grp.attrs) == attrs, (root, g)
    for path in arrays:
        x = zarr.open_array(str(a / path), mode="r")
        y = zarr.open_array(str(b / path), mode="r")
        assert x.metadata == y.metadata, path
        assert_same_array(x[...], y[...], path)


def _data(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    return (rng.integers(-1000, 1000, size=shape)).astype(dtype)


def test_write_through_mount_read_backing(empty_raw_mount):
    src, m = empty_raw_mount
    mnt = m.path

    # mode "w" would rmtree the store root itself (here: the mount point)
    root = zarr.open_group(str(mnt), mode="w-", attributes={"title": "roundtrip", "n": [1, 2, 3]})
    sub = root.create_group("sub", attributes={"level": 1})
    deep = sub.create_group("deep", attributes={"level": 2, "unicode": "grüße"})

    a_data = _data((30, 40), "int32", 1)
    a = sub.create_array("v3_zstd", shape=(30, 40), chunks=(5, 4), dtype="int32",
                         compressors=[ZstdCodec(level=3)], attributes={"units": "m"},
                         dimension_names=["y", "x"])
    a[:] = a_data

    s_data = _data((30, 40), "float64", 2) / 7
    s = root.create_array("v3_sharded", shape=(30, 40), shards=(10, 8), chunks=(5, 4), dtype="float64",
                          compressors=[BloscCodec(cname="lz4", shuffle="shuffle")])
    s[:] = s_data

    d_data = _data((6, 5, 4), "int16", 3)
    d = deep.create_array("v3_gzip_3d", shape=d_data.shape, chunks=(2, 2, 2), dtype="int16",
                          compressors=[GzipCodec(level=1)], fill_value=-1)
    d[:] = d_data

    v2 = zarr.open_group(str(mnt / "v2root"), mode="w-", zarr_format=2, attributes={"fmt": 2})
    b_data = _data((20, 20), "<u2", 4) % 60000
    b = v2.create_array("arr", shape=(20, 20), chunks=(5, 5), dtype="<u2",
                        compressors=numcodecs.Blosc(cname="zstd", shuffle=numcodecs.Blosc.BITSHUFFLE))
    b[:] = b_data

    arrays = ["sub/v3_zstd", "v3_sharded", "sub/deep/v3_gzip_3d", "v2root/arr"]
    groups = {"": {"title": "roundtrip", "n": [1, 2, 3]}, "sub": {"level": 1},
              "sub/deep": {"level": 2, "unicode": "grüße"}}
    assert_same_store(mnt, src, arrays, groups)
    assert_same_array(zarr.open_array(str(src / "sub/v3_zstd"), mode="r")[...], a_data, "backing v3_zstd")
    assert_same_array(zarr.open_array(str(src / "v3_sharded"), mode="r")[...], s_data, "backing v3_sharded")
    assert_same_array(zarr.open_array(str(src / "v2root/arr"), mode="r")[...], b_data, "backing v2 arr")
    assert json.loads((src / "v2root/.zattrs").read_text()) == {"fmt": 2}
    assert_trees_equal(mnt, src)

    # overwrite regions (partial chunks, across chunk and shard boundaries)
    a[3:17, 5:22] = -7
    a_data[3:17, 5:22] = -7
    s[9:21, 7:9] = 1.5
    s_data[9:21, 7:9] = 1.5
    b[0:1, :] = 0
    b_data[0:1, :] = 0
    # attributes update
    sub.attrs["level"] = 10
    groups["sub"] = {"level": 10}
    assert_same_store(mnt, src, arrays, groups)
    assert_same_array(zarr.open_array(str(src / "sub/v3_zstd"), mode="r")[...], a_data, "after overwrite")
    assert_same_array(zarr.open_array(str(src / "v3_sharded"), mode="r")[...], s_data, "after overwrite")

    # resize: grow one array, shrink another
    a.resize((35, 44))
    a[30:35, :] = 9
    grown = np.zeros((35, 44), dtype="int32")
    grown[:30, :40] = a_data
    grown[30:35, :] = 9
    s.resize((18, 16))
    assert json.loads((src / "sub/v3_zstd/zarr.json").read_text())["shape"] == [35, 44]
    assert json.loads((src / "v3_sharded/zarr.json").read_text())["shape"] == [18, 16]
    assert_same_array(zarr.open_array(str(src / "sub/v3_zstd"), mode="r")[...], grown, "after resize")
    assert_same_array(zarr.open_array(str(src / "v3_sharded"), mode="r")[...], s_data[:18, :16], "after shrink")

    # delete an array (a whole directory tree) and a group
    del root["v3_sharded"]
    assert not (src / "v3_sharded").exists()
    assert "v3_sharded" not in zarr.open_group(str(mnt), mode="r", use_consolidated=False)
    del sub["deep"]
    assert not (src / "sub/deep").exists()
    assert_trees_equal(mnt, src)


def test_write_backing_read_through_mount(empty_raw_mount):
    src, m = empty_raw_mount
    root = zarr.open_group(str(src), mode="w-", attributes={"side": "backing"})
    g = root.create_group("grp", attributes={"k": "v"})
    x_data = _data((25, 33), "int64", 5)
    x = g.create_array("x", shape=x_data.shape, chunks=(6, 7), dtype="int64", compressors=[ZstdCodec()])
    x[:] = x_data
    x[0:3, 0:3] = 0
    x_data[0:3, 0:3] = 0
    y = root.create_array("y_sharded", shape=(40,), shards=(16,), chunks=(4,), dtype="uint8")
    y[:] = np.arange(40, dtype="uint8")
    gone = root.create_array("gone", shape=(4,), chunks=(2,), dtype="int8")
    gone[:] = 1
    del root["gone"]
    v2 = zarr.open_group(str(src / "v2"), mode="w-", zarr_format=2, attributes={"two": True})
    z = v2.create_array("z", shape=(10, 10), chunks=(3, 3), dtype=">i4", compressors=numcodecs.Zlib())
    z[:] = np.arange(100).reshape(10, 10)
    x.resize((20, 33))

    mnt = m.path
    assert_same_store(src, mnt, ["grp/x", "y_sharded", "v2/z"],
                      {"": {"side": "backing"}, "grp": {"k": "v"}, "v2": {"two": True}})
    assert_same_array(zarr.open_array(str(mnt / "grp/x"), mode="r")[...], x_data[:20], "x through mount")
    assert not os.path.exists(mnt / "gone")
    assert_trees_equal(mnt, src)
