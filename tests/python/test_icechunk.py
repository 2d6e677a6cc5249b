"""Icechunk repositories (issue 24): a repository written by the `icechunk` Python package
(two commits on main, a tag, a branch, a sharded array, virtual chunks pointing into a NetCDF4
file) mounted at a branch, a tag and a snapshot id. zarr-python 3 reads through the mount
exactly what zarr-python reads through `icechunk` itself; zarr-python 2 reads the v2 view;
decoded chunk files read with numpy.fromfile. A branch that moves on is seen after the TTL.
Bad input: a missing ref fails the start (one line, exit 2); a corrupt manifest is EIO on the
chunks it holds, with a log line, and the mount stays up. Every test runs on a format-2
repository (icechunk 2) and on a format-1 one (icechunk 1, .venv-icechunk1)."""

from __future__ import annotations

import errno
import itertools
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import zarr

from zm_harness import BIN, REPO
import zm_zarr2

ic = pytest.importorskip("icechunk")
netCDF4 = pytest.importorskip("netCDF4")

# Array paths of the fixture, and which commits have them.
ARRAYS_V1 = ("plain", "sharded", "virt", "g/nested")
ARRAYS_V2 = ARRAYS_V1 + ("added",)


# The repository formats, each written by its own icechunk: 2 by icechunk 2 (.venv), 1 by
# icechunk 1 (.venv-icechunk1), as repositories made before icechunk 2 are.
FORMATS = {"format-2": "v2", "format-1": "v1"}


