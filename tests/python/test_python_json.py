"""JSON as Python writes it (issue 43 item 4): bare NaN, Infinity and -Infinity, which Python's
json module writes for non-finite floats (zarr-python 2 and 3 in attributes and consolidated
metadata, kerchunk and VirtualiZarr in references), are read in every document, and every
document a view rewrites writes them back as the same bare tokens, so readers see the
attributes the writer wrote.

- A Parquet reference set written by VirtualiZarr 2.8 (tests/fixtures/virtualizarr, made by
  its make_references.py) with `"_FillValue":NaN` in its .zmetadata mounts in every view;
  xarray reads the NetCDF's variables and attributes through each.
- A hierarchy zarr-python 3 writes here with NaN attributes: zarr-python 2 reads the same
  attributes through the v2 views (directly and consolidated), the v2 view's .zattrs is the
  file zarr-python writes for a v2 array with those attributes, byte for byte, and
  zarr-python 3 reads them through the views that rewrite zarr.json (unsharded, decoded).
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import zarr

import zm_zarr2
from zm_harness import REPO

xarray = pytest.importorskip("xarray")

VIRTUALIZARR = REPO / "tests" / "fixtures" / "virtualizarr"
VIEWS = ("raw", "unsharded", "decoded", "v2", "v2-decoded")
COORDINATES = ("time", "lat", "lon")


def python_json(value) -> str:
    """Attributes as Python's json writes them: NaN equal to NaN."""
    return json.dumps(value, sort_keys=True)


# --------------------------------------------------------------------------- VirtualiZarr 2.8


def test_fixture_holds_bare_tokens():
    """The committed .zmetadata is what the real writer wrote: bare tokens, not strings."""
    zmeta = (VIRTUALIZARR / "refs.parq" / ".zmetadata").read_text()
    assert '"lat\\/.zattrs":{"_FillValue":NaN' in zmeta
    assert '"valid_max":Infinity' in zmeta and '"missing":NaN' in zmeta


@pytest.mark.mount
@pytest.mark.parametrize("refs", ["refs.parq", "refs.json"])
@pytest.mark.parametrize("view", VIEWS)
def test_virtualizarr_references_in_every_view(mount_factory, view, refs):
    """VirtualiZarr's Parquet and JSON references to a NetCDF4 file with a datetime coordinate:
    xarray reads the same Dataset through every view as from the file."""
    m = mount_factory(VIRTUALIZARR / refs, view=view)
    # The Parquet set carries consolidated metadata (.zmetadata); the JSON one does not.
    consolidated = refs == "refs.parq"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with xarray.open_dataset(VIRTUALIZARR / "data.nc") as want, \
                xarray.open_dataset(m.path, engine="zarr", zarr_format=2,
                                    consolidated=consolidated) as got:
            xarray.testing.assert_identical(got, want)
            assert math.isnan(got.attrs["missing"])
            assert got["sst"].attrs["valid_max"] == math.inf
            assert np.isnan(got["sst"].values[0, 0, 0])
            for name in COORDINATES:
                assert math.isnan(want[name].encoding["_FillValue"]), name
                assert math.isnan(got[name].encoding["_FillValue"]), name
    for name in COORDINATES:
        zattrs = json.loads((m.path / name / ".zattrs").read_text())
        assert math.isnan(zattrs["_FillValue"]), name
        attrs = zarr.open_array(m.path / name, mode="r", zarr_format=2).attrs
        assert math.isnan(attrs["_FillValue"]), name
    if consolidated:
        zmeta = json.loads((m.path / ".zmetadata").read_text())["metadata"]
        assert math.isnan(zmeta["lat/.zattrs"]["_FillValue"])


@pytest.mark.mount
def test_zarr2_reads_the_reference_attributes(mount_factory, zarr2_python, tmp_path):
    m = mount_factory(VIRTUALIZARR / "refs.parq", view="v2")
    want = json.loads((VIRTUALIZARR / "refs.parq" / ".zmetadata").read_text())["metadata"]
    jobs = [{"id": "root", "kind": "attrs", "path": str(m.path), "attrs": want[".zattrs"]}]
    for name in (*COORDINATES, "sst"):
        attrs = want[f"{name}/.zattrs"]
        jobs.append({"id": name, "kind": "attrs", "path": str(m.path / name), "attrs": attrs})
        jobs.append({"id": f"consolidated:{name}", "kind": "attrs", "root": str(m.path),
                     "member": name, "attrs": attrs})
    results = zm_zarr2.run(zarr2_python, jobs, tmp_path / "run")
    bad = {k: zm_zarr2.describe_failure(r) for k, r in results.items() if not r["ok"]}
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


# --------------------------------------------------------------------------- zarr-python 3


GROUP_ATTRS = {"offset": math.nan, "range": [-math.inf, math.inf], "label": "NaN"}
PLAIN_ATTRS = {"_FillValue": math.nan, "valid_range": [-math.inf, math.inf], "note": "x NaN y"}
SHARDED_ATTRS = {"scale": math.inf, "nested": {"missing": math.nan}}
SUB_ATTRS = {"nan": math.nan}


