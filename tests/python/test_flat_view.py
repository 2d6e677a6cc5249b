"""Issue 41: `--view flat`. Every fixed-size array of the fixture store shows as `NAME.npy` in
its parent directory (groups stay directories, Zarr documents and array directories are gone),
and `numpy.load(..., mmap_mode="r")` of it equals what zarr-python reads from the original,
through a local directory, S3 (moto) and a zip. On S3 behind the 20 ms latency proxy a window
read through the memmap costs only the chunks under the pages it reads, and a whole file read
in order fetches each chunk once. A corrupt chunk fails exactly the reads of its bytes."""

from __future__ import annotations

import errno
import mmap
import os
import re
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import zarr

from zm_harness import fixture_array_paths
from zm_readers import entry_for, zp_read
from zm_s3 import BUCKET, DAEMON_ENV

pytestmark = pytest.mark.mount

ARRAYS = fixture_array_paths()
PROXY = Path(__file__).resolve().parents[2] / "scripts" / "latency_proxy.py"
PAGE = mmap.PAGESIZE


def fixed_size(a: np.ndarray) -> bool:
    return a.dtype.kind not in "OTV"


@pytest.fixture(scope="module")
def originals(fixtures_dir, manifest):
    """path -> (what zarr-python reads, whether the daemon decodes its codecs)."""
    return {p: (zp_read(fixtures_dir, p), not entry_for(manifest, p)["decoded_passthrough"])
            for p in ARRAYS}


def check_all(root: Path, originals: dict) -> None:
    """Every fixed-size array the daemon can decode equal through its .npy; the others (and
    every array directory) absent."""
    bad = []
    shown = 0
    for path, (want, decodable) in originals.items():
        npy = root / f"{path}.npy"
        assert not (root / path).exists(), f"{path}: the array directory is shown"
        if not (fixed_size(want) and decodable):
            assert not npy.exists(), f"{path}: an array the view cannot show as .npy"
            continue
        shown += 1
        got = np.load(npy, mmap_mode="r")
        if got.shape != want.shape or got.dtype != want.dtype.newbyteorder("<") and got.dtype != want.dtype:
            bad.append(f"{path}: {got.dtype}{got.shape} != {want.dtype}{want.shape}")
        elif not np.array_equal(np.asarray(got), want, equal_nan=want.dtype.kind in "fc"):
            bad.append(f"{path}: values differ")
    assert not bad, "\n".join(bad)
    assert shown > len(originals) // 2


def test_local_fixtures_read_equal(fixtures_dir, originals, mount_factory):
    m = mount_factory(fixtures_dir, view="flat")
    check_all(m.path, originals)
    # Groups are directories without Zarr documents.
    names = set(os.listdir(m.path))
    assert "zarr.json" not in names and ".zgroup" not in names
    for top in {p.split("/")[0] for p in ARRAYS if "/" in p}:
        assert (m.path / top).is_dir()
        listed = os.listdir(m.path / top)
        assert not any(n in ("zarr.json", ".zgroup", ".zattrs") for n in listed), listed
    # Read-only.
    with pytest.raises(OSError) as e:
        (m.path / "new.npy").write_bytes(b"x")
    assert e.value.errno == errno.EROFS


def test_s3_fixtures_read_equal(fixtures_dir, originals, moto, mount_factory):
    moto.upload(fixtures_dir, "fx")
    m = mount_factory(moto.url("fx"), view="flat", env=DAEMON_ENV, extra_args=moto.mount_args())
    check_all(m.path, originals)


def test_zip_fixtures_read_equal(fixtures_dir, originals, tmp_path, mount_factory):
    archive = tmp_path / "fx.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as z:
        for f in sorted(fixtures_dir.rglob("*")):
            if f.is_file():
                z.write(f, str(f.relative_to(fixtures_dir)))
    m = mount_factory(archive, view="flat")
    check_all(m.path, originals)


