"""Issue 7: `--view decoded`. The tree of the unsharded view, with every chunk file holding the
decoded chunk (raw elements, C order, little-endian, prod(chunk_shape) * itemsize bytes, edge
chunks padded) and metadata rewritten to the plain `bytes` codec.

Expected content comes from two independent sources:
  * the data the writers wrote (zarr-python / tensorstore, read natively from the fixture
    store), for the in-bounds part of every chunk;
  * zarr_decoded_ref.py, which decodes the stored chunks with numcodecs/gzip/crc32c/numpy,
    for every byte including the padding of edge chunks (test_reference_decoder checks that
    model against the writers without a mount).
Nothing is compared with values read through the same mount.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
import zarr

import zarr_decoded_ref as zdr
import zarr_view_ref as ref
from zm_harness import fixture_array_paths
from zm_views import assert_tree_unchanged, erofs_checks
from zm_readers import assert_same_array, entry_for, zp_open_via_consolidated, zp_open_via_parent, zp_read

ARRAYS = fixture_array_paths()

# (case id, array path, what the fixture's codec chain must contain: see _signature)
CODEC_CASES = [
    ("blosc-lz4-shuffle-sharded", "zp/i32_end_blosc_lz4_shuffle", ["sharding", "blosc:lz4:shuffle"]),
    ("blosc-zstd-bitshuffle-sharded", "zp/i32_start_blosc_zstd_bitshuffle", ["sharding", "blosc:zstd:bitshuffle"]),
    ("blosc-blosclz-noshuffle-sharded", "zp/u8_ragged_blosc_noshuffle", ["sharding", "blosc:blosclz:noshuffle"]),
    ("blosc-zstd-shuffle-tensorstore", "ts/f32_3d_blosc_dotkeys", ["sharding", "blosc:zstd:shuffle"]),
    ("blosc-lz4hc-shuffle-unsharded", "zp/unsharded_blosc_lz4hc", ["blosc:lz4hc:shuffle"]),
    ("blosc-zlib-bitshuffle-transpose3d", "zp/unsharded_transpose3d_blosc_zlib",
     ["blosc:zlib:bitshuffle", "transpose:2,0,1"]),
    ("blosc-v2", "v2/arr_blosc", ["v2:blosc"]),
    ("zstd-sharded", "zp/f64_3d_zstd", ["sharding", "zstd"]),
    ("zstd-unsharded", "zp/unsharded_zstd", ["zstd"]),
    ("zstd-v2-bigendian-orderF", "v2/arr_F_bigendian_zstd", ["v2:zstd", "v2:dtype:>i2", "v2:order:F"]),
    ("gzip-sharded", "zp/f32_4d_gzip", ["sharding", "gzip"]),
    ("gzip-tensorstore", "ts/i64_4d_gzip", ["sharding", "gzip"]),
    ("gzip-v2", "v2/arr_gzip_sparse", ["v2:gzip"]),
    ("zlib-v2", "v2/arr_slash_f8", ["v2:zlib"]),
    ("fletcher32-zlib-v2", "v2/arr_fletcher32_filter", ["v2:fletcher32", "v2:zlib"]),
    ("crc32c-sharded", "zp/i32_crc32c_inner", ["sharding", "crc32c"]),
    ("crc32c-tensorstore", "ts/u16_start_crc32c_ragged_v2keys", ["sharding", "crc32c"]),
    ("bigendian-gzip-sharded", "zp/i16_bigendian_gzip_start", ["sharding", "bytes:big", "gzip"]),
    ("bigendian-tensorstore", "ts/i32_big_endian_start", ["sharding", "bytes:big"]),
    ("transpose-unsharded", "zp/unsharded_transpose_zstd", ["transpose:1,0", "zstd"]),
    ("transpose-before-sharding", "zp/no_unpack_transpose", ["transpose:1,0", "sharding"]),
    ("gzip-after-sharding", "zp/no_unpack_gzip_after", ["sharding", "gzip"]),
    ("nested-sharding", "zp/nested_sharding", ["sharding", "sharding:nested"]),
    ("no-compression", "zp/u8_1d_nocompress", ["sharding"]),
]


def _signature(meta: dict) -> set[str]:
    """Flat description of a fixture array's codecs (from its stored metadata)."""
    out: set[str] = set()
    if meta.get("zarr_format") == 2:
        for c in [*(meta.get("filters") or []), *([meta["compressor"]] if meta.get("compressor") else [])]:
            out.add(f"v2:{c['id']}")
        out |= {f"v2:dtype:{meta['dtype']}", f"v2:order:{meta.get('order', 'C')}"}
        return out

    def walk(codecs, depth):
        for c in codecs:
            cfg = c.get("configuration") or {}
            if c["name"] == "sharding_indexed":
                out.add("sharding" if depth == 0 else "sharding:nested")
                walk(cfg["codecs"], depth + 1)
            elif c["name"] == "blosc":
                out.add(f"blosc:{cfg['cname']}:{cfg['shuffle']}")
            elif c["name"] == "transpose":
                out.add("transpose:" + ",".join(map(str, cfg["order"])))
            elif c["name"] == "bytes":
                out.add(f"bytes:{cfg.get('endian', 'little')}")
            else:
                out.add(c["name"])

    walk(meta["codecs"], 0)
    return out