@pytest.fixture(scope="module", params=list(FORMATS))
def fixtures(request, tmp_path_factory) -> Path:
    python = request.getfixturevalue("icechunk1_python") if request.param == "format-1" else sys.executable
    out = tmp_path_factory.mktemp(f"icechunk-{request.param}")
    res = subprocess.run([str(python), str(REPO / "scripts" / "gen_icechunk_fixtures.py"), str(out)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"gen_icechunk_fixtures.py failed:\n{res.stdout}\n{res.stderr}")
    info = json.loads((out / "info.json").read_text())
    assert open_repo(out / "repo", info).spec_version == getattr(ic.SpecVersion, FORMATS[request.param])
    return out


@pytest.fixture(scope="module")
def info(fixtures) -> dict:
    return json.loads((fixtures / "info.json").read_text())


def open_repo(repo: Path, info: dict):
    return ic.Repository.open(ic.local_filesystem_storage(str(repo)),
                              authorize_virtual_chunk_access={info["container"]: None})


def icechunk_arrays(repo: Path, info: dict, **version) -> dict[str, np.ndarray]:
    """Every array as zarr-python reads it through icechunk's own store."""
    session = open_repo(repo, info).readonly_session(**version)
    group = zarr.open_group(session.store, mode="r")
    return {p: group[p][...] for p in _array_paths(group)}


def _array_paths(group, prefix: str = "") -> list[str]:
    out = []
    for name, member in group.members():
        path = f"{prefix}{name}"
        if isinstance(member, zarr.Array):
            out.append(path)
        else:
            out += _array_paths(member, f"{path}/")
    return sorted(out)


def mount_args(info: dict, ref: str | None) -> list[str]:
    args = ["--authorize-virtual", info["container"]]
    return args + (["--ref", ref] if ref is not None else [])


# (--ref argument, keyword for icechunk's readonly_session, arrays expected)
VERSIONS = {
    "default-main": (None, {"branch": "main"}, ARRAYS_V2),
    "branch-dev": ("dev", {"branch": "dev"}, ARRAYS_V1),
    "tag-v1": ("tag:v1", {"tag": "v1"}, ARRAYS_V1),
    "bare-tag": ("v1", {"tag": "v1"}, ARRAYS_V1),
    "snapshot": ("commit2", {"snapshot_id": "commit2"}, ARRAYS_V2),
}


@pytest.mark.mount
@pytest.mark.parametrize("version", list(VERSIONS))
def test_zarr_python_reads_what_icechunk_reads(fixtures, info, mount_factory, version):
    ref, kw, arrays = VERSIONS[version]
    if ref == "commit2":
        ref = info["commit2"]
    kw = {k: info[v] if v == "commit2" else v for k, v in kw.items()}
    want = icechunk_arrays(fixtures / "repo", info, **kw)
    assert sorted(want) == sorted(arrays)
    m = mount_factory(f"icechunk+file://{fixtures / 'repo'}", view="raw", extra_args=mount_args(info, ref))
    group = zarr.open_group(str(m.path), mode="r", zarr_format=3)
    assert _array_paths(group) == sorted(arrays)
    assert group.attrs["title"] == "zarr-mount icechunk fixture"
    for path, data in want.items():
        got = group[path][...]
        assert got.dtype == data.dtype, path
        np.testing.assert_array_equal(got, data, err_msg=path)
    # The virtual array is the NetCDF variable, read natively.
    with netCDF4.Dataset(fixtures / "source.nc") as ds:
        np.testing.assert_array_equal(group["virt"][...], ds["temp"][...].data)
    m.check_alive()


@pytest.mark.mount
def test_branches_differ_and_the_layout_is_recognised(fixtures, info, mount_factory):
    """A plain path to a repository directory is recognised as one; main and dev show their
    own commits; the unsharded view shows the sharded array's inner chunks as files."""
    m = mount_factory(fixtures / "repo", extra_args=mount_args(info, "main"))
    d = mount_factory(fixtures / "repo", extra_args=mount_args(info, "branch:dev"))
    want = icechunk_arrays(fixtures / "repo", info, branch="main")
    for path, data in want.items():  # every array through the unsharded view
        np.testing.assert_array_equal(zarr.open_array(str(m.path / path), mode="r")[...], data, err_msg=path)
    main_plain = zarr.open_array(str(m.path / "plain"), mode="r")[...]
    dev_plain = zarr.open_array(str(d.path / "plain"), mode="r")[...]
    assert dev_plain[0, 0] == -1 and main_plain[0, 0] != -1
    assert (m.path / "added").is_dir() and not (d.path / "added").exists()
    # 8x8 of 2x2 chunks in 4x4 shards: the unsharded view lists 16 inner chunks, 4x4.
    assert sorted(p.name for p in (m.path / "sharded" / "c").iterdir()) == ["0", "1", "2", "3"]
    assert len(list((m.path / "sharded" / "c" / "3").iterdir())) == 4
    meta = json.loads((m.path / "sharded" / "zarr.json").read_text())
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [2, 2]
    with pytest.raises(OSError) as e:
        (m.path / "new").write_bytes(b"x")
    assert e.value.errno == errno.EROFS


@pytest.mark.mount
def test_zarr2_reads_the_v2_view(fixtures, info, mount_factory, zarr2_python, tmp_path):
    want = icechunk_arrays(fixtures / "repo", info, branch="main")
    m = mount_factory(f"icechunk+{fixtures / 'repo'}", view="v2", extra_args=mount_args(info, None))
    npy = zm_zarr2.save_expected(want, tmp_path / "npy")
    jobs = [{"id": f"array:{p}", "kind": "array", "path": str(m.path / p), "expected": npy[p]}
            for p in want]
    results = zm_zarr2.run(zarr2_python, jobs, tmp_path / "run")
    bad = {k: zm_zarr2.describe_failure(r) for k, r in results.items() if not r["ok"]}
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


@pytest.mark.mount
def test_decoded_chunks_read_with_numpy_fromfile(fixtures, info, mount_factory):
    want = icechunk_arrays(fixtures / "repo", info, branch="main")
    m = mount_factory(fixtures / "repo", view="decoded", extra_args=mount_args(info, None))
    for path in ("plain", "virt", "sharded"):
        meta = json.loads((m.path / path / "zarr.json").read_text())
        chunk = meta["chunk_grid"]["configuration"]["chunk_shape"]
        data = want[path]
        grid = [math.ceil(s / c) for s, c in zip(data.shape, chunk)]
        for idx in itertools.product(*(range(g) for g in grid)):
            f = m.path / path / "c" / "/".join(map(str, idx))
            got = np.fromfile(f, dtype=data.dtype.newbyteorder("<"))
            assert got.size == math.prod(chunk), f"{path}/{idx}"
            block = data[tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, chunk))]
            edge = tuple(slice(0, n) for n in block.shape)
            np.testing.assert_array_equal(got.reshape(chunk)[edge], block, err_msg=f"{path}/{idx}")


