"""A damaged shard index makes that shard's virtual chunks fail with EIO, never look absent;
other shards keep working and the daemon stays up."""

from __future__ import annotations

import errno
import json
import os
import shutil

import numpy as np
import pytest
import zarr

import zarr_view_ref as ref

pytestmark = pytest.mark.mount


def _keys_of_shard(meta, coord):
    lay = ref.shard_layout(meta)
    enc = ref.key_encoding(meta)
    inner_grid = ref.grid_shape(meta["shape"], lay.chunk_shape)
    out = []
    for local in ref.local_coords(lay):
        g = tuple(s * n + l for s, n, l in zip(coord, lay.chunks_per_shard, local))
        if all(x < lim for x, lim in zip(g, inner_grid)):
            out.append(ref.chunk_key(g, enc))
    return out


def _assert_eio(path):
    with pytest.raises(OSError) as ei:
        with open(path, "rb") as f:
            f.read()
    assert ei.value.errno == errno.EIO, f"{path}: expected EIO, got {ei.value!r}"


@pytest.mark.parametrize("path", ["zp/i32_end_blosc_lz4_shuffle", "zp/i32_start_blosc_zstd_bitshuffle"])
def test_corrupt_index_is_eio(path, fixtures_dir, tmp_path, mount_factory):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(fixtures_dir / "zarr.json", src / "zarr.json")
    shutil.copytree(fixtures_dir / path, src / "arr")
    d = src / "arr"
    meta = json.loads((d / "zarr.json").read_text())
    lay = ref.shard_layout(meta)
    enc = ref.key_encoding(meta)
    good = ref.expected_inner_chunks(d, meta)
    native = zarr.open_array(str(d), mode="r")[...]

    # 1. shard (1,1): one flipped bit in the index -> crc32c mismatch
    bad_coord = (1, 1)
    shard_path = d / ref.chunk_key(bad_coord, enc)
    shard = bytearray(shard_path.read_bytes())
    pos = 5 if lay.index_location == "start" else len(shard) - lay.index_size + 5
    shard[pos] ^= 0x10
    shard_path.write_bytes(bytes(shard))
    crc_bad_keys = _keys_of_shard(meta, bad_coord)

    # 2. shard (2,0): last byte cut off. Index at end: the index itself is damaged (all its
    #    chunks EIO). Index at start: the chunk stored last now ends past the shard (EIO).
    trunc_coord = (2, 0)
    tpath = d / ref.chunk_key(trunc_coord, enc)
    tshard = tpath.read_bytes()
    entries = ref.parse_index(tshard, lay)
    tpath.write_bytes(tshard[:-1])
    trunc_keys = _keys_of_shard(meta, trunc_coord)
    if lay.index_location == "end":
        trunc_eio = trunc_keys
    else:
        last = max(range(lay.n), key=lambda i: -1 if entries[i] is None else sum(entries[i]))
        trunc_eio = [trunc_keys[last]]

    m = mount_factory(src, view="unsharded", read_only=True)
    arr_dir = m.path / "arr"

    for k in crc_bad_keys + trunc_eio:
        _assert_eio(arr_dir / k)

    untouched = [k for k in good if k not in crc_bad_keys and k not in trunc_keys]
    assert len(untouched) >= 40
    for k in untouched:
        assert (arr_dir / k).read_bytes() == good[k], k
    for k in set(trunc_keys) - set(trunc_eio):
        try:
            data = (arr_dir / k).read_bytes()
        except OSError as e:  # rejecting the whole shard is acceptable too
            assert e.errno == errno.EIO, f"{k}: {e!r}"
        else:
            assert data == good[k], k

    # zarr-python: good regions read fine, the damaged shard raises (never silently fill)
    arr = zarr.open_array(str(arr_dir), mode="r")
    np.testing.assert_array_equal(arr[0:10, 0:16], native[0:10, 0:16])
    with pytest.raises(OSError):
        arr[10:20, 8:16]

    # the daemon is still serving
    m.check_alive()
    assert "zarr.json" in os.listdir(arr_dir)
    for k in untouched[:3]:
        assert (arr_dir / k).read_bytes() == good[k]
    _assert_eio(arr_dir / crc_bad_keys[0])
    m.check_alive()