def _source_meta(fixtures_dir: Path, path: str) -> dict:
    d = fixtures_dir / path
    if (d / "zarr.json").exists():
        return json.loads((d / "zarr.json").read_text())
    return {**json.loads((d / ".zarray").read_text()), "zarr_format": 2}


@pytest.fixture(scope="module")
def decoded_ref(fixtures_dir):
    return zdr.reference_decoded_view(fixtures_dir)


@pytest.fixture(scope="module")
def native_arrays(fixtures_dir):
    """What the writers wrote, read natively with zarr-python (checked against the intended data
    by gen_fixtures.py)."""
    return {p: zp_read(fixtures_dir, p) for p in ARRAYS}


# --------------------------------------------------------------------------- no mount: the model


def test_codec_cases_match_fixtures(fixtures_dir):
    for case, path, needs in CODEC_CASES:
        sig = _signature(_source_meta(fixtures_dir, path))
        missing = [n for n in needs if n not in sig]
        assert not missing, f"{case}: fixture {path} lacks {missing} (has {sorted(sig)})"
    covered = {p for _, p, _ in CODEC_CASES}
    assert covered <= set(ARRAYS)


@pytest.mark.parametrize("path", ARRAYS)
def test_reference_decoder(path, decoded_ref, native_arrays, manifest):
    """The reference decoder agrees with the writers: the in-bounds part of every decoded chunk
    equals the matching block of the array that was written, and has the full chunk size."""
    _, arrays = decoded_ref
    a = arrays[path]
    e = entry_for(manifest, path)
    assert a.decodable == (not e["decoded_passthrough"]), path
    assert a.chunks or path == "zp/empty", f"{path}: the model found no chunks"
    if not a.decodable:
        pytest.skip("passed through by the decoded view")
    native = native_arrays[path]
    for key, coords in a.chunks.items():
        chunk = a.decode(key)
        assert chunk.shape == a.chunk_shape and chunk.dtype == a.dtype, key
        asl, csl = a.block_slices(coords)
        np.testing.assert_array_equal(chunk[csl], native[asl], err_msg=f"{path}/{key}")


# --------------------------------------------------------------------------- whole tree


def _mismatches(mnt: Path, expected: dict[str, ref.Expect], prefix: str = "") -> list[str]:
    base = mnt / prefix if prefix else mnt
    want = {k: v for k, v in expected.items() if not prefix or k.startswith(prefix + "/")}
    got = {(f"{prefix}/{k}" if prefix else k): p for k, p in ref.tree_files(base).items()}
    problems = [f"unexpected file in the mount: {k}" for k in sorted(set(got) - set(want))]
    problems += [f"missing from the mount: {k} ({want[k].kind})" for k in sorted(set(want) - set(got))]
    for k in sorted(set(want) & set(got)):
        try:
            data = got[k].read_bytes()
        except OSError as e:
            problems.append(f"{k}: read failed: {e}")
            continue
        msg = ref.check_file(k, want[k], data)
        if msg:
            problems.append(msg)
        st = got[k].stat()
        if st.st_size != len(data):
            problems.append(f"{k}: stat size {st.st_size} but {len(data)} bytes read")
    return problems


