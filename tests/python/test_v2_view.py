"""Issue 7: `--view v2`. Every v3 group and array appears in Zarr v2 form (.zgroup/.zarray +
.zattrs, v2 chunk keys, sharded arrays unsharded), so zarr-python 2 reads the whole store.

Expectations come from zarr_decoded_ref.reference_v2_view (built from the stored bytes, never
from the mount) and from the arrays the writers wrote (read natively, saved as .npy for the
zarr-python 2 subprocess). test_reference_v2_view_reads_with_zarr2 checks that model itself
with zarr-python 2, without a mount.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import zarr

import zarr_decoded_ref as zdr
import zarr_view_ref as ref
import zm_zarr2
from zm_harness import fixture_array_paths
from zm_readers import entry_for, zp_read
from zm_views import assert_tree_unchanged, erofs_checks

ARRAYS = fixture_array_paths()
# v3 arrays with no v2 form are left out of the v2 view. Every fixture array has one (strings
# included, as '|O' with vlen-utf8); the reasons for leaving arrays out are unit-tested in
# src/views/presented/mapping/v2.rs.
LEFT_OUT: frozenset[str] = frozenset()
SHOWN = tuple(p for p in ARRAYS if p not in LEFT_OUT)
V3_ARRAYS = tuple(p for p in SHOWN if not p.startswith("v2/"))
CONSOLIDATED_ARRAYS = tuple(p for p in SHOWN if p.startswith(("nested/", "v2/")))
GROUPS = ("", "zp", "ts", "nested", "nested/g1", "nested/g1/g2", "v2")


@pytest.fixture(scope="module")
def v2_ref(fixtures_dir) -> zdr.V2View:
    return zdr.reference_v2_view(fixtures_dir)


@pytest.fixture(scope="module")
def native_npy(fixtures_dir, tmp_path_factory) -> dict[str, str]:
    """The written arrays (read natively with zarr-python 3) saved as .npy for zarr-python 2."""
    return zm_zarr2.save_expected({p: zp_read(fixtures_dir, p) for p in SHOWN}, tmp_path_factory.mktemp("npy"))


# --------------------------------------------------------------------------- no mount: the model


def test_reference_covers_every_v3_array(v2_ref):
    assert sorted(v2_ref.arrays) == sorted(V3_ARRAYS), "exactly the LEFT_OUT arrays have no v2 data type"
    assert v2_ref.arrays["zp/string_vlen"].dtype == "|O"
    # a trailing crc32c is stripped, so zarr-python 2 needs no crc32c codec
    assert v2_ref.arrays["zp/i32_crc32c_inner"].plan["strip_crc32c"]
    assert v2_ref.arrays["ts/u16_start_crc32c_ragged_v2keys"].plan["strip_crc32c"]
    kept = [p for p, a in v2_ref.arrays.items() if a.plan is not None]
    decoded = [p for p, a in v2_ref.arrays.items() if a.plan is None]
    # the fixtures exercise both ways of serving a chunk, order F and a big-endian dtype
    assert "zp/unsharded_transpose_zstd" in kept and v2_ref.arrays["zp/unsharded_transpose_zstd"].order == "F"
    assert {"zp/nested_sharding", "zp/no_unpack_transpose", "zp/no_unpack_gzip_after",
            "zp/unsharded_transpose3d_blosc_zlib"} <= set(decoded)
    assert v2_ref.arrays["zp/i16_bigendian_gzip_start"].dtype == ">i2"
    assert v2_ref.arrays["ts/i32_big_endian_start"].dtype == ">i4"
    assert "_ARRAY_DIMENSIONS" not in v2_ref.arrays["zp/unsharded_transpose_zstd"].attrs  # ["t", null]
    assert v2_ref.arrays["ts/i32_end_zstd"].attrs["_ARRAY_DIMENSIONS"] == ["row", "col"]
    assert list(v2_ref.consolidated) == ["nested"]


def test_reference_v2_view_reads_with_zarr2(v2_ref, manifest, native_npy, zarr2_python, tmp_path):
    """The reference v2 view, written to a directory, reads with zarr-python 2 exactly like the
    original store: the model (keys, dtypes, order F, kept codecs) is right."""
    zdr.write_v2_view(v2_ref, tmp_path / "view")
    results = zm_zarr2.run(zarr2_python, zm_zarr2.jobs_for(tmp_path / "view", manifest, native_npy, LEFT_OUT), tmp_path / "run")
    bad = {k: zm_zarr2.describe_failure(r) for k, r in results.items() if not r["ok"]}
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


# --------------------------------------------------------------------------- files of the mount


@pytest.mark.mount
def test_whole_tree(v2_mount, v2_ref):
    """Exactly the expected files (no zarr.json, no shard objects), each with st_size equal to
    what a read returns."""
    got = ref.tree_files(v2_mount.path)
    want = v2_ref.files()
    problems = [f"unexpected file: {k}" for k in sorted(set(got) - want)]
    problems += [f"missing file: {k}" for k in sorted(want - set(got))]
    for k in sorted(set(got) & want):
        try:
            n = len(got[k].read_bytes())
        except OSError as e:
            problems.append(f"{k}: read failed: {e}")
            continue
        if got[k].stat().st_size != n:
            problems.append(f"{k}: st_size {got[k].stat().st_size}, {n} bytes read")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:60])


@pytest.mark.mount
@pytest.mark.parametrize("path", V3_ARRAYS)
def test_v3_array_metadata(path, v2_mount, v2_ref):
    a = v2_ref.arrays[path]
    d = v2_mount.path / path
    assert not os.path.lexists(d / "zarr.json"), "zarr.json still visible"
    zarray = json.loads((d / ".zarray").read_text())
    problems = a.zarray_problems(zarray)
    assert not problems, f"{path}/.zarray:\n" + "\n".join(problems) + f"\n{json.dumps(zarray)}"
    assert json.loads((d / ".zattrs").read_text()) == a.attrs


@pytest.mark.mount
@pytest.mark.parametrize("path", V3_ARRAYS)
def test_v3_array_chunks(path, v2_mount, v2_ref):
    """v2 chunk keys; encoded bytes kept where v2 can express the codecs, decoded otherwise."""
    a = v2_ref.arrays[path]
    d = v2_mount.path / path
    got = {k for k in ref.tree_files(d) if k not in (".zarray", ".zattrs")}
    assert got == set(a.chunks), (f"chunk keys: unexpected {sorted(got - set(a.chunks))[:10]}, "
                                  f"missing {sorted(set(a.chunks) - got)[:10]}")
    how = "encoded bytes of the unsharded view" if a.plan else "decoded chunk (raw little-endian C order)"
    bad = [k for k, data in sorted(a.chunks.items()) if (d / k).read_bytes() != data]
    assert not bad, f"{len(bad)} of {len(a.chunks)} chunks are not the {how}: {bad[:10]}"
    for k in list(a.chunks)[:3]:
        assert os.stat(d / k).st_size == len(a.chunks[k]), k


@pytest.mark.mount
def test_partial_reads(v2_mount, v2_ref):
    """Reads at offsets of a kept (encoded) chunk and of a chunk served decoded."""
    for path in ("zp/i32_end_blosc_lz4_shuffle", "zp/nested_sharding", "zp/no_unpack_gzip_after"):
        a = v2_ref.arrays[path]
        key, want = max(a.chunks.items())
        with open(v2_mount.path / path / key, "rb") as f:
            for off, n in [(0, 7), (3, 50), (len(want) - 2, 10), (len(want), 4)]:
                f.seek(off)
                assert f.read(n) == want[off: off + n], (path, key, off, n)


@pytest.mark.mount
@pytest.mark.parametrize("group", [g for g in GROUPS if g != "v2"])
def test_v3_groups(group, v2_mount, v2_ref, manifest):
    d = v2_mount.path / group if group else v2_mount.path
    assert not os.path.lexists(d / "zarr.json"), "zarr.json still visible"
    assert json.loads((d / ".zgroup").read_text()) == {"zarr_format": 2}
    attrs = next(g["attributes"] for g in manifest["groups"] if g["path"] == group)
    assert json.loads((d / ".zattrs").read_text()) == attrs == v2_ref.groups[group]
    if group not in v2_ref.consolidated:
        assert not os.path.lexists(d / ".zmetadata"), "a group without consolidated metadata got .zmetadata"


@pytest.mark.mount
def test_zmetadata_synthesized(v2_mount, v2_ref):
    """nested/ (inline consolidated metadata in v3) gets a .zmetadata whose entries are the
    view's own .zgroup/.zarray/.zattrs documents."""
    d = v2_mount.path / "nested"
    zmeta = json.loads((d / ".zmetadata").read_text())
    assert zmeta.get("zarr_consolidated_format") == 1
    meta = zmeta.get("metadata")
    assert isinstance(meta, dict)
    must, may = zdr.expected_zmetadata_keys(v2_ref, "nested")
    assert must <= set(meta), f"missing entries: {sorted(must - set(meta))}"
    assert set(meta) <= may, f"unexpected entries: {sorted(set(meta) - may)}"
    for k, doc in meta.items():
        assert doc == json.loads((d / k).read_text()), f".zmetadata entry {k} differs from the file"
    for p, a in v2_ref.arrays.items():
        if p.startswith("nested/"):
            problems = a.zarray_problems(meta[p[len("nested/"):] + "/.zarray"])
            assert not problems, f"{p}: " + "; ".join(problems)