@pytest.fixture(scope="module")
def v3_store(tmp_path_factory):
    """A consolidated v3 hierarchy with NaN attributes, as zarr-python 3 writes it: a plain
    array (NaN fill value), a sharded one and a subgroup. Returns (root, {path: data})."""
    root = tmp_path_factory.mktemp("nan-attrs") / "store"
    g = zarr.open_group(root, mode="w", attributes=GROUP_ATTRS)
    plain = np.arange(20, dtype="f4").reshape(4, 5)
    plain[1, 2] = np.nan
    a = g.create_array("plain", shape=plain.shape, chunks=(2, 5), dtype="f4", fill_value=np.nan,
                       attributes=PLAIN_ATTRS, dimension_names=("y", "x"))
    a[...] = plain
    sharded = np.arange(64, dtype="f8").reshape(8, 8)
    b = g.create_array("sharded", shape=sharded.shape, shards=(4, 4), chunks=(2, 2), dtype="f8",
                       attributes=SHARDED_ATTRS)
    b[...] = sharded
    g.create_group("sub", attributes=SUB_ATTRS)
    zarr.consolidate_metadata(root)
    # What this test is about: zarr-python 3 writes the bare tokens.
    assert '"offset": NaN' in (root / "zarr.json").read_text()
    assert '"_FillValue": NaN' in (root / "plain" / "zarr.json").read_text()
    return root, {"plain": plain, "sharded": sharded}


def v2_attrs(path: str) -> dict:
    """What the v2 views show as a node's .zattrs (dimension names as _ARRAY_DIMENSIONS)."""
    if path == "plain":
        return {**PLAIN_ATTRS, "_ARRAY_DIMENSIONS": ["y", "x"]}
    return {"": GROUP_ATTRS, "sharded": SHARDED_ATTRS, "sub": SUB_ATTRS}[path]


@pytest.mark.mount
@pytest.mark.parametrize("view", ["v2", "v2-decoded"])
def test_zarr2_reads_the_v3_attributes_through_the_v2_views(v3_store, mount_factory, zarr2_python,
                                                           tmp_path, view):
    root, data = v3_store
    m = mount_factory(root, view=view)
    npy = zm_zarr2.save_expected(data, tmp_path / "npy")
    jobs = [{"id": f"array:{p}", "kind": "array", "path": str(m.path / p), "expected": npy[p]}
            for p in data]
    for p in ("", "plain", "sharded", "sub"):
        attrs = v2_attrs(p)
        jobs.append({"id": f"attrs:{p}", "kind": "attrs", "path": str(m.path / p), "attrs": attrs})
        jobs.append({"id": f"consolidated:{p}", "kind": "attrs", "root": str(m.path), "member": p,
                     "attrs": attrs})
    results = zm_zarr2.run(zarr2_python, jobs, tmp_path / "run")
    bad = {k: zm_zarr2.describe_failure(r) for k, r in results.items() if not r["ok"]}
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


@pytest.mark.mount
def test_v2_view_zattrs_are_what_zarr_python_writes(v3_store, mount_factory, tmp_path):
    """Byte for byte the .zattrs zarr-python 3 writes for a Zarr v2 array and group with the same
    attributes: bare tokens, 2-space indent."""
    root, _ = v3_store
    m = mount_factory(root, view="v2")
    written = zarr.open_group(tmp_path / "v2", mode="w", zarr_format=2, attributes=GROUP_ATTRS)
    written.create_array("plain", shape=(4, 5), dtype="f4", attributes=v2_attrs("plain"))
    assert (m.path / ".zattrs").read_bytes() == (tmp_path / "v2" / ".zattrs").read_bytes()
    shown = (m.path / "plain" / ".zattrs").read_bytes()
    assert shown == (tmp_path / "v2" / "plain" / ".zattrs").read_bytes()
    assert b'"_FillValue": NaN' in shown


@pytest.mark.mount
@pytest.mark.parametrize("view", ["unsharded", "decoded"])
def test_zarr_python_reads_the_attributes_through_rewritten_zarr_json(v3_store, mount_factory, view):
    root, data = v3_store
    m = mount_factory(root, view=view)
    # The documents these views rewrite: the group's (its consolidated metadata holds the
    # sharded array), the sharded array's, and in the decoded view every array's.
    rewritten = ["zarr.json", "sharded/zarr.json"] + (["plain/zarr.json"] if view == "decoded" else [])
    for doc in rewritten:
        text = (m.path / doc).read_text()
        assert text != (root / doc).read_text(), doc
        assert "NaN" in text and "\\u0000" not in text, doc
    for consolidated in (False, True):
        opened = zarr.open_group(m.path, mode="r", use_consolidated=consolidated)
        assert python_json(opened.attrs.asdict()) == python_json(GROUP_ATTRS)
        for path, want in (("plain", PLAIN_ATTRS), ("sharded", SHARDED_ATTRS), ("sub", SUB_ATTRS)):
            assert python_json(opened[path].attrs.asdict()) == python_json(want), (consolidated, path)
        for path, values in data.items():
            np.testing.assert_array_equal(opened[path][...], values, err_msg=path)
        assert math.isnan(opened["plain"].fill_value)


@pytest.mark.mount
@pytest.mark.parametrize("view", ["v2", "v2-decoded"])
def test_tensorstore_reads_the_v2_view_of_arrays_with_nan_attributes(v3_store, mount_factory, view):
    """tensorstore's v2 driver reads .zarray only (its zarr3 driver refuses a zarr.json with bare
    tokens, the original one too): the arrays read as written."""
    ts = pytest.importorskip("tensorstore")
    root, data = v3_store
    m = mount_factory(root, view=view)
    for path, values in data.items():
        t = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": str(m.path / path) + "/"},
                     "open": True}).result()
        np.testing.assert_array_equal(t.read().result(), values, err_msg=path)
