"""Virtual-reference stores (issue 24): a NetCDF4 file written by the netCDF4 library, its
kerchunk references (JSON versions 0 and 1, version 1 with templates, Parquet) mounted as
plain Zarr directories. zarr-python 3 and xarray read through the mount exactly what netCDF4
and xarray read from the NetCDF; zarr-python 2 reads the arrays through --view v2; decoded
chunk files read with numpy.fromfile. Broken inputs: a bad reference is EIO on its own file
(the mount stays up), a broken reference file fails the mount with one line and exit 2."""

from __future__ import annotations

import base64
import errno
import itertools
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from zm_harness import BIN, REPO
import zm_zarr2

xarray = pytest.importorskip("xarray")
netCDF4 = pytest.importorskip("netCDF4")
pytest.importorskip("kerchunk")

VARIABLES = ("t", "temp", "pres", "small")
REFERENCE_SETS = ("refs-v1.json", "refs-v0.json", "refs-templated.json", "refs.parq")


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("references")
    res = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_reference_fixtures.py"), str(out)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"gen_reference_fixtures.py failed:\n{res.stdout}\n{res.stderr}")
    return out


@pytest.fixture(scope="module")
def native(fixtures) -> dict[str, np.ndarray]:
    """The variables as the netCDF4 library reads them (no masking or scaling: stored values)."""
    with netCDF4.Dataset(fixtures / "data.nc") as ds:
        ds.set_auto_maskandscale(False)
        return {name: ds[name][...] for name in VARIABLES}


def manifest(fixtures: Path) -> dict:
    return json.loads((fixtures / "manifest.json").read_text())


@pytest.mark.mount
@pytest.mark.parametrize("refs", REFERENCE_SETS)
def test_zarr_python_and_xarray_read_the_netcdf(fixtures, native, mount_factory, refs):
    m = mount_factory(fixtures / refs)
    group = zarr.open_group(str(m.path), mode="r", zarr_format=2)
    for name in VARIABLES:
        got = group[name][...]
        assert got.dtype == native[name].dtype, name
        np.testing.assert_array_equal(got, native[name], err_msg=name)
    with xarray.open_dataset(fixtures / "data.nc") as want, \
            xarray.open_dataset(m.path, engine="zarr", consolidated=False, zarr_format=2) as got:
        for name in VARIABLES:
            xarray.testing.assert_equal(got[name], want[name])
        assert got.attrs["title"] == want.attrs["title"]
        assert got["temp"].attrs["units"] == "K"


@pytest.mark.mount
@pytest.mark.parametrize("refs", ["refs-v1.json", "refs.parq"])
def test_files_are_the_referenced_bytes(fixtures, mount_factory, refs):
    """Every chunk file holds exactly bytes offset..offset+length of data.nc; inline chunks hold
    their (base64-decoded) data; the tree has nothing else."""
    m = mount_factory(fixtures / refs, view="raw")
    nc = (fixtures / "data.nc").read_bytes()
    refs_v1 = json.loads((fixtures / "refs-v1.json").read_text())["refs"]
    for name, var in manifest(fixtures)["variables"].items():
        for key, (_, offset, length) in var["references"].items():
            f = m.path / name / key
            assert f.stat().st_size == length
            assert f.read_bytes() == nc[offset:offset + length], f"{name}/{key}"
        for key in var["inline"]:
            value = refs_v1[f"{name}/{key}"]
            want = base64.b64decode(value[7:]) if value.startswith("base64:") else value.encode()
            assert (m.path / name / key).read_bytes() == want
        listed = sorted(p.name for p in (m.path / name).iterdir() if not p.name.startswith("."))
        assert listed == sorted([*var["references"], *var["inline"]])
    if refs == "refs.parq":
        zmeta = json.loads((m.path / ".zmetadata").read_text())
        assert zmeta["zarr_consolidated_format"] == 1
        assert "temp/.zarray" in zmeta["metadata"]