@pytest.mark.mount
def test_v2_data_and_other_files_pass_through(v2_mount, v2_ref, fixtures_dir):
    """The v2 group (its .zgroup/.zattrs/.zmetadata, every array's metadata and chunks, the
    undecodable Base64 array included) and non-Zarr files are byte for byte the stored ones."""
    assert any(k.startswith("v2/arr_base64_filter/") for k in v2_ref.passthrough)
    bad = []
    for rel, data in sorted(v2_ref.passthrough.items()):
        try:
            got = (v2_mount.path / rel).read_bytes()
        except OSError as e:
            bad.append(f"{rel}: {e}")
            continue
        if got != data:
            bad.append(f"{rel}: {len(got)} bytes differ from the stored {len(data)}")
    assert not bad, "\n".join(bad[:40])
    assert ref.tree_files(v2_mount.path / "v2").keys() == ref.tree_files(fixtures_dir / "v2").keys()


# --------------------------------------------------------------------------- zarr-python 2


@pytest.fixture(scope="module")
def zarr2_results(_v2_session_mount, manifest, native_npy, zarr2_python, tmp_path_factory) -> dict[str, dict]:
    """One zarr-python 2 run over the mount: every array by path and through its consolidated
    root, and every group's members."""
    _v2_session_mount.check_alive()
    jobs = zm_zarr2.jobs_for(_v2_session_mount.path, manifest, native_npy, LEFT_OUT)
    return zm_zarr2.run(zarr2_python, jobs, tmp_path_factory.mktemp("zarr2-run"))


