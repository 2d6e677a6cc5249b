"""Issue 43: zarr-python 3.2+'s `scale_offset` and `cast_value` codecs through real mounts.

A store written by zarr-python >= 3.2 (with cast-value-rs): float arrays stored as int16 /
uint8 / int32 (every kind of rounding, clamp, wrap, NaN and infinity sentinels), sharded and
not, ragged edges and missing chunks, plus an integer array through scale_offset's integer
arithmetic.

- `--view decoded` and `--view v2-decoded`: zarr-python 3 reads every array equal to its own
  read of the original; a reader with no codecs reads v2-decoded too.
- `--view v2`: zarr-python 2 reads every array equal; where `fixedscaleoffset` decodes bit for
  bit alike the array carries that filter and its chunk files are the stored chunks, byte for
  byte (nothing decoded); the others are served decoded.

These need zarr-python >= 3.2 and cast-value-rs in the suite's venv (scripts/setup.sh builds
it so). With an older venv they fail under ZM_REQUIRE_BINARY=1 (scripts/test.sh, CI) and are
skipped, saying why, otherwise.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import zarr

import zm_zarr2
from test_v2_real_data import no_codec_read
from zm_views import assert_nothing_passed_through, codec_names, view_mounts

try:
    from zarr.codecs import CastValue, ScaleOffset, ZstdCodec
    import cast_value_rs  # noqa: F401  (zarr-python's cast_value backend)
except ImportError as e:
    msg = (f"scale_offset / cast_value need zarr-python >= 3.2 and cast-value-rs in this venv "
           f"(zarr {zarr.__version__}): {e}; scripts/setup.sh builds such a venv")
    if os.environ.get("ZM_REQUIRE_BINARY") == "1":
        raise RuntimeError(msg) from e
    pytest.skip(msg, allow_module_level=True)

SHAPE = (23, 17)  # ragged for chunks (5, 4) and shards (10, 8)
CHUNKS, SHARDS = (5, 4), (10, 8)
WRITTEN = (slice(0, 14), slice(0, 17))  # rows 14.. never written: missing chunks and shards
SENTINELS = dict(encode=[["NaN", 0], ["Infinity", 255], ["-Infinity", 254]],
                 decode=[[0, "NaN"], [255, "Infinity"], [254, "-Infinity"]])


def _halves(dt, start, step):
    """Multiples of `step`: with scale 1/(2 step) every other one is a rounding tie."""
    return (start + step * np.arange(math.prod(SHAPE))).reshape(SHAPE).astype(dt)


def _specials(a):
    a = a.copy()
    a.flat[3::19] = np.nan
    a.flat[5::23] = np.inf
    a.flat[7::29] = -np.inf
    return a


# name: (dtype, fill, filters, values, sharded, shown as fixedscaleoffset in the v2 view)
CASES = {
    "f8_i2": ("float64", 0.5, [ScaleOffset(offset=-3, scale=4), CastValue(data_type="int16", out_of_range="clamp")],
              _halves("float64", -40.0, 0.125), False, True),
    "f8_i2_sharded": ("float64", 0.5, [ScaleOffset(offset=-3, scale=4),
                                       CastValue(data_type="int16", rounding="nearest-away", out_of_range="clamp")],
                      _halves("float64", -40.0, 0.125), True, True),
    "f4_u1_towards_zero": ("float32", 10.0, [ScaleOffset(offset=10, scale=2),
                                             CastValue(data_type="uint8", rounding="towards-zero",
                                                       out_of_range="clamp")],
                           _halves("float32", -5.0, 0.25), False, True),
    "f8_i2_wrap": ("float64", 0.0, [ScaleOffset(offset=0, scale=100),
                                    CastValue(data_type="int16", out_of_range="wrap")],
                   _halves("float64", -500.0, 2.5), False, True),
    "f8_i4_cast_only": ("float64", 0.0, [CastValue(data_type="int32", rounding="towards-negative")],
                        _halves("float64", -90.0, 1.5), True, True),
    "f8_u1_sentinels_sharded": ("float64", float("nan"),
                                [ScaleOffset(offset=-10, scale=0.1),
                                 CastValue(data_type="uint8", out_of_range="clamp", scalar_map=SENTINELS)],
                                _specials(_halves("float64", 0.0, 6.0)), True, False),
    "f4_i2_tenth": ("float32", 0.0, [ScaleOffset(offset=0.5, scale=10), CastValue(data_type="int16")],
                    _halves("float32", -20.0, 0.1), False, False),
    "i4_i2": ("int32", 1000, [ScaleOffset(offset=1000, scale=3), CastValue(data_type="int16")],
              (np.arange(math.prod(SHAPE)).reshape(SHAPE) * 23 - 8000).astype("int32"), False, False),
}
FIXED = sorted(n for n, c in CASES.items() if c[5])


def _write(root) -> dict[str, np.ndarray]:
    g = zarr.open_group(str(root), mode="w")
    for name, (dtype, fill, filters, values, sharded, _) in CASES.items():
        a = g.create_array(name, shape=SHAPE, chunks=CHUNKS, shards=SHARDS if sharded else None, dtype=dtype,
                           fill_value=fill, filters=filters, compressors=[ZstdCodec(level=1)])
        a[WRITTEN] = values[WRITTEN]
    native = {name: zarr.open_array(str(root / name), mode="r")[...] for name in CASES}
    for name in CASES:
        assert "cast_value" in codec_names(root / name), name
    # The sentinels are in the data: NaN and both infinities come back through the map.
    s = native["f8_u1_sentinels_sharded"]
    assert np.isnan(s).any() and np.isposinf(s).any() and np.isneginf(s).any()
    return native


@pytest.fixture(scope="module")
def written(tmp_path_factory, zarr_mount_bin):
    """The store, zarr-python's reads of its arrays, and a mount of it per view."""
    root = tmp_path_factory.mktemp("cast-value")
    native = _write(root)
    with view_mounts(root, tmp_path_factory) as mounts:
        yield root, native, mounts