@pytest.mark.parametrize("ref", ["nope", "tag:main", "snapshot:0000000000000000000A", "branch:v1"])
def test_a_missing_ref_fails_with_one_line_and_exit_2(fixtures, tmp_path, ref, zarr_mount_bin):
    (tmp_path / "mnt").mkdir()
    res = subprocess.run([str(BIN), f"icechunk+{fixtures / 'repo'}", str(tmp_path / "mnt"), "--foreground",
                          "--ref", ref], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert ref.split(":")[-1] in res.stderr


def test_not_a_repository_fails_with_exit_2(tmp_path, zarr_mount_bin):
    (tmp_path / "empty").mkdir()
    (tmp_path / "mnt").mkdir()
    res = subprocess.run([str(BIN), f"icechunk+{tmp_path / 'empty'}", str(tmp_path / "mnt"), "--foreground"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "not an Icechunk repository" in res.stderr, res.stderr


@pytest.mark.mount
def test_virtual_chunks_need_authorization_for_local_files(fixtures, mount_factory):
    m = mount_factory(fixtures / "repo", view="raw")
    with pytest.raises(OSError) as e:
        (m.path / "virt" / "c" / "0" / "0").read_bytes()
    assert e.value.errno == errno.EIO
    assert "--authorize-virtual" in m.log_text(tail=None)
    assert (m.path / "plain" / "c" / "0" / "0").read_bytes()
    m.check_alive()


@pytest.mark.mount
def test_a_corrupt_manifest_is_eio_and_the_mount_stays_up(fixtures, info, mount_factory, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(fixtures / "repo", repo)
    for f in (repo / "manifests").iterdir():
        f.write_bytes(b"not a manifest " * 8)
    m = mount_factory(repo, view="raw", extra_args=mount_args(info, None))
    with pytest.raises(OSError) as e:
        (m.path / "plain" / "c" / "0" / "0").read_bytes()
    assert e.value.errno == errno.EIO
    assert "plain/c/0/0" in m.log_text(tail=None)
    # Metadata lives in the snapshot: still there, and so is the tree of nodes.
    assert json.loads((m.path / "plain" / "zarr.json").read_text())["shape"] == [12, 10]
    assert sorted(p.name for p in m.path.iterdir()) == ["added", "g", "plain", "sharded", "virt", "zarr.json"]
    m.check_alive()


@pytest.mark.mount
def test_a_branch_that_moves_on_is_seen_after_the_ttl(fixtures, info, mount_factory, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(fixtures / "repo", repo)
    m = mount_factory(repo, view="raw", extra_args=mount_args(info, "main") + ["--metadata-ttl", "1"])
    t = mount_factory(repo, view="raw", extra_args=mount_args(info, "v1") + ["--metadata-ttl", "1"])
    before = zarr.open_array(str(m.path / "plain"), mode="r")[...]
    tagged = zarr.open_array(str(t.path / "plain"), mode="r")[...]
    session = open_repo(repo, info).writable_session("main")
    arr = zarr.open_array(session.store, path="plain", mode="r+")
    arr[:] = -5.0
    session.commit("third")
    deadline = time.monotonic() + 10
    while True:
        now = zarr.open_array(str(m.path / "plain"), mode="r")[...]
        if (now == -5.0).all():
            break
        assert (now == before).all(), "a mix of two commits"
        assert time.monotonic() < deadline, "the new commit never showed up"
        time.sleep(0.25)
    # A tag does not move.
    np.testing.assert_array_equal(zarr.open_array(str(t.path / "plain"), mode="r")[...], tagged)
    assert "branch moved on" in m.log_text(tail=None)


@pytest.mark.mount
def test_a_repository_in_s3(fixtures, info, mount_factory, tmp_path):
    """The same repository uploaded to a local moto server, mounted as icechunk+s3://."""
    from zm_s3 import BUCKET, DAEMON_ENV, MotoServer

    server = MotoServer(tmp_path / "moto").start()
    try:
        c = server.client()
        for f in sorted((fixtures / "repo").rglob("*")):
            if f.is_file():
                c.put_object(Bucket=BUCKET, Key=f"repos/r/{f.relative_to(fixtures / 'repo')}", Body=f.read_bytes())
        want = icechunk_arrays(fixtures / "repo", info, tag="v1")
        m = mount_factory(f"icechunk+{server.url('repos/r')}", view="raw",
                          extra_args=server.mount_args() + mount_args(info, "v1"), env=DAEMON_ENV)
        group = zarr.open_group(str(m.path), mode="r", zarr_format=3)
        assert _array_paths(group) == sorted(want)
        for path, data in want.items():
            np.testing.assert_array_equal(group[path][...], data, err_msg=path)
        (tmp_path / "mnt2").mkdir()
        res = subprocess.run([str(BIN), f"icechunk+{server.url('repos/r')}", str(tmp_path / "mnt2"),
                              "--foreground", "--ref", "nope", *server.mount_args()],
                             capture_output=True, text=True, timeout=60, env={**os.environ, **DAEMON_ENV})
        assert res.returncode == 2 and "nope" in res.stderr, res.stderr
    finally:
        server.stop()


def test_ref_on_a_plain_directory_is_a_usage_error(tmp_path, zarr_mount_bin):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    (tmp_path / "mnt").mkdir()
    res = subprocess.run([str(BIN), str(tmp_path / "store"), str(tmp_path / "mnt"), "--foreground",
                          "--ref", "main"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--ref" in res.stderr and "Icechunk" in res.stderr, res.stderr
