"""Issue 18: numcodecs' fixedscaleoffset, packbits and fletcher32 in the decoded views.

A store written by zarr-python 3: Zarr v3 arrays with the `numcodecs.*` codecs of
zarr.codecs.numcodecs (sharded and unsharded, ragged edges, missing chunks) and a Zarr v2
group (zarr_format=2) with the same codecs as numcodecs filters and compressors.

- `--view decoded`: every array is decoded (no codecs left), and zarr-python 3 reads it equal
  to its own native read of the original.
- `--view v2-decoded`: every array is decoded; a reader that implements no codec and
  zarr-python 2 with its default dependencies read it equal to zarr-python 3 natively.
- `--view v2`: the v3 arrays are shown with the numcodecs filters (zarr-python 2 decodes them
  itself) and read the same.
No array is passed through undecoded: the daemon logs no such line.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs.numcodecs as znc
from zarr.codecs import ZstdCodec

import zm_zarr2
from test_v2_real_data import no_codec_read
from zm_harness import Mount
from zm_views import assert_nothing_passed_through, codec_names, view_mounts

warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
warnings.filterwarnings("ignore", message=".*not part of the Zarr format 3.*")
# zarr-python 3 warns on every numcodecs codec it builds (the point of this test): at import
# (the tables below) and in the tests.
warnings.filterwarnings("ignore", message="Numcodecs codecs are not in the Zarr version 3")
pytestmark = pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3")

SHAPE = (23, 17)  # ragged for chunks (5, 4) (20 bools: 4 padding bits) and shards (10, 8)
CHUNKS, SHARDS = (5, 4), (10, 8)
WRITTEN = (slice(0, 14), slice(0, 17))  # rows 14.. never written: missing chunks and shards


def FSO(**kw):
    return znc.FixedScaleOffset(**kw)


# name: (dtype, fill, filters, compressors, sharded, chunks)
V3 = {
    "fso_f8_i4_sharded": ("float64", 0.5, [FSO(offset=-50, scale=100, dtype="<f8", astype="<i4")],
                          [ZstdCodec(level=1)], True, CHUNKS),
    "fso_f8_u1_zlib": ("float64", 0, [FSO(offset=-70, scale=1.5, dtype="<f8", astype="|u1")],
                       [znc.Zlib(level=1)], False, CHUNKS),
    "fso_f4_f2": ("float32", np.nan, [FSO(offset=3.3, scale=0.037, dtype="<f4", astype="<f2")], None, False,
                  CHUNKS),
    "fso_f8_i2_delta": ("float64", 0, [FSO(offset=0, scale=10, dtype="<f8", astype="<i2"),
                                       znc.Delta(dtype="<i2")], None, True, CHUNKS),
    "packbits_sharded": ("bool", True, [znc.PackBits()], [ZstdCodec(level=1)], True, CHUNKS),
    "packbits_pad7": ("bool", False, [znc.PackBits()], None, False, (3, 3)),
    "fletcher32": ("int64", -1, None, [znc.Fletcher32()], False, CHUNKS),
    "fletcher32_zlib_sharded": ("float32", 0, None, [znc.Zlib(level=1), znc.Fletcher32()], True, CHUNKS),
}
# name: (dtype, fill, filters, compressor); written as Zarr v2 by zarr-python 3
V2 = {
    "fso": ("<f8", 0, [numcodecs.FixedScaleOffset(offset=-50, scale=100, dtype="<f8", astype="<i4")],
            numcodecs.Zstd(level=1)),
    "packbits": ("|b1", False, [numcodecs.PackBits()], None),
    "fletcher32": ("<i4", 3, None, numcodecs.Fletcher32()),
    "fletcher32_filter_zlib": ("<f8", 0, [numcodecs.Fletcher32()], numcodecs.Zlib(level=1)),
}


# what each array is named after
CODEC = {"fso": "fixedscaleoffset", "packbits": "packbits", "fletcher32": "fletcher32"}


def _values(dtype: str) -> np.ndarray:
    i = np.arange(math.prod(SHAPE)).reshape(SHAPE)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return (i % 3 == 0) | (i % 7 == 1)
    if dt.kind == "f":
        return ((i - 150) * 0.37 + np.sin(i)).astype(dt)  # fso: rounds to what its scale keeps
    return (i * 37 - 4000).astype(dt)


def _write(root: Path) -> dict[str, np.ndarray]:
    g = zarr.open_group(str(root), mode="w", attributes={"about": "numcodecs transforms"})
    native = {}
    for name, (dtype, fill, filters, compressors, sharded, chunks) in V3.items():
        a = g.create_array(name, shape=SHAPE, chunks=chunks, shards=SHARDS if sharded else None, dtype=dtype,
                           fill_value=fill, filters=filters, compressors=compressors)
        a[WRITTEN] = _values(dtype)[WRITTEN]
    v2 = zarr.open_group(str(root / "v2"), mode="w", zarr_format=2)
    for name, (dtype, fill, filters, compressor) in V2.items():
        a = v2.create_array(name, shape=SHAPE, chunks=CHUNKS, dtype=dtype, fill_value=fill, filters=filters,
                            compressors=compressor)
        a[WRITTEN] = _values(dtype)[WRITTEN]
    for name in V3:
        native[name] = zarr.open_array(str(root / name), mode="r")[...]
    for name in V2:
        native[f"v2/{name}"] = zarr.open_array(str(root / "v2" / name), mode="r")[...]
    # The codecs are what this test is about: the metadata says so.
    for name in V3:
        assert f"numcodecs.{CODEC[name.split('_')[0]]}" in codec_names(root / name), name
    return native


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    root = tmp_path_factory.mktemp("numcodecs-transforms")
    return root, _write(root)


@pytest.fixture(scope="module")
def mounts(store, tmp_path_factory, zarr_mount_bin):
    with view_mounts(store[0], tmp_path_factory) as made:
        yield made


@pytest.mark.mount
def test_decoded_view(mounts, store):
    root, native = store
    m = mounts["decoded"]
    for path, want in native.items():
        a = zarr.open_array(str(m.path / path), mode="r")
        assert a.compressors == () and not a.filters, f"{path}: {a.compressors} {a.filters}"
        got = a[...]
        assert got.dtype == want.dtype, path
        np.testing.assert_array_equal(got, want, err_msg=path)
    # A v3 array's metadata is plain `bytes`; the v2 ones have no filters or compressor.
    meta = json.loads((m.path / "fso_f8_i4_sharded" / "zarr.json").read_text())
    assert meta["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}]
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == list(CHUNKS)
    z = json.loads((m.path / "v2" / "packbits" / ".zarray").read_text())
    assert z["filters"] is None and z["compressor"] is None
    # A decoded packbits chunk holds one byte per bool.
    assert (m.path / "packbits_pad7" / "c" / "0" / "0").read_bytes() == \
        native["packbits_pad7"][:3, :3].astype("u1").tobytes()
    assert_nothing_passed_through(m)


@pytest.mark.mount
def test_v2_decoded_no_codec_reader(mounts, store):
    root, native = store
    m = mounts["v2-decoded"]
    for path, want in native.items():
        got = no_codec_read(m.path / path)
        assert (got.dtype.kind, got.dtype.itemsize) == (want.dtype.kind, want.dtype.itemsize), path
        np.testing.assert_array_equal(got, want, err_msg=path)
    assert_nothing_passed_through(m)


def _jobs(root: Path, npy: dict[str, str]) -> list[dict]:
    return [{"id": p, "kind": "array", "path": str(root / p), "expected": f} for p, f in npy.items()]


@pytest.mark.mount
def test_zarr2_reads_v2_views(mounts, store, zarr2_python, tmp_path):
    """zarr-python 2 (default dependencies) through v2-decoded (no codecs left) and through v2
    (numcodecs decodes the filters itself)."""
    root, native = store
    npy = zm_zarr2.save_expected(native, tmp_path / "npy")
    for view in ("v2-decoded", "v2"):
        results = zm_zarr2.run(zarr2_python, _jobs(mounts[view].path, npy), tmp_path / view)
        bad = [f"{k}: {zm_zarr2.describe_failure(r)}" for k, r in sorted(results.items()) if not r["ok"]]
        assert not bad, f"{view}:\n" + "\n".join(bad)
        for k, r in results.items():
            ids = [f["id"] for f in r["info"]["filters"] or []] + \
                ([r["info"]["compressor"]["id"]] if r["info"]["compressor"] else [])
            if view == "v2-decoded":
                assert ids == [], f"{k}: {ids}"
            elif not k.startswith("v2/"):
                # the v3 arrays as zarr-python 3 would write them as v2
                assert CODEC[k.split("_")[0]] in ids, f"{k}: {ids}"
    assert_nothing_passed_through(mounts["v2-decoded"])


@pytest.mark.mount
def test_corrupt_fletcher32_chunk_is_eio(store, tmp_path, zarr_mount_bin):
    """A flipped bit in a fletcher32 chunk: EIO on that chunk file, with a log line; the
    chunk next to it still reads exactly (the checksum is checked, not just cut off)."""
    import errno
    import shutil
    src = tmp_path / "store"
    shutil.copytree(store[0] / "fletcher32", src / "fletcher32")
    chunk = src / "fletcher32" / "c" / "0" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[3] ^= 0x10
    chunk.write_bytes(bytes(raw))
    want = store[1]["fletcher32"]
    m = Mount(src, tmp_path / "mnt", view="decoded", read_only=True)
    m.start()
    try:
        with pytest.raises(OSError) as err:
            (m.path / "fletcher32" / "c" / "0" / "0").read_bytes()
        assert err.value.errno == errno.EIO
        assert (m.path / "fletcher32" / "c" / "0" / "1").read_bytes() == \
            np.ascontiguousarray(want[0:5, 4:8]).astype("<i8").tobytes()
        assert "checksum mismatch" in m.log_text(tail=None)
    finally:
        assert not m.stop()