@pytest.mark.mount
def test_mount_is_read_only(fixtures, mount_factory):
    m = mount_factory(fixtures / "refs-v1.json")
    with pytest.raises(OSError) as e:
        (m.path / "new").write_bytes(b"x")
    assert e.value.errno == errno.EROFS


@pytest.mark.mount
@pytest.mark.parametrize("refs", ["refs-v1.json", "refs.parq"])
def test_zarr2_reads_the_v2_view(fixtures, native, mount_factory, zarr2_python, tmp_path, refs):
    m = mount_factory(fixtures / refs, view="v2")
    npy = zm_zarr2.save_expected(native, tmp_path / "npy")
    jobs = [{"id": f"array:{n}", "kind": "array", "path": str(m.path / n), "expected": npy[n]}
            for n in VARIABLES]
    results = zm_zarr2.run(zarr2_python, jobs, tmp_path / "run")
    bad = {k: zm_zarr2.describe_failure(r) for k, r in results.items() if not r["ok"]}
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


@pytest.mark.mount
def test_decoded_chunks_read_with_numpy_fromfile(fixtures, native, mount_factory):
    """Each chunk file of the decoded view is the C-order block, edge chunks padded to the full
    chunk shape: `pres` (zlib) and `temp` (HDF5's shuffle filter, then zlib)."""
    m = mount_factory(fixtures / "refs-v1.json", view="decoded")
    for name in ("pres", "temp"):
        meta = json.loads((m.path / name / ".zarray").read_text())
        assert meta["filters"] is None and meta["compressor"] is None, name
        chunk = meta["chunks"]
        data = native[name]
        grid = [math.ceil(s / c) for s, c in zip(data.shape, chunk)]
        for idx in itertools.product(*(range(g) for g in grid)):
            key = ".".join(map(str, idx))
            got = np.fromfile(m.path / name / key, dtype=meta["dtype"])
            assert got.size == math.prod(chunk), f"{name}/{key}"
            sel = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, chunk))
            block = data[sel]
            edge = tuple(slice(0, n) for n in block.shape)
            np.testing.assert_array_equal(got.reshape(chunk)[edge], block, err_msg=f"{name}/{key}")


def _refs_with(fixtures: Path, tmp_path: Path, edits: dict) -> Path:
    doc = json.loads((fixtures / "refs-v1.json").read_text())
    doc["refs"].update(edits)
    out = tmp_path / "edited.json"
    out.write_text(json.dumps(doc))
    shutil.copy(fixtures / "data.nc", tmp_path / "data.nc")
    return out


@pytest.mark.mount
def test_bad_references_are_eio_and_the_mount_stays_up(fixtures, native, mount_factory, tmp_path):
    size = (fixtures / "data.nc").stat().st_size
    refs = _refs_with(fixtures, tmp_path, {
        "temp/0.0.0": ["data.nc", size - 10, 100],               # past the end of its target
        "temp/0.0.1": ["no-such-file.nc", 0, 100],              # target missing
        "temp/0.1.0": ["s3://127.0.0.1-unreachable/x.nc", 0, 10],  # unreachable store
        "temp/0.1.1": ["ftp://host/x.nc", 0, 10],               # unsupported target
    })
    m = mount_factory(refs, view="raw", extra_args=["--endpoint-url", "http://127.0.0.1:9"])
    for key in ("0.0.0", "0.0.1", "0.1.0", "0.1.1"):
        with pytest.raises(OSError) as e:
            (m.path / "temp" / key).read_bytes()
        assert e.value.errno == errno.EIO, key
    m.check_alive()
    log = m.log_text(tail=None)
    assert "runs past the end of the target" in log
    assert "ftp" in log
    # Everything else still reads.
    group = zarr.open_group(str(m.path), mode="r", zarr_format=2)
    np.testing.assert_array_equal(group["pres"][...], native["pres"])
    np.testing.assert_array_equal(group["temp"][6:, :, :], native["temp"][6:, :, :])


