"""`zarr-mount serve` read over HTTP by the clients docs/SERVING.md names, each against a real
server on 127.0.0.1, each array equal to zarr-python 3 reading the original:

- zarr-python 2 (.venv-zarr2: its default dependencies plus fsspec's HTTP filesystem) opens
  URLs with its FSStore and reads every array of the fixture store through `v2` and
  `v2-decoded`, by path and through consolidated metadata, and lists every group;
- zarrita (npm) in Node, with its FetchStore, reads every array of `v2-decoded` that its data
  types allow;
- GDAL's /vsicurl/ opens a `flat` .tif and `ZARR:"/vsicurl/..."` opens a `v2` array (one of
  them sharded in the store), copied out with gdal_translate;
- ome-zarr-py 0.9 (an OME-Zarr 0.4 reader on zarr-python 2) reads an OME-Zarr 0.5 image,
  sharded, with a label image, through `v2`: every level, axes and transformations.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tifffile
import zarr

import zm_zarr2
from test_v2_readers import from_zarrita, zarrita_codecs, zarrita_limit
from zarr2_reader import compare
from zm_harness import fixture_array_paths, missing, require_tool
from zm_readers import zp_read
from zm_serve import Server

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def servers(tmp_path_factory, zarr_mount_bin):
    """servers(source, *views): one server per (source, views) for the module."""
    started: dict[tuple, Server] = {}

    def get(source: Path, *views: str) -> Server:
        key = (str(source), views)
        if key not in started:
            args = [a for v in views for a in ("--view", v)]
            log = tmp_path_factory.mktemp("serve") / "serve.log"
            started[key] = Server(source, log, args=args).start()
        s = started[key]
        assert s.proc.poll() is None, s.log_text()
        return s

    yield get
    for s in started.values():
        s.stop()


@pytest.fixture(scope="module")
def originals(fixtures_dir) -> dict[str, np.ndarray]:
    return {p: zp_read(fixtures_dir, p) for p in fixture_array_paths()}


# --------------------------------------------------------------------------- zarr-python 2


@pytest.fixture(scope="module")
def native_npy(originals, tmp_path_factory) -> dict[str, str]:
    return zm_zarr2.save_expected(originals, tmp_path_factory.mktemp("npy"))


@pytest.mark.parametrize("view", ["v2", "v2-decoded"])
def test_zarr2_fsspec_reads_every_array(view, servers, fixtures_dir, manifest, native_npy, zarr2_python,
                                        tmp_path):
    server = servers(fixtures_dir, "v2", "v2-decoded")
    jobs = zm_zarr2.jobs_for(f"{server.url}{view}/", manifest, native_npy)
    assert sum(j["kind"] == "array" for j in jobs) == len(native_npy)
    results = zm_zarr2.run(zarr2_python, jobs, tmp_path / "run")
    bad = {k: zm_zarr2.describe_failure(r) for k, r in results.items() if not r["ok"]}
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())
    if view == "v2-decoded":
        # Decoded: zarr-python 2 saw no compressor, and no filter but the object codec of
        # variable-length strings (how v2 holds them).
        for k, r in results.items():
            if k.startswith("array:") and not k.startswith("array:v2/"):  # stored v2: as in v2
                filters = [f["id"] for f in r["info"]["filters"] or []]
                assert r["info"]["compressor"] is None and filters in ([], ["vlen-utf8"]), (k, r["info"])


# --------------------------------------------------------------------------- zarrita


def test_zarrita_fetchstore_reads_v2_decoded(servers, fixtures_dir, originals, zarrita, note):
    server = servers(fixtures_dir, "v2", "v2-decoded")
    base = f"{server.url}v2-decoded"
    codecs = zarrita_codecs(zarrita)
    paths, skipped = [], {}
    for p in originals:
        with urllib.request.urlopen(f"{base}/{p}/.zarray") as r:
            why = zarrita_limit(json.loads(r.read()), codecs)
        if why:
            skipped[p] = why
        else:
            paths.append(p)
    assert len(paths) >= len(originals) // 2, skipped
    res = subprocess.run([*zarrita, base, "v2", *paths], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads(res.stdout)["results"]
    problems = []
    for p in paths:
        r = results[p]
        want = originals[p].astype(object) if originals[p].dtype.kind == "T" else originals[p]
        try:
            assert r["ok"], r.get("error")
            compare(from_zarrita(r, want), want)
        except Exception as e:  # noqa: BLE001 - every array's problem is listed
            problems.append(f"{p} ({r.get('dtype')}): {type(e).__name__}: {e}")
    note(f"zarrita over HTTP (v2-decoded): {len(paths)} arrays read, {len(skipped)} outside its data types")
    assert not problems, f"{len(problems)} arrays:\n" + "\n".join(problems)


# --------------------------------------------------------------------------- GDAL


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    """2-d arrays: uint8 in 16 x 32 tiles, and uint16 in 16 x 16 chunks in 32 x 32 shards
    with a ragged edge."""
    root = tmp_path_factory.mktemp("gdal-images")
    g = zarr.open_group(str(root / "images.zarr"), mode="w")
    rng = np.random.default_rng(53)
    u8 = rng.integers(0, 255, (70, 90), dtype=np.uint8)
    u16 = rng.integers(0, 65535, (45, 70), dtype=np.uint16)
    g.create_array("u8", data=u8, chunks=(16, 32))
    g.create_array("u16", data=u16, chunks=(16, 16), shards=(32, 32))
    return root, {"u8": u8, "u16": u16}


def gdal_copy(url: str, out: Path) -> np.ndarray:
    """gdal_translate of a GDAL dataset name to a local GTiff, read back."""
    env = dict(os.environ, GDAL_HTTP_MAX_RETRY="0", CPL_VSIL_CURL_CACHE_SIZE="0",
               NO_PROXY="127.0.0.1", no_proxy="127.0.0.1")
    res = subprocess.run([require_tool("gdal_translate"), "-q", "-of", "GTiff", url, str(out)],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, f"{url}: {res.stderr}"
    return tifffile.imread(out)


def test_gdal_vsicurl_reads_a_flat_tif_and_a_v2_array(servers, images, tmp_path):
    root, arrays = images
    server = servers(root, "flat", "v2")
    for name, want in arrays.items():
        got = gdal_copy(f"/vsicurl/{server.url}flat/images.zarr/{name}.tif", tmp_path / f"flat-{name}.tif")
        assert np.array_equal(got, want), f"flat {name}.tif: GDAL's copy differs"
        got = gdal_copy(f'ZARR:"/vsicurl/{server.url}v2/images.zarr/{name}"', tmp_path / f"v2-{name}.tif")
        assert np.array_equal(got, want), f"v2 {name}: GDAL's copy differs"


# --------------------------------------------------------------------------- OME-Zarr 0.4 reader


@pytest.fixture(scope="module")
def ome_image(tmp_path_factory) -> Path:
    """An OME-Zarr 0.5 image written by ome-zarr-py (sharded, three levels) with a label image."""
    from ome_zarr.format import FormatV05
    from ome_zarr.writer import write_image, write_labels

    root_dir = tmp_path_factory.mktemp("ome") / "image.ome.zarr"
    z, y, x = np.indices((4, 64, 48))
    data = ((z * 700 + y * 31 + x * 7) % 4096).astype(np.uint16)
    labels = np.zeros(data.shape, dtype=np.uint32)
    labels[1:3, 8:30, 5:20] = 3
    opts = [{"chunks": (4, 16, 16), "shards": (4, 32, 32)}] * 3
    fmt = FormatV05()
    root = zarr.open_group(root_dir, mode="w", zarr_format=3)
    scale = {"z": 2.0, "y": 0.5, "x": 0.5}
    write_image(data, root, scale_factors=[2, 4], axes=["z", "y", "x"], fmt=fmt, scale=scale,
                storage_options=opts)
    write_labels(labels, root, name="cells", scaler=None, scale_factors=[2, 4], axes=["z", "y", "x"], fmt=fmt,
                 scale=scale, storage_options=opts)
    return root_dir


def test_ome_zarr_0_4_reader_reads_a_0_5_image_through_v2(servers, ome_image, tmp_path):
    py = Path(__file__).resolve().parents[2] / ".venv-ome-zarr-0.9" / "bin" / "python"
    if not py.exists():
        missing(f"{py} not found (scripts/setup.sh builds it from tests/python/venvs/ome-zarr-0.9.txt)")
    server = servers(ome_image.parent, "v2")
    image = zarr.open_group(ome_image, mode="r")
    [ms] = image.attrs["ome"]["multiscales"]
    [label_ms] = zarr.open_group(ome_image / "labels" / "cells", mode="r").attrs["ome"]["multiscales"]

    def save(group: Path, multiscales: dict) -> list[str]:
        out = []
        for d in multiscales["datasets"]:
            f = tmp_path / f"{group.name}-{d['path']}.npy"
            np.save(f, zarr.open_array(group / d["path"], mode="r")[...])
            out.append(str(f))
        return out

    url = f"{server.url}v2/{ome_image.name}"
    job = {"id": "image", "kind": "image", "path": url, "levels": save(ome_image, ms),
           "labels": {"cells": {"path": f"{url}/labels/cells",
                                "levels": save(ome_image / "labels" / "cells", label_ms)}},
           "axes": [a["name"] for a in ms["axes"]],
           "transforms": [d["coordinateTransformations"] for d in ms["datasets"]]}
    jobs, results = tmp_path / "jobs.json", tmp_path / "results.json"
    jobs.write_text(json.dumps({"jobs": [job]}))
    res = subprocess.run([str(py), str(HERE / "ome_readers.py"), "ome-zarr", str(jobs), str(results)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and results.exists(), res.stderr[-3000:]
    out = json.loads(results.read_text())
    checks = out["results"]["image"]
    assert out["versions"].get("ome-zarr", "").startswith("0.9"), out["versions"]
    # three levels of the image, three of the label, axes, transformations
    assert len(checks) == 8, checks
    bad = {k: v for k, v in checks.items() if v != "ok"}
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())