def test_header_is_numpys(tmp_path, mount_factory):
    """The bytes before the data are what numpy.save writes for the same array."""
    a = zarr.create_array(str(tmp_path / "s.zarr"), shape=(7, 5), chunks=(3, 2), dtype=">u4", fill_value=9)
    a[:3] = np.arange(15, dtype="u4").reshape(3, 5)
    m = mount_factory(tmp_path / "s.zarr", view="flat")
    assert sorted(os.listdir(m.path)) == ["array.npy", "array.tif"]
    got = (m.path / "array.npy").read_bytes()
    want = tmp_path / "want.npy"
    np.save(want, a[...].astype("<u4"))
    assert got == want.read_bytes()


def test_corrupt_chunk_fails_exactly_its_bytes(tmp_path, mount_factory):
    """uint8 (64, 16384) in chunks of (16, 8192): chunk (1, 1) backs 16 ranges of 8192 bytes.
    Reads of whole pages inside them get EIO; reads of pages outside them read (the kernel reads
    whole pages, so a page shared with the chunk's bytes fails too)."""
    src = tmp_path / "c.zarr"
    root = zarr.open_group(str(src), mode="w")
    data = np.random.default_rng(41).integers(0, 255, (64, 16384), dtype="uint8")
    a = root.create_array("img", shape=data.shape, chunks=(16, 8192), dtype="uint8",
                          compressors=zarr.codecs.ZstdCodec())
    a[:] = data
    (src / "img" / "c" / "1" / "1").write_bytes(b"not zstd at all")
    m = mount_factory(src, view="flat")
    path = m.path / "img.npy"
    start = len(np.lib.format.magic(1, 0))  # magic and version
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(start + 2)[start:], "little")
    data_at = start + 2 + header_len
    bad = [(data_at + r * 16384 + 8192, data_at + r * 16384 + 16384) for r in range(16, 32)]

    def touches_bad(lo, hi):
        return any(lo < b_hi and b_lo < hi for b_lo, b_hi in bad)

    size = os.stat(path).st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        failed = readable = 0
        for page in range(size // PAGE + 1):
            lo, hi = page * PAGE, min((page + 1) * PAGE, size)
            if lo >= hi:
                break
            try:
                got = os.pread(fd, hi - lo, lo)
            except OSError as e:
                assert e.errno == errno.EIO, e
                assert touches_bad(lo, hi), f"page {page} failed but holds none of the chunk"
                failed += 1
                continue
            assert not touches_bad(lo, hi), f"page {page} read though it holds the bad chunk's bytes"
            flat = data.reshape(-1)
            want = flat[max(lo, data_at) - data_at:hi - data_at] if hi > data_at else b""
            assert got[max(0, data_at - lo):] == bytes(want)
            readable += 1
        assert failed >= 16 * 8192 // PAGE and readable > failed
    finally:
        os.close(fd)
    assert "img/c/1/1" in m.log_text(tail=None)


# ------------------------------------------------------------------ S3 behind the latency proxy


def chunk_requests(moto, start: int, prefix: str) -> Counter:
    return Counter(re.findall(rf'"(?:GET|HEAD) /{BUCKET}/{prefix}/c/(\d+/\d+) HTTP', moto.log_since(start)))


@pytest.fixture
def proxied(moto):
    proxy = subprocess.Popen([sys.executable, str(PROXY), "--target", str(moto.port), "--delay-ms", "20"],
                             stdout=subprocess.PIPE, text=True)
    try:
        port = int(proxy.stdout.readline().split()[1])
        yield ["--endpoint-url", f"http://127.0.0.1:{port}"]
    finally:
        proxy.terminate()
        proxy.wait(10)


def test_window_costs_only_the_chunks_under_its_pages(moto, proxied, tmp_path, mount_factory):
    """20000 x 20000 uint16 in 512 x 512 chunks, the chunks around the window written. A
    100 x 100 window read through the memmap (MADV_RANDOM: the kernel reads only the pages
    touched) requests the chunks under those pages and no others, each once."""
    shape, chunks = (20000, 20000), (512, 512)
    local = tmp_path / "big.zarr"
    a = zarr.create_array(str(local), shape=shape, chunks=chunks, dtype="uint16", fill_value=0,
                          compressors=zarr.codecs.ZstdCodec(level=1))
    rng = np.random.default_rng(7)
    block = rng.integers(0, 60000, (1536, 2560), dtype="uint16")
    a[512:2048, 0:2560] = block  # chunk rows 1..4, chunk columns 0..5
    a[0:512, 19968:20000] = 5  # one far away
    moto.upload(local, "big.zarr")
    m = mount_factory(moto.url("big.zarr"), view="flat", env=DAEMON_ENV, extra_args=proxied)
    path = m.path / "array.npy"  # an array at the root of the mount
    x = np.load(path, mmap_mode="r")
    x._mmap.madvise(mmap.MADV_RANDOM)
    # Counted from here: np.load's read of the header is a buffered read, which the kernel
    # extends by its read-ahead (the first element rows, under every chunk of chunk row 0).
    start = moto.log_size()
    rows, cols = slice(1000, 1100), slice(1000, 1100)
    got = np.array(x[rows, cols])
    np.testing.assert_array_equal(got, a[rows, cols])
    # The pages the window touches, and the chunks under their elements.
    data_at = x.offset
    expected = set()
    for r in range(rows.start, rows.stop):
        lo = data_at + (r * shape[1] + cols.start) * 2
        hi = data_at + (r * shape[1] + cols.stop) * 2
        for page in range(lo // PAGE, (hi - 1) // PAGE + 1):
            first = max(page * PAGE - data_at, 0) // 2
            last = ((page + 1) * PAGE - data_at - 1) // 2
            for e in (first, last):
                expected.add((e // shape[1] // chunks[0], e % shape[1] // chunks[1]))
            # A page within one row: every chunk column between its ends.
            r0, c0, c1 = first // shape[1], first % shape[1], last % shape[1]
            if first // shape[1] == last // shape[1]:
                expected |= {(r0 // chunks[0], c) for c in range(c0 // chunks[1], c1 // chunks[1] + 1)}
    expected = {f"{i}/{j}" for i, j in expected}
    got_requests = chunk_requests(moto, start, "big.zarr")
    assert set(got_requests) == expected, (sorted(got_requests), sorted(expected))
    # Pages start up to 2047 elements before the window: some reach back into the last chunks of
    # the row before. Still far from the 80 chunks of the two chunk rows.
    assert len(expected) <= 24
    assert all(n == 1 for n in got_requests.values()), got_requests


def test_whole_file_in_order_fetches_each_chunk_once(moto, proxied, tmp_path, mount_factory):
    """4096 x 4096 uint16 in 512 x 512 chunks, all written, read in order in 1 MiB reads: a
    chunk row is 8 chunks, each 1 MiB read covers 128 element rows across all of them."""
    local = tmp_path / "w.zarr"
    data = np.random.default_rng(8).integers(0, 65535, (4096, 4096), dtype="uint16")
    zarr.create_array(str(local), shape=data.shape, chunks=(512, 512), dtype="uint16",
                      compressors=zarr.codecs.ZstdCodec(level=1))[:] = data
    moto.upload(local, "w.zarr")
    m = mount_factory(moto.url("w.zarr"), view="flat", env=DAEMON_ENV, extra_args=proxied)
    start = moto.log_size()
    with open(m.path / "array.npy", "rb") as f:
        blob = b"".join(iter(lambda: f.read(1 << 20), b""))
    header = len(blob) - data.nbytes
    assert np.frombuffer(blob[header:], "<u2").reshape(data.shape).tobytes() == data.tobytes()
    got = chunk_requests(moto, start, "w.zarr")
    assert got == Counter({f"{i}/{j}": 1 for i in range(8) for j in range(8)}), got