@pytest.mark.parametrize("content", ["{not json", '{"version": 7, "refs": {}}', '["a list"]'])
def test_a_broken_reference_file_fails_with_one_line_and_exit_2(tmp_path, content, zarr_mount_bin):
    refs = tmp_path / "broken.json"
    refs.write_text(content)
    (tmp_path / "mnt").mkdir()
    res = subprocess.run([str(BIN), str(refs), str(tmp_path / "mnt"), "--foreground"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "broken.json" in res.stderr


def test_a_broken_parquet_set_fails_with_exit_2(tmp_path, fixtures, zarr_mount_bin):
    bad = tmp_path / "bad.parq"
    shutil.copytree(fixtures / "refs.parq", bad)
    (bad / ".zmetadata").write_text('{"metadata": {}}')  # no record_size
    (tmp_path / "mnt").mkdir()
    res = subprocess.run([str(BIN), str(bad), str(tmp_path / "mnt"), "--foreground"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "record_size" in res.stderr, res.stderr


@pytest.mark.mount
def test_a_corrupt_record_file_is_eio_on_its_chunks_only(fixtures, native, mount_factory, tmp_path):
    bad = tmp_path / "bad.parq"
    shutil.copytree(fixtures / "refs.parq", bad)
    shutil.copy(fixtures / "data.nc", tmp_path / "data.nc")
    (bad / "temp" / "refs.1.parq").write_bytes(b"PAR1 garbage")
    m = mount_factory(bad, view="raw")
    # Record 1 holds chunks 4..7 (record_size 4): 1.0.0 .. 1.1.1.
    with pytest.raises(OSError) as e:
        (m.path / "temp" / "1.0.0").read_bytes()
    assert e.value.errno == errno.EIO
    assert "refs.1.parq" in m.log_text(tail=None)
    nc = (fixtures / "data.nc").read_bytes()
    _, offset, length = manifest(fixtures)["variables"]["temp"]["references"]["0.0.0"]
    assert (m.path / "temp" / "0.0.0").read_bytes() == nc[offset:offset + length]
    group = zarr.open_group(str(m.path), mode="r", zarr_format=2)
    np.testing.assert_array_equal(group["pres"][...], native["pres"])
    m.check_alive()


@pytest.mark.mount
def test_gen_and_templates_render_like_fsspec(fixtures, native, mount_factory, tmp_path):
    """A version 1 document whose chunk references come from `gen` (jinja arithmetic over a
    dimension) and `templates`: the mount reads the same bytes as fsspec's ReferenceFileSystem
    rendering it with jinja2, and the array equals the NetCDF variable."""
    fsspec = pytest.importorskip("fsspec")
    pytest.importorskip("jinja2")
    h5py = pytest.importorskip("h5py")
    nc = tmp_path / "data.nc"
    shutil.copy(fixtures / "data.nc", nc)
    with h5py.File(nc, "r") as f:
        base = f["small"].id.get_offset()  # contiguous: the 9 int16 values in one run
    zarray = {"shape": [9], "chunks": [3], "dtype": "<i2", "fill_value": None, "order": "C",
              "filters": None, "compressor": None, "zarr_format": 2}
    doc = {
        "version": 1,
        "templates": {"u": str(nc), "name": "gen3"},
        "refs": {".zgroup": '{"zarr_format":2}', "gen3/.zarray": json.dumps(zarray)},
        "gen": [{"key": "{{name}}/{{i}}", "url": "{{u}}", "offset": f"{{{{ {base} + i * 6 }}}}",
                 "length": "{{ 2 * 3 }}", "dimensions": {"i": {"stop": 3}}}],
    }
    refs = tmp_path / "gen.json"
    refs.write_text(json.dumps(doc))
    m = mount_factory(refs)
    fs = fsspec.filesystem("reference", fo=doc, simple_templates=False)
    for i in range(3):
        assert (m.path / "gen3" / str(i)).read_bytes() == fs.cat(f"gen3/{i}"), i
    got = zarr.open_array(str(m.path / "gen3"), mode="r", zarr_format=2)[...]
    np.testing.assert_array_equal(got, native["small"])