def _check(results: dict, job_id: str) -> dict:
    r = results[job_id]
    assert r["ok"], f"zarr-python 2, {job_id}: {zm_zarr2.describe_failure(r)}"
    return r["info"]


@pytest.mark.mount
@pytest.mark.parametrize("path", SHOWN)
def test_zarr2_reads(path, zarr2_results, v2_mount, v2_ref, manifest):
    info = _check(zarr2_results, f"array:{path}")
    if path in v2_ref.arrays:
        a = v2_ref.arrays[path]
        assert info["dtype"] == a.dtype and info["order"] == a.order, info
        assert info["chunks"] == list(a.view.chunk_shape), info
        if a.plan is None:
            assert info["compressor"] is None and info["filters"] is None, \
                f"chunks served decoded but zarr 2 sees codecs: {info}"
        else:
            ids = [c["id"] for c in (info["filters"] or [])] + ([info["compressor"]["id"]] if info["compressor"] else [])
            assert ids == [c["id"] for c in a.plan["codecs"]], info
    else:
        e = entry_for(manifest, path)
        assert info["dtype"] == e["v2_dtype"] and info["order"] == e["order"], info


@pytest.mark.mount
@pytest.mark.parametrize("path", CONSOLIDATED_ARRAYS)
def test_zarr2_reads_consolidated(path, zarr2_results, v2_mount):
    """zarr.open_consolidated: the synthesized nested/.zmetadata and the stored v2/.zmetadata."""
    _check(zarr2_results, f"consolidated:{path}")


@pytest.mark.mount
@pytest.mark.parametrize("group", GROUPS)
def test_zarr2_group_members(group, zarr2_results, v2_mount):
    _check(zarr2_results, f"group:{group}")


# --------------------------------------------------------------------------- zarr-python 3 on the v2 form


@pytest.mark.mount
@pytest.mark.parametrize("path", SHOWN)
def test_zarr3_reads_v2_form(path, v2_mount, fixtures_dir):
    """A second v2 reader: zarr-python 3 with zarr_format=2."""
    arr = zarr.open_array(str(v2_mount.path / path), mode="r", zarr_format=2)
    native = zp_read(fixtures_dir, path)
    got = arr[...]
    assert got.shape == native.shape
    if native.dtype.kind == "T":  # variable-length strings: '|O' in v2
        assert got.dtype.kind in "OT" and got.tolist() == native.tolist(), path
        return
    assert (got.dtype.kind, got.dtype.itemsize) == (native.dtype.kind, native.dtype.itemsize)
    np.testing.assert_array_equal(got, native, err_msg=path)


# --------------------------------------------------------------------------- read-only


@pytest.mark.mount
def test_writes_get_erofs(mount_factory, store_copy, fixtures_dir):
    """The v2 view is read-only by itself (mounted here without --read-only)."""
    m = mount_factory(store_copy, view="v2", read_only=False)
    assert json.loads((m.path / "zp/i32_end_blosc_lz4_shuffle/.zarray").read_text())["zarr_format"] == 2
    problems = []
    problems += erofs_checks(m.path, "zp/i32_end_blosc_lz4_shuffle/0/0", "zp/i32_end_blosc_lz4_shuffle/.zarray")
    problems += erofs_checks(m.path, "zp/i32_end_blosc_lz4_shuffle/0/0", "zp/.zattrs")
    problems += erofs_checks(m.path, "v2/arr_blosc/0.0", "v2/arr_blosc/.zarray")
    assert not problems, "\n".join(problems)
    m.stop_checked()
    assert_tree_unchanged(store_copy, fixtures_dir)
