"""Rectilinear chunk and shard grids (zarr-python >= 3.2) through every view.

The store is tests/fixtures/rectilinear/store, written by zarr-python 3.4
(tests/fixtures/rectilinear/make_rectilinear.py); expected/<case>.npy is what zarr-python wrote
and read back. Reads through the mounts are compared with those files, never with values read
through the same mount:
  * raw, unsharded and decoded views: zarr-python (the suite's, 3.4) reads every array equal;
  * v2 and v2-decoded views: zarr-python 2 reads every array that has a v2 form equal, by path
    and through the root's .zmetadata.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from zm_harness import REPO

FIXTURES = REPO / "tests" / "fixtures" / "rectilinear"
STORE = FIXTURES / "store"
CASES: dict = json.loads((FIXTURES / "cases.json").read_text())
READABLE = tuple(name for name, case in CASES.items() if case["zarr_python_reads"])
SHARDED = tuple(name for name, case in CASES.items() if case["inner_chunk_shape"])


def read_arrays(paths: dict[str, Path]) -> dict[str, np.ndarray | str]:
    """Each array read whole with zarr-python (rectilinear grids enabled), or its error."""
    out: dict[str, np.ndarray | str] = {}
    with zarr.config.set({"array.rectilinear_chunks": True}):
        for name, path in paths.items():
            try:
                arr = zarr.open_array(path, mode="r")[...]
                out[name] = arr.astype(object) if arr.dtype.kind == "T" else arr
            except Exception as e:  # noqa: BLE001 - a refusal is a result to compare
                out[name] = f"{type(e).__name__}: {e}"
    return out


def expected(name: str) -> np.ndarray:
    return np.load(FIXTURES / "expected" / f"{name}.npy", allow_pickle=True)


def assert_equal(got, name: str) -> None:
    assert not isinstance(got, str), f"{name}: {got}"
    want = expected(name)
    assert got.shape == want.shape and got.dtype == want.dtype, (name, got.dtype, want.dtype)
    if want.dtype == object:
        assert list(got) == list(want), name
    else:
        np.testing.assert_array_equal(got, want, err_msg=name)


def zarr_json(root: Path, name: str) -> dict:
    return json.loads((root / name / "zarr.json").read_text())


@pytest.fixture(scope="module")
def originals():
    """Every case read from the store itself (the generator checked these equal expected/)."""
    return read_arrays({name: STORE / name for name in CASES})


def test_fixture_cases(originals):
    assert sorted(CASES) == sorted(["chunks2d", "chunks3d_f64", "chunks1d_v2keys", "chunks_dot",
                                    "chunks_uniform", "strings", "shards2d", "shards3d_start",
                                    "shards_nodivide"])
    for name in READABLE:
        assert_equal(originals[name], name)
    assert "not divisible" in originals["shards_nodivide"]


@pytest.mark.parametrize("view", ["raw", "unsharded"])
def test_reads_equal(mount_factory, originals, view):
    m = mount_factory(STORE, view=view, read_only=True)
    got = read_arrays({name: m.path / name for name in CASES})
    for name in READABLE:
        assert_equal(got[name], name)
    # Not readable by zarr-python at all: the mount refuses it the same way.
    assert got["shards_nodivide"] == originals["shards_nodivide"]


def test_unsharded_view_shows_regular_inner_grids(mount_factory):
    m = mount_factory(STORE, view="unsharded", read_only=True)
    for name in SHARDED:
        original, shown = zarr_json(STORE, name), zarr_json(m.path, name)
        if name == "shards_nodivide":
            assert shown == original  # passed through
            continue
        inner = CASES[name]["inner_chunk_shape"]
        assert shown["chunk_grid"] == {"name": "regular", "configuration": {"chunk_shape": inner}}
        assert [c["name"] for c in shown["codecs"]] == [c["name"] for c in original["codecs"][0]["configuration"]["codecs"]]
        # The rest of the document is the original's, in its order.
        assert list(shown) == list(original)
        assert {k: v for k, v in shown.items() if k not in ("chunk_grid", "codecs")} == \
            {k: v for k, v in original.items() if k not in ("chunk_grid", "codecs")}
    # Inner chunks are files named on the regular inner grid (95 x 70 in 10 x 10: 10 x 7).
    rows = sorted(os.listdir(m.path / "shards2d" / "c"), key=int)
    assert rows == [str(i) for i in range(10)]
    # Rows 40..60, columns 30..50 equal the fill value: those inner chunks are not stored.
    assert sorted(os.listdir(m.path / "shards2d" / "c" / "4"), key=int) == ["0", "1", "2", "5", "6"]
    # The consolidated metadata says the same as each array's document.
    root = zarr_json(m.path, "")
    for name in SHARDED:
        if name in root["consolidated_metadata"]["metadata"]:
            assert root["consolidated_metadata"]["metadata"][name] == zarr_json(m.path, name)
    # The array the view cannot unpack: as stored, and one log line says why.
    assert sorted(os.listdir(m.path / "shards_nodivide" / "c" / "0")) == ["0", "1"]
    log = [line for line in m.log_text(tail=None).splitlines() if "shards_nodivide" in line]
    assert len(log) == 1 and "does not divide shard size 30" in log[0], log


def test_unsharded_writes_land_in_rectilinear_shards(mount_factory, tmp_path):
    """zarr-python writes the unsharded form through the mount; the store keeps its rectilinear
    shards, and zarr-python reading the store itself sees the new values."""
    store = tmp_path / "store"
    shutil.copytree(STORE / "shards2d", store / "shards2d")
    m = mount_factory(store, view="unsharded")
    want = expected("shards2d").copy()
    want[35:62, 25:45] = -np.arange(27 * 20, dtype="int32").reshape(27, 20)
    want[40:50, 60:70] = 0  # a whole inner chunk back to the fill value: removed from its shard
    code = ("import sys, numpy as np, zarr\n"
            "a = zarr.open_array(sys.argv[1], mode='r+')\n"
            "a[35:62, 25:45] = -np.arange(27 * 20, dtype='int32').reshape(27, 20)\n"
            "a[40:50, 60:70] = 0\n")
    res = subprocess.run([sys.executable, "-c", code, str(m.path / "shards2d")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert not os.path.exists(m.path / "shards2d" / "c" / "4" / "6")
    m.stop_checked()
    assert zarr_json(store, "shards2d") == zarr_json(STORE, "shards2d")
    assert sorted(os.listdir(store / "shards2d" / "c" / "1")) == ["0", "1"]  # still 2 x 2 shards
    got = read_arrays({"written": store / "shards2d"})["written"]
    assert not isinstance(got, str), got
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- decoded view

def stored_chunks(array_dir: Path, key_encoding: dict) -> list[tuple[str, list[int]]]:
    """(key, chunk coordinates) of every chunk stored in an array directory."""
    default = key_encoding["name"] == "default"
    sep = key_encoding.get("configuration", {}).get("separator", "/" if default else ".")
    out = []
    for path in array_dir.rglob("*"):
        rel = path.relative_to(array_dir).as_posix()
        if path.is_file() and rel != "zarr.json":
            parts = rel.replace("/", sep).split(sep)
            out.append((rel, [int(p) for p in (parts[1:] if default else parts)]))
    return out


RECTILINEAR = tuple(name for name, case in CASES.items()
                    if case["chunk_grid"]["name"] == "rectilinear" and not case["inner_chunk_shape"])


def test_decoded_view(mount_factory, originals):
    """Rectilinear grids stay rectilinear (zarr-python >= 3.2 reads them) and every chunk is
    decoded at its own shape; sharded arrays are decoded on their regular inner grid."""
    m = mount_factory(STORE, view="decoded", read_only=True)
    got = read_arrays({name: m.path / name for name in CASES})
    for name in READABLE:
        assert_equal(got[name], name)
    assert got["shards_nodivide"] == originals["shards_nodivide"]
    for name in RECTILINEAR:
        original, shown = zarr_json(STORE, name), zarr_json(m.path, name)
        if name == "strings":
            assert shown == original  # variable-length: passed through undecoded
            continue
        assert shown["chunk_grid"] == original["chunk_grid"], name
        assert shown["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}], name
        # Every stored chunk decodes at its own encoded shape.
        chunks, itemsize = CASES[name]["chunks"], expected(name).dtype.itemsize
        for rel, coords in stored_chunks(STORE / name, original["chunk_key_encoding"]):
            want = int(np.prod([chunks[d][c][1] for d, c in enumerate(coords)])) * itemsize
            assert os.path.getsize(m.path / name / rel) == want, (name, rel)
    for name in SHARDED:
        if name != "shards_nodivide":
            shown = zarr_json(m.path, name)
            assert shown["chunk_grid"]["name"] == "regular"
            assert shown["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}]
    log = m.log_text(tail=None)
    assert "strings" in log and "passed through undecoded" in log


# --------------------------------------------------------------------------- v2 views

# Rectilinear arrays with no v2 form: variable-length strings cannot be re-tiled (tiles are
# assembled from decoded chunks), and zarr-python itself cannot read shards_nodivide.
V2_LEFT_OUT = ("strings", "shards_nodivide")
V2_SHOWN = tuple(name for name in CASES if name not in V2_LEFT_OUT)


@pytest.mark.parametrize("view", ["v2", "v2-decoded"])
def test_v2_views_read_equal_with_zarr2(mount_factory, zarr2_python, tmp_path, view):
    import zm_zarr2

    m = mount_factory(STORE, view=view, read_only=True)
    npy = {name: str(FIXTURES / "expected" / f"{name}.npy") for name in V2_SHOWN}
    root = json.loads((STORE / "zarr.json").read_text())
    consolidated = [n for n in V2_SHOWN if n in root["consolidated_metadata"]["metadata"]]
    jobs = [{"id": f"array:{n}", "kind": "array", "path": str(m.path / n), "expected": npy[n]}
            for n in V2_SHOWN]
    jobs += [{"id": f"consolidated:{n}", "kind": "consolidated", "root": str(m.path), "member": n,
              "expected": npy[n]} for n in consolidated]
    jobs.append({"id": "group", "kind": "group", "path": str(m.path), "arrays": list(V2_SHOWN),
                 "groups": [], "attrs": root["attributes"]})
    results = zm_zarr2.run(zarr2_python, jobs, tmp_path / "zarr2")
    failed = {i: zm_zarr2.describe_failure(r) for i, r in results.items() if not r["ok"]}
    assert not failed, failed
    for name in RECTILINEAR:
        if name in V2_LEFT_OUT:
            assert not os.path.exists(m.path / name)
            continue
        info = results[f"array:{name}"]["info"]
        largest = [max(length for _, length in d) for d in CASES[name]["chunks"]]
        assert info["chunks"] == largest, name
        uniform = all(len({length for _, length in d}) == 1 for d in CASES[name]["chunks"])
        if not uniform:  # re-tiled: decoded, uncompressed
            assert (info["compressor"], info["filters"], info["order"]) == (None, None, "C"), name
    # One log line per array left out, none for the others.
    log = m.log_text(tail=None).splitlines()
    for name in V2_LEFT_OUT:
        lines = [line for line in log if "left out of the v2 view" in line and f'"{name}"' in line]
        assert len(lines) == 1, (name, lines)
    assert not [line for line in log if "left out of the v2 view" in line
                and not any(f'"{n}"' in line for n in V2_LEFT_OUT)]


def test_v2_view_reads_with_tensorstore(mount_factory):
    """tensorstore's strict zarr (v2) driver reads the re-tiled arrays equal too."""
    import tensorstore as ts

    m = mount_factory(STORE, view="v2", read_only=True)
    for name in V2_SHOWN:
        spec = {"driver": "zarr", "kvstore": {"driver": "file", "path": str(m.path / name)}}
        got = ts.open(spec, open=True, read=True).result().read().result()
        np.testing.assert_array_equal(got, expected(name), err_msg=name)
