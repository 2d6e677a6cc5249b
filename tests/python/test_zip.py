"""Zip archives written by zarr-python's ZipStore, mounted directly (issue 4): arrays read
through the mount with zarr-python equal what zarr-python reads from the zip itself; sharded
arrays inside the zip are unpacked like anywhere else; the mount is read-only."""

from __future__ import annotations

import errno

import numpy as np
import pytest
import zarr


def write_zip(path, zarr_format):
    store = zarr.storage.ZipStore(str(path), mode="w")
    root = zarr.open_group(store, mode="w", zarr_format=zarr_format, attributes={"made": "ZipStore"})
    arrays = {}
    a = root.create_array("plain", shape=(23, 17), chunks=(5, 4), dtype="int16", fill_value=0)
    a[:] = np.arange(23 * 17, dtype="int16").reshape(23, 17)
    arrays["plain"] = a[:]
    if zarr_format == 3:
        s = root.create_array("sharded", shape=(40, 30), chunks=(5, 6), shards=(20, 12), dtype="float32",
                              compressors=zarr.codecs.ZstdCodec())
        data = np.random.default_rng(3).standard_normal((40, 30), dtype="float32")
        data[0:20, 0:12] = 0  # one all-fill shard: never written (ZipStore cannot delete)
        s[:] = data
        arrays["sharded"] = s[:]
    g = root.create_group("sub", attributes={"k": [1, 2]})
    b = g.create_array("b", shape=(9,), chunks=(4,), dtype="uint8")
    b[:] = np.arange(9, dtype="uint8")
    arrays["sub/b"] = b[:]
    store.close()
    return arrays


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zipstore_archives_read_exactly(tmp_path, mount_factory, zarr_format):
    archive = tmp_path / f"data-v{zarr_format}.zarr.zip"
    expected = write_zip(archive, zarr_format)
    m = mount_factory(archive)
    native = zarr.open_group(zarr.storage.ZipStore(str(archive), mode="r"), mode="r")
    via = zarr.open_group(str(m.path), mode="r")
    assert dict(via.attrs) == dict(native.attrs) == {"made": "ZipStore"}
    assert dict(via["sub"].attrs) == {"k": [1, 2]}
    for name, data in expected.items():
        got = zarr.open_array(str(m.path / name), mode="r")
        np.testing.assert_array_equal(got[:], data)
        np.testing.assert_array_equal(got[:], native[name][:])
        assert got.dtype == native[name].dtype
    if zarr_format == 3:
        sharded = zarr.open_array(str(m.path / "sharded"), mode="r")
        assert sharded.chunks == (5, 6) and sharded.shards is None, "unpacked in the unsharded view"
        assert not (m.path / "sharded" / "c" / "0" / "0").exists(), "absent chunks are absent files"


def test_zip_mount_is_read_only(tmp_path, mount_factory):
    archive = tmp_path / "data.zip"
    write_zip(archive, 3)
    m = mount_factory(archive, view="raw")
    with pytest.raises(OSError) as e:
        (m.path / "new-file").write_bytes(b"x")
    assert e.value.errno == errno.EROFS
