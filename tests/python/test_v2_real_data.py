"""Issue 18: the v2 and v2-decoded views on real data written by zarr-python 3: every data type
zarr-python 3 can write as Zarr v2 and the numcodecs codecs, sharded and unsharded, with ragged
edges and missing chunks.

- zarr-python 2 with only its default dependencies (.venv-zarr2: no crc32c package) reads every
  array through the v2 view (by path and through the root's consolidated metadata) equal to
  zarr-python 3 reading the original natively.
- A reader that implements no codec (no_codec_read below: parse .zarray, numpy.fromfile each
  chunk, assemble) reads every fixed-size array through the v2-decoded view exactly; zarr-python
  2 reads that view too.
- xarray on zarr-python 2 opens, through the v2 view with consolidated metadata, a dataset
  xarray wrote as Zarr v3 (string and datetime coordinates, a sharded variable) and gets the
  same Dataset as xarray reading the original natively.
"""

from __future__ import annotations

import base64
import json
import math
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

import zm_real_data
import zm_zarr2
from zm_harness import Mount

warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
warnings.filterwarnings("ignore", message=".*not part of the Zarr format 3.*")

# Fixed-size arrays whose codecs the daemon does not decode: v2-decoded would show them with
# their codecs (and a log line) instead of decoded. None left (fixedscaleoffset, fletcher32 and
# packbits: test_numcodecs_transforms.py).
NOT_DECODED: set[str] = set()