@pytest.mark.mount
def test_decoded_views_read_like_zarr_python(written):
    _, native, mounts = written
    for view in ("decoded", "v2-decoded"):
        m = mounts[view]
        for name, want in native.items():
            a = zarr.open_array(str(m.path / name), mode="r")
            assert not a.filters and a.compressors == (), f"{view} {name}: {a.filters} {a.compressors}"
            got = a[...]
            assert got.dtype == want.dtype, (view, name)
            np.testing.assert_array_equal(got, want, err_msg=f"{view} {name}")
            if view == "v2-decoded":
                np.testing.assert_array_equal(no_codec_read(m.path / name), want, err_msg=name)
        assert_nothing_passed_through(m)


@pytest.mark.mount
def test_zarr2_reads_the_v2_view(written, zarr2_python, tmp_path):
    _, native, mounts = written
    m = mounts["v2"]
    npy = zm_zarr2.save_expected(native, tmp_path / "npy")
    jobs = [{"id": n, "kind": "array", "path": str(m.path / n), "expected": f} for n, f in npy.items()]
    results = zm_zarr2.run(zarr2_python, jobs, tmp_path / "v2")
    bad = [f"{k}: {zm_zarr2.describe_failure(r)}" for k, r in sorted(results.items()) if not r["ok"]]
    assert not bad, "\n".join(bad)
    fixed = sorted(k for k, r in results.items()
                   if [f["id"] for f in r["info"]["filters"] or []] == ["fixedscaleoffset"])
    assert fixed == FIXED
    for k, r in results.items():
        if k not in FIXED:  # served decoded
            assert not r["info"]["filters"] and not r["info"]["compressor"], (k, r["info"])


@pytest.mark.mount
def test_v2_view_serves_fixedscaleoffset_chunks_undecoded(written):
    """The chunk files of a fixedscaleoffset array are the stored chunks, byte for byte (an
    inner chunk of a shard: its bytes in the shard); the decoded ones hold the elements."""
    root, native, mounts = written
    m = mounts["v2"]
    for name in FIXED:
        z = json.loads((m.path / name / ".zarray").read_text())
        (f,) = z["filters"]
        assert f["id"] == "fixedscaleoffset" and z["compressor"]["id"] == "zstd", z
        assert f["dtype"] == z["dtype"] == np.dtype(CASES[name][0]).str, z
    stored = (root / "f8_i2" / "c" / "1" / "2").read_bytes()
    assert (m.path / "f8_i2" / "1" / "2").read_bytes() == stored
    # An inner chunk of a shard: its bytes are the slice the shard index points at.
    shard = (root / "f8_i2_sharded" / "c" / "0" / "0").read_bytes()
    inner = (m.path / "f8_i2_sharded" / "1" / "1").read_bytes()
    assert len(inner) > 0 and inner in shard
    want = np.ascontiguousarray(native["f4_i2_tenth"][5:10, 4:8]).astype("<f4").tobytes()
    assert (m.path / "f4_i2_tenth" / "1" / "1").read_bytes() == want