@pytest.mark.mount
def test_whole_tree_matches_reference(decoded_mount, decoded_ref):
    files, _ = decoded_ref
    problems = _mismatches(decoded_mount.path, files)
    assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems[:60])


@pytest.mark.mount
@pytest.mark.parametrize("path", ARRAYS)
def test_array_files(path, decoded_mount, decoded_ref):
    """Per array: the file set (the unsharded view's), metadata, and every chunk's bytes."""
    files, _ = decoded_ref
    problems = _mismatches(decoded_mount.path, files, prefix=path)
    assert not problems, "\n".join(problems[:60])


# --------------------------------------------------------------------------- chunks


@pytest.mark.mount
@pytest.mark.parametrize("path", ARRAYS)
def test_chunks_are_written_blocks(path, decoded_mount, decoded_ref, native_arrays, fixtures_dir):
    """numpy.fromfile of every decoded chunk file: exactly prod(chunk_shape) elements; the
    in-bounds part equals the block the writer wrote; all of it (padding included) equals the
    reference decoder's chunk."""
    _, arrays = decoded_ref
    a = arrays[path]
    mnt = decoded_mount.path / path
    if not a.decodable:
        for key in a.chunks:
            assert (mnt / key).read_bytes() == (fixtures_dir / path / key).read_bytes(), \
                f"{path}/{key}: an array the view cannot decode must pass through untouched"
        return
    native = native_arrays[path]
    problems = []
    for key, coords in sorted(a.chunks.items()):
        got = np.fromfile(mnt / key, dtype=a.dtype)
        if got.size != math.prod(a.chunk_shape):
            problems.append(f"{key}: {got.size * a.dtype.itemsize} bytes, want {a.chunk_nbytes} "
                            f"({math.prod(a.chunk_shape)} x {a.dtype.str})")
            continue
        got = got.reshape(a.chunk_shape)
        asl, csl = a.block_slices(coords)
        if not np.array_equal(got[csl], native[asl], equal_nan=a.dtype.kind in "fc"):
            problems.append(f"{key}: in-bounds part differs from the written block native{list(asl)}")
            continue
        if not np.array_equal(got, a.decode(key), equal_nan=a.dtype.kind in "fc"):
            problems.append(f"{key}: padding of the edge chunk differs from the stored chunk's padding")
    assert not problems, f"{path}: {len(problems)} bad chunks of {len(a.chunks)}:\n" + "\n".join(problems[:30])


def _dd(path: Path) -> bytes:
    res = subprocess.run(["dd", f"if={path}", "bs=65536", "status=none"], capture_output=True, timeout=60)
    assert res.returncode == 0, f"dd {path}: {res.stderr.decode(errors='replace')}"
    return res.stdout