@pytest.fixture(scope="module")
def real_store(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    root = tmp_path_factory.mktemp("real-data")
    return root, zm_real_data.write_store(root)


def _mount(tmp_path_factory, source: Path, view: str):
    m = Mount(source, tmp_path_factory.mktemp(f"mnt-{view}"), view=view, read_only=True)
    m.start()
    return m


@pytest.fixture(scope="module")
def v2_real(real_store, tmp_path_factory, zarr_mount_bin):
    m = _mount(tmp_path_factory, real_store[0], "v2")
    yield m
    m.stop_checked()


@pytest.fixture(scope="module")
def v2_decoded_real(real_store, tmp_path_factory, zarr_mount_bin):
    m = _mount(tmp_path_factory, real_store[0], "v2-decoded")
    yield m
    m.stop_checked()


@pytest.fixture(scope="module")
def native_npy(real_store, tmp_path_factory) -> dict[str, str]:
    return zm_zarr2.save_expected(zm_real_data.zarr2_expected(real_store[1]), tmp_path_factory.mktemp("real-npy"))


def _zarr2_jobs(root: Path, npy: dict[str, str]) -> list[dict]:
    jobs = []
    for p, f in npy.items():
        jobs.append({"id": f"array:{p}", "kind": "array", "path": str(root / p), "expected": f})
        jobs.append({"id": f"consolidated:{p}", "kind": "consolidated", "root": str(root), "member": p,
                     "expected": f})
    return jobs


def _failures(results: dict) -> list[str]:
    return [f"{k}: {zm_zarr2.describe_failure(r)}" for k, r in sorted(results.items()) if not r["ok"]]


# --------------------------------------------------------------------------- the v2 view


@pytest.mark.mount
def test_every_array_shown(v2_real, real_store):
    """Every v3 array of this store has a v2 form: all are in the tree and in .zmetadata."""
    names = sorted(real_store[1])
    shown = sorted(p.name for p in v2_real.path.iterdir() if (p / ".zarray").exists())
    assert shown == names
    zmeta = json.loads((v2_real.path / ".zmetadata").read_text())["metadata"]
    assert sorted(k[: -len("/.zarray")] for k in zmeta if k.endswith("/.zarray")) == names
    z = {n: json.loads((v2_real.path / n / ".zarray").read_text()) for n in names}
    assert z["datetime64_10ms_sharded"]["dtype"] == "<M8[10ms]"
    assert z["timedelta64_s_plain"]["fill_value"] == 5
    assert z["string_sharded"]["dtype"] == "|O" and z["string_sharded"]["filters"] == [{"id": "vlen-utf8"}]
    assert z["vlen_bytes_plain"]["filters"][0]["id"] == "vlen-bytes"
    assert z["utf32_U4_plain"]["dtype"] == "<U4"
    # crc32c (either spelling) is checked by the daemon and cut off, not shown
    assert z["int32_big_crc32c_plain"]["compressor"] == {"id": "gzip", "level": 1}
    assert z["numcodecs_crc32c"]["compressor"]["id"] == "zlib"
    assert z["delta_zlib"]["filters"][0]["id"] == "delta"
    for k, doc in z.items():
        ids = [c["id"] for c in (doc["filters"] or [])] + ([doc["compressor"]["id"]] if doc["compressor"] else [])
        assert "crc32c" not in ids, k


@pytest.mark.mount
def test_zarr2_default_deps_reads_v2_view(v2_real, native_npy, zarr2_python, tmp_path):
    """zarr-python 2 without the crc32c package reads every array equal to zarr-python 3
    natively, by path and through the root's consolidated metadata."""
    results = zm_zarr2.run(zarr2_python, _zarr2_jobs(v2_real.path, native_npy), tmp_path)
    assert not _failures(results), "\n".join(_failures(results))


@pytest.mark.mount
def test_bad_checksum_is_eio(real_store, tmp_path_factory, zarr_mount_bin):
    """A chunk whose crc32c does not match: EIO on that chunk only, and a log line naming it."""
    import errno
    import shutil

    src = tmp_path_factory.mktemp("real-corrupt")
    shutil.copytree(real_store[0] / "int32_big_crc32c_plain", src / "a")
    shutil.copy(real_store[0] / "zarr.json", src / "zarr.json")
    chunk = src / "a" / "c" / "1" / "1"
    data = bytearray(chunk.read_bytes())
    data[-5] ^= 0xFF  # last payload byte
    chunk.write_bytes(bytes(data))
    m = _mount(tmp_path_factory, src, "v2")
    try:
        with pytest.raises(OSError) as e:
            (m.path / "a" / "1" / "1").read_bytes()
        assert e.value.errno == errno.EIO
        assert len((m.path / "a" / "1" / "0").read_bytes()) == (src / "a/c/1/0").stat().st_size - 4
        assert "a/c/1/1" in m.log_text(tail=None)
    finally:
        m.stop_checked()


# --------------------------------------------------------------------------- the v2-decoded view


def _fill(z: dict, dtype: np.dtype):
    fv = z["fill_value"]
    if dtype.kind == "S":
        return base64.standard_b64decode(fv)
    if isinstance(fv, str) and fv in ("NaN", "Infinity", "-Infinity"):
        return float(fv.replace("Infinity", "inf"))
    if isinstance(fv, list):
        return complex(*[float(str(x).replace("Infinity", "inf")) for x in fv])
    if dtype.kind in "Mm":
        return np.array(fv, dtype="<i8").view(dtype)[()]
    return fv


def no_codec_read(d: Path) -> np.ndarray:
    """An independent v2 reader that implements no codec: parse .zarray, numpy.fromfile each
    chunk file, assemble; missing chunks are the fill value."""
    z = json.loads((d / ".zarray").read_text())
    assert z["compressor"] is None and z["filters"] is None and z["order"] == "C", z
    dtype = np.dtype(z["dtype"])
    shape, chunks, sep = z["shape"], z["chunks"], z.get("dimension_separator", ".")
    out = np.full(shape, _fill(z, dtype), dtype=dtype)
    for idx in np.ndindex(*[math.ceil(s / c) for s, c in zip(shape, chunks)]):
        f = d / sep.join(map(str, idx))
        if not f.exists():
            continue
        block = np.fromfile(f, dtype=dtype)
        assert block.size == math.prod(chunks), f"{f}: {block.size} elements"
        block = block.reshape(chunks)
        sl = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunks, shape))
        out[sl] = block[tuple(slice(0, s.stop - s.start) for s in sl)]
    return out


def _fixed_size(native: dict) -> list[str]:
    return sorted(p for p, a in native.items() if a.dtype.kind not in "OT")


@pytest.mark.mount
def test_no_codec_reader_reads_v2_decoded(v2_decoded_real, real_store):
    native = real_store[1]
    fixed = _fixed_size(native)
    assert len(fixed) == 29
    shown_with_codecs = []
    for p in fixed:
        z = json.loads((v2_decoded_real.path / p / ".zarray").read_text())
        if z["compressor"] is not None or z["filters"] is not None:
            shown_with_codecs.append(p)
            continue
        got = no_codec_read(v2_decoded_real.path / p)
        assert got.dtype == native[p].dtype.newbyteorder("<") or got.dtype == native[p].dtype, p
        np.testing.assert_array_equal(got, native[p], err_msg=p)
    assert sorted(shown_with_codecs) == sorted(NOT_DECODED)
    log = v2_decoded_real.log_text(tail=None)
    for p in NOT_DECODED:
        assert p in log, f"no log line for {p}"


