"""xarray's open_zarr through the v2 view of a dataset xarray wrote as Zarr v3 (issue #43).

Why the default differs from reading the original: for Zarr v3, xarray masks with the
`_FillValue` attribute only (use_zarr_fill_value_as_mask defaults to False); for Zarr v2 it
also takes the array's `fill_value` as `_FillValue` (default True). xarray writes no
`_FillValue` attribute for integers, booleans and encoded times, while zarr-python gives
those arrays the fill value 0 / false, so through v2 every stored value equal to the fill
value is masked: integers come back as float with NaN, booleans as objects with NaN, and the
first time of a "hours since <first time>" coordinate as NaT. The view keeps `fill_value`:
zarr-python 2 fills missing chunks with it (with `fill_value: null` it returns uninitialised
memory there), and xarray's open_zarr/open_dataset pass no use_zarr_fill_value_as_mask to the
store (only ZarrStore.open_group takes it, test_v2_real_data.py). `mask_and_scale=False`
reads the same values as the original when no variable carries scale_factor/add_offset or a
`_FillValue` other than NaN.

Each reader runs in its own venv: xarray on zarr-python 2 (.venv-zarr2) and xarray on
zarr-python 3 (.venv), which reads the v2 view the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from zm_harness import Mount

DUMP = r"""
import json, sys
import numpy as np, xarray as xr
path, options = sys.argv[1], json.loads(sys.argv[2])
ds = xr.open_zarr(path, consolidated=True, **options).load()
def values(a):
    if a.dtype.kind == "M":
        return [None if np.isnat(x) else str(x) for x in a.values]
    return [None if isinstance(x, float) and np.isnan(x) else x for x in a.values.tolist()]
print(json.dumps({n: {"dtype": v.dtype.str, "values": values(v)} for n, v in {**ds.coords, **ds.data_vars}.items()}))
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A dataset written by xarray as Zarr v3: values equal to the fill value (0, False, the
    first time), a float variable with NaN, and a chunk of zeros zarr-python does not write."""
    import pandas as pd
    import xarray as xr

    root = tmp_path_factory.mktemp("xr-fill") / "ds.zarr"
    ds = xr.Dataset(
        {"count": (("time",), np.array([0, 0, 0, 1, 2, 0], dtype="int32")),
         "flag": (("time",), np.array([True, False, True, False, True, True])),
         "temp": (("time",), np.array([0.0, np.nan, 1.5, 2.0, 0.0, 3.0], dtype="float32"))},
        coords={"time": pd.date_range("2021-01-01", periods=6, freq="6h")},
    )
    ds.to_zarr(root, zarr_format=3, consolidated=True, encoding={"count": {"chunks": (3,)}})
    meta = {n: json.loads((root / n / "zarr.json").read_text()) for n in ("count", "flag", "temp", "time")}
    assert not (root / "count" / "c" / "0").exists(), "the all-zero chunk is not written"
    assert {n: m["fill_value"] for n, m in meta.items()} == {"count": 0, "flag": False, "temp": "NaN", "time": 0}
    assert [n for n, m in meta.items() if "_FillValue" in m.get("attributes", {})] == ["temp"]
    return root


@pytest.fixture(scope="module")
def v2_view(dataset, tmp_path_factory, zarr_mount_bin):
    m = Mount(dataset, tmp_path_factory.mktemp("mnt-xr-fill"), view="v2", read_only=True)
    m.start()
    yield m
    m.stop_checked()


def dump(python, path, **options) -> dict:
    res = subprocess.run([str(python), "-c", DUMP, str(path), json.dumps(options)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def native(dataset) -> dict:
    """What xarray (on zarr-python 3) reads from the original."""
    return dump(sys.executable, dataset)


@pytest.fixture(scope="module", params=["xarray-on-zarr2", "xarray-on-zarr3"])
def reader(request):
    return request.getfixturevalue("zarr2_python") if request.param == "xarray-on-zarr2" else sys.executable


@pytest.mark.mount
def test_default_masks_values_equal_to_the_fill_value(native, v2_view, reader):
    assert native["count"] == {"dtype": "<i4", "values": [0, 0, 0, 1, 2, 0]}
    via = dump(reader, v2_view.path)
    # exactly the values equal to the fill value are masked, and the types widen to hold NaN
    assert via["count"] == {"dtype": "<f8", "values": [None, None, None, 1.0, 2.0, None]}
    assert via["flag"] == {"dtype": "|O", "values": [True, None, True, None, True, True]}
    assert via["time"]["values"] == [None] + native["time"]["values"][1:]
    assert via["temp"] == native["temp"]  # its _FillValue is NaN: nothing more masked


@pytest.mark.mount
def test_mask_and_scale_false_reads_the_original(native, v2_view, reader):
    assert dump(reader, v2_view.path, mask_and_scale=False) == native