@pytest.mark.mount
@pytest.mark.parametrize("case, path, needs", CODEC_CASES, ids=[c[0] for c in CODEC_CASES])
def test_dd_per_codec(case, path, needs, decoded_mount, decoded_ref, native_arrays):
    """`dd` of the first, a middle and the last chunk (an edge chunk where the array is ragged),
    read as raw little-endian C-order elements, gives the block of the written array."""
    _, arrays = decoded_ref
    a = arrays[path]
    keys = sorted(a.chunks, key=lambda k: a.chunks[k])
    assert keys, f"{path} has no chunks"
    native = native_arrays[path]
    for key in dict.fromkeys([keys[0], keys[len(keys) // 2], keys[-1]]):
        data = _dd(decoded_mount.path / path / key)
        assert len(data) == a.chunk_nbytes, f"{case}: {path}/{key} has {len(data)} bytes, want {a.chunk_nbytes}"
        chunk = np.frombuffer(data, dtype=a.dtype).reshape(a.chunk_shape)
        asl, csl = a.block_slices(a.chunks[key])
        np.testing.assert_array_equal(chunk[csl], native[asl], err_msg=f"{case}: {path}/{key} vs written block")


@pytest.mark.mount
def test_stat_size_known_without_reading(mount_factory, fixtures_dir, decoded_ref):
    """On a fresh mount, stat of every chunk file (nothing read yet) gives
    prod(chunk_shape) * itemsize; then a read returns exactly that many bytes."""
    _, arrays = decoded_ref
    m = mount_factory(fixtures_dir, view="decoded", read_only=True)
    bad = []
    for path, a in arrays.items():
        if not a.decodable:
            continue
        for key in a.chunks:
            st = os.stat(m.path / path / key)
            if st.st_size != a.chunk_nbytes:
                bad.append(f"{path}/{key}: st_size {st.st_size}, want {a.chunk_nbytes}")
    assert not bad, f"{len(bad)} wrong sizes:\n" + "\n".join(bad[:40])
    # a ragged edge chunk reads back with exactly that many bytes
    a = arrays["zp/u8_ragged_blosc_noshuffle"]
    last = max(a.chunks, key=lambda k: a.chunks[k])
    with open(m.path / a.path / last, "rb") as f:
        assert len(f.read()) == a.chunk_nbytes, last
    assert os.stat(m.path / a.path / last).st_size == a.chunk_nbytes, f"{last} after reading"


@pytest.mark.mount
def test_partial_reads(decoded_mount, decoded_ref):
    """Reads at offsets inside a decoded chunk (and past its end) return the right slice."""
    _, arrays = decoded_ref
    for path, key in [("zp/i32_end_blosc_lz4_shuffle", "c/3/7"), ("zp/f64_3d_zstd", "c/3/4/2"),
                      ("v2/arr_F_bigendian_zstd", "2.2")]:
        a = arrays[path]
        want = zdr.chunk_bytes(a.decode(key))
        with open(decoded_mount.path / path / key, "rb") as f:
            for off, n in [(0, 8), (5, 17), (len(want) - 3, 10), (len(want), 4), (len(want) // 2, len(want))]:
                f.seek(off)
                assert f.read(n) == want[off: off + n], (path, key, off, n)


@pytest.mark.mount
def test_large_chunks_and_mmap(decoded_mount, decoded_ref, native_arrays):
    """512 KiB decoded chunks (more than one FUSE read each) read whole, at scattered offsets,
    and through mmap (numpy.memmap), as raw-chunk readers do."""
    _, arrays = decoded_ref
    a = arrays["zp/f64_large_chunks"]
    assert a.chunk_nbytes == 256 * 256 * 8 and len(a.chunks) == 4
    native = native_arrays[a.path]
    for key, coords in sorted(a.chunks.items()):
        f = decoded_mount.path / a.path / key
        want = zdr.chunk_bytes(a.decode(key))
        assert f.read_bytes() == want, key
        with open(f, "rb") as fh:
            for off in (131072 - 5, 262144, 400000, len(want) - 100):
                fh.seek(off)
                assert fh.read(70000) == want[off: off + 70000], (key, off)
        mm = np.memmap(f, dtype=a.dtype, mode="r", shape=a.chunk_shape)
        try:
            asl, csl = a.block_slices(coords)
            np.testing.assert_array_equal(mm[csl], native[asl], err_msg=f"memmap of {key}")
            assert mm.tobytes() == want, f"memmap of {key}"
        finally:
            del mm


@pytest.mark.mount
def test_concurrent_reads(mount_factory, fixtures_dir, decoded_ref):
    """A fresh mount, 16 threads reading every decoded chunk (each twice, in shuffled order,
    whole or from the middle): every read returns the reference bytes."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    files, arrays = decoded_ref
    m = mount_factory(fixtures_dir, view="decoded", read_only=True)
    work = [f"{p}/{k}" for p, a in arrays.items() if a.decodable for k in a.chunks] * 2
    random.Random(7).shuffle(work)

    def read(i_rel):
        i, rel = i_rel
        want = files[rel].data
        with open(m.path / rel, "rb") as f:
            if i % 3 == 0:
                f.seek(len(want) // 3)
                got, want = f.read(), want[len(want) // 3:]
            else:
                got = f.read()
        return None if got == want else f"{rel}: {len(got)} bytes, differ from the reference"

    with ThreadPoolExecutor(16) as ex:
        bad = [r for r in ex.map(read, enumerate(work)) if r]
    assert not bad, f"{len(bad)} of {len(work)} concurrent reads wrong:\n" + "\n".join(bad[:20])


@pytest.mark.mount
@pytest.mark.parametrize("path", ["zp/sparse_omit_fill", "ts/u8_sparse_fill7", "zp/empty", "v2/arr_gzip_sparse",
                                  "zp/f64_nan_fill", "zp/shrunk_stored_past_edge"])
def test_absent_chunks_stay_absent(path, decoded_mount, decoded_ref):
    """Lookups of every chunk key of the grid: only the chunks present in the unsharded view
    exist (absent ones are filled by readers, chunks past the edge stay hidden)."""
    import itertools
    _, arrays = decoded_ref
    a = arrays[path]
    grid = ref.grid_shape(a.shape, a.chunk_shape)
    present = set(a.chunks)
    for coords in itertools.product(*(range(g + 1) for g in grid)):
        key = ref.chunk_key(coords, a.encoding)
        exists = os.path.lexists(decoded_mount.path / path / key)
        assert exists == (key in present), f"{path}/{key}: exists={exists}, want {key in present}"


# --------------------------------------------------------------------------- metadata


@pytest.mark.mount
@pytest.mark.parametrize("path", ARRAYS)
def test_array_metadata(path, decoded_mount, decoded_ref, manifest, fixtures_dir):
    _, arrays = decoded_ref
    a = arrays[path]
    e = entry_for(manifest, path)
    mnt = decoded_mount.path / path
    if e["decoded_passthrough"]:
        for name in ("zarr.json", ".zarray", ".zattrs"):
            if (fixtures_dir / path / name).exists():
                assert (mnt / name).read_bytes() == (fixtures_dir / path / name).read_bytes(), \
                    f"{name} of an array the view cannot decode must be untouched"
        return
    if a.zarr_format == 3:
        got = json.loads((mnt / "zarr.json").read_text())
        assert got["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}], got["codecs"]
        assert got == zdr.decoded_v3_meta(a.meta)
        assert got.get("attributes", {}) == e["attributes"]
        return
    got = json.loads((mnt / ".zarray").read_text())
    src = json.loads((fixtures_dir / path / ".zarray").read_text())
    assert (got["compressor"], got["filters"], got["order"]) == (None, None, "C")
    assert got["dtype"] == zdr.dtype_str_le(src["dtype"])
    assert got == {**src, "compressor": None, "filters": None, "order": "C", "dtype": zdr.dtype_str_le(src["dtype"])}
    if (fixtures_dir / path / ".zattrs").exists():
        assert (mnt / ".zattrs").read_bytes() == (fixtures_dir / path / ".zattrs").read_bytes()


@pytest.mark.mount
def test_consolidated_metadata_rewritten(decoded_mount, decoded_ref):
    """nested/zarr.json (inline consolidated metadata) and v2/.zmetadata list every array
    exactly as its own decoded metadata file says: no codec survives but `bytes`; the array
    the view cannot decode keeps its original entry."""
    mnt = decoded_mount.path
    files, arrays = decoded_ref
    group = json.loads((mnt / "nested/zarr.json").read_text())
    cm = group.get("consolidated_metadata")
    assert isinstance(cm, dict) and cm.get("metadata"), "inline consolidated metadata dropped or empty"
    arrays_seen = 0
    for k, m in cm["metadata"].items():
        if m.get("node_type") != "array":
            continue
        arrays_seen += 1
        own = json.loads((mnt / "nested" / k / "zarr.json").read_text())
        assert m["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}], k
        assert m == own, f"consolidated entry {k} differs from nested/{k}/zarr.json"
    assert arrays_seen == sum(1 for p in arrays if p.startswith("nested/"))
    assert group == files["nested/zarr.json"].json

    zmeta = json.loads((mnt / "v2/.zmetadata").read_text())
    assert zmeta == files["v2/.zmetadata"].json
    for p, a in arrays.items():
        if not p.startswith("v2/"):
            continue
        entry = zmeta["metadata"][p[len("v2/"):] + "/.zarray"]
        own = json.loads((mnt / p / ".zarray").read_text())
        assert entry == own, f".zmetadata entry of {p} differs from its .zarray"
        if a.decodable:
            assert (entry["compressor"], entry["filters"], entry["order"]) == (None, None, "C"), p
            assert not entry["dtype"].startswith(">"), p
        else:
            assert entry == a.meta, f"{p}: the entry of an undecodable array must stay as stored"


# --------------------------------------------------------------------------- real readers


def assert_same_values(actual: np.ndarray, expected: np.ndarray, what: str, zarr_format: int) -> None:
    """v3: same dtype; v2: same kind and item size (the decoded view makes '>i2' '<i2')."""
    if zarr_format == 3:
        assert_same_array(actual, expected, what)
        return
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert (actual.dtype.kind, actual.dtype.itemsize) == (expected.dtype.kind, expected.dtype.itemsize), \
        f"{what}: dtype {actual.dtype.str} != {expected.dtype.str}"
    np.testing.assert_array_equal(actual, expected, err_msg=what)


@pytest.mark.mount
@pytest.mark.parametrize("path", ARRAYS)
def test_zarr_python_reads(path, decoded_mount, manifest, native_arrays):
    e = entry_for(manifest, path)
    native, fmt = native_arrays[path], e["zarr_format"]
    mnt = decoded_mount.path
    arr = zarr.open_array(str(mnt / path), mode="r")
    assert_same_values(arr[...], native, f"zarr-python open_array through the decoded view: {path}", fmt)
    if not e["decoded_passthrough"]:
        assert arr.compressors == (), f"{path}: still compressed: {arr.compressors}"
        assert not arr.filters, f"{path}: still filtered: {arr.filters}"
    arr = zp_open_via_parent(mnt, e)
    assert_same_values(arr[...], native, f"zarr-python via parent group: {path}", fmt)
    if e["consolidated_root"]:
        arr = zp_open_via_consolidated(mnt, e)
        assert_same_values(arr[...], native, f"zarr-python via consolidated: {path}", fmt)
        if not e["decoded_passthrough"]:
            assert arr.compressors == (), f"{path} via consolidated metadata: still compressed: {arr.compressors}"


@pytest.mark.mount
@pytest.mark.parametrize("path", ARRAYS)
def test_tensorstore_reads(path, decoded_mount, manifest, native_arrays):
    e = entry_for(manifest, path)
    if e["decoded_passthrough"]:
        pytest.skip("passed through undecoded, and tensorstore cannot read it natively either")
    driver = "zarr3" if e["zarr_format"] == 3 else "zarr"
    t = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(decoded_mount.path / path) + "/"},
                 "open": True}, read=True).result()
    got = t.read().result()
    np.testing.assert_array_equal(got, native_arrays[path], err_msg=f"tensorstore through the decoded view: {path}")


# --------------------------------------------------------------------------- read-only


@pytest.mark.mount
def test_writes_get_erofs(mount_factory, store_copy, fixtures_dir):
    """The decoded view is read-only by itself (mounted here without --read-only)."""
    m = mount_factory(store_copy, view="decoded", read_only=False)
    chunk = "zp/i32_end_blosc_lz4_shuffle/c/0/0"
    assert len((m.path / chunk).read_bytes()) == 5 * 4 * 4, "the mount must still read"
    problems = []
    problems += erofs_checks(m.path, chunk, "zp/i32_end_blosc_lz4_shuffle/zarr.json")
    problems += erofs_checks(m.path, "zp/unsharded_zstd/c/0/0", "zp/unsharded_zstd/zarr.json")
    problems += erofs_checks(m.path, "v2/arr_blosc/0.0", "v2/arr_blosc/.zarray")
    assert not problems, "\n".join(problems)
    m.stop_checked()
    assert_tree_unchanged(store_copy, fixtures_dir)