@pytest.mark.mount
def test_v2_decoded_vlen_keeps_only_vlen_filter(v2_decoded_real):
    for p in ("string_plain", "string_sharded", "vlen_bytes_plain", "vlen_bytes_sharded"):
        z = json.loads((v2_decoded_real.path / p / ".zarray").read_text())
        assert z["compressor"] is None and len(z["filters"]) == 1 and z["filters"][0]["id"].startswith("vlen-"), z


@pytest.mark.mount
def test_zarr2_reads_v2_decoded(v2_decoded_real, native_npy, zarr2_python, tmp_path):
    results = zm_zarr2.run(zarr2_python, _zarr2_jobs(v2_decoded_real.path, native_npy), tmp_path)
    assert not _failures(results), "\n".join(_failures(results))


# --------------------------------------------------------------------------- xarray


XARRAY_DUMP = r"""
import json, sys
import numpy as np, xarray as xr
if sys.argv[2] == "native":
    ds = xr.open_zarr(sys.argv[1], consolidated=True)
else:
    # Through v2: as xarray reads v3 data, the zarr fill_value (what missing chunks read as)
    # is not also a CF missing-value mask; the v3 `_FillValue` attribute is. xarray defaults to
    # the mask for v2, and its open_zarr drops use_zarr_fill_value_as_mask (2025.6), so the
    # store is opened with it here.
    from xarray.backends.zarr import ZarrStore
    ds = xr.open_dataset(ZarrStore.open_group(sys.argv[1], consolidated=True, use_zarr_fill_value_as_mask=False))
ds = ds.load()
def val(a):
    a = np.asarray(a)
    if a.dtype.kind == "M":
        return np.datetime_as_string(a, unit="ns").tolist()
    if a.dtype.kind in "OUT":
        return [str(x) for x in a.ravel()]
    return a.tolist()
def kind(dt):  # numpy 2 StringDType (xarray on zarr-python 3) and object strings alike
    return "string" if dt.kind in "OTU" else dt.kind
out = {n: {"dims": list(v.dims), "kind": kind(v.dtype), "values": val(v.values), "attrs": {k: str(x) for k, x in v.attrs.items()}}
       for n, v in {**ds.coords, **ds.data_vars}.items()}
out["__attrs__"] = {k: str(x) for k, x in ds.attrs.items()}
print(json.dumps(out, sort_keys=True))
"""


@pytest.mark.mount
def test_xarray_on_zarr2_opens_v3_dataset(tmp_path_factory, zarr_mount_bin, zarr2_python):
    import sys

    import pandas as pd
    import xarray as xr

    root = tmp_path_factory.mktemp("xr") / "ds.zarr"
    times = pd.date_range("2021-01-01", periods=30, freq="6h")
    stations = np.array([f"st-{i}" for i in range(12)], dtype=object)
    rng = np.random.default_rng(3)
    ds = xr.Dataset(
        {"temp": (("time", "station"), rng.standard_normal((30, 12)).astype("float32"), {"units": "K"}),
         "flag": (("station",), np.arange(12, dtype="int16"))},
        coords={"time": times, "station": stations},
        attrs={"title": "issue 18"},
    )
    ds.to_zarr(root, zarr_format=3, consolidated=True,
               encoding={"temp": {"chunks": (5, 4), "shards": (10, 8)}})
    meta = json.loads((root / "temp" / "zarr.json").read_text())
    assert meta["codecs"][0]["name"] == "sharding_indexed", "temp must be sharded"
    assert json.loads((root / "station" / "zarr.json").read_text())["data_type"] == "string"
    m = _mount(tmp_path_factory, root, "v2")
    try:
        script = tmp_path_factory.mktemp("xr-script") / "dump.py"
        script.write_text(XARRAY_DUMP)
        native = subprocess.run([sys.executable, str(script), str(root), "native"], capture_output=True, text=True,
                                timeout=300)
        via = subprocess.run([str(zarr2_python), str(script), str(m.path), "v2"], capture_output=True, text=True,
                             timeout=300)
        assert native.returncode == 0, native.stderr[-3000:]
        assert via.returncode == 0, via.stderr[-3000:]
        got, want = json.loads(via.stdout), json.loads(native.stdout)
        assert got == want
        assert want["time"]["kind"] == "M" and want["station"]["kind"] == "string"
        assert want["station"]["values"][:2] == ["st-0", "st-1"]
    finally:
        m.stop_checked()
