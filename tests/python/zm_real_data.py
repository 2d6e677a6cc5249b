"""The real-data store of the v2-view tests (issue 18): every data type zarr-python 3 can write
as Zarr v2 and the numcodecs codecs, sharded and unsharded, with ragged edges and missing chunks,
written by zarr-python 3 (test_v2_real_data.py, test_v2_readers.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import zarr
import zarr.codecs.numcodecs as znc
from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec

SHAPE = (23, 17)  # ragged for chunks (5, 4) and shards (10, 8)
CHUNKS, SHARDS = (5, 4), (10, 8)
WRITTEN = (slice(0, 14), slice(0, 17))  # rows 14.. are never written: missing chunks/shards


def values(dtype) -> np.ndarray:
    n = math.prod(SHAPE)
    i = np.arange(n).reshape(SHAPE)
    if dtype == "str":
        return np.array([f"s{k % 37}" + "é" * (k % 3) for k in range(n)],
                        dtype=np.dtypes.StringDType()).reshape(SHAPE)
    if dtype == "vlen-bytes":
        return np.array([bytes(range(k % 5)) for k in range(n)], dtype=object).reshape(SHAPE)
    dt = np.dtype(dtype)
    if dt.kind == "M":
        return (np.datetime64("2020-01-01T00:00", "ms") + i * np.timedelta64(1370, "ms")).astype(dt)
    if dt.kind == "m":
        return (i * 3).astype(dt)
    if dt.kind == "U":
        return np.array([f"u{k % 97}" for k in range(n)], dtype=dt).reshape(SHAPE)
    if dt.kind == "S":
        return np.array([b"x%d" % (k % 10) for k in range(n)], dtype=dt).reshape(SHAPE)
    if dt.kind == "b":
        return (i % 3) == 0
    if dt.kind == "c":
        return (i + 1j * (i % 7)).astype(dt)
    if dt.kind == "f":
        return ((i - 150) * 0.37).astype(dt)
    return (i - 100).astype(dt) if dt.kind == "i" else i.astype(dt)


# name: (dtype, fill_value, create_array keywords); every entry is written sharded and unsharded
TYPES = {
    "datetime64_10ms": ("datetime64[10ms]", np.datetime64("NaT"), {}),
    "timedelta64_s": ("timedelta64[s]", np.timedelta64(5, "s"), {}),
    "string": ("str", "n/a", {}),
    "vlen_bytes": ("vlen-bytes", b"", {}),
    "utf32_U4": ("<U4", "none", {}),
    "bytes_S3": ("|S3", b"zz", {}),
    "float16": ("float16", np.nan, {}),
    "complex128": ("complex128", complex(1, -1), {}),
    "bool": ("bool", True, {}),
    "int32_big_crc32c": ("int32", -7, dict(serializer=BytesCodec(endian="big"),
                                           compressors=[GzipCodec(level=1), Crc32cCodec()])),
}
# name: (dtype, filters, compressors, sharded)
CODECS = {
    "bz2": ("float64", None, [znc.BZ2(level=2)], True),
    "lz4": ("int16", None, [znc.LZ4(acceleration=1)], False),
    "lzma": ("uint8", None, [znc.LZMA(preset=1)], True),
    "zlib": ("int32", None, [znc.Zlib(level=3)], False),
    "adler32": ("float32", None, [znc.Adler32()], False),
    "fletcher32": ("int64", None, [znc.Fletcher32()], True),
    "crc32": ("uint32", None, [znc.CRC32()], False),
    "numcodecs_crc32c": ("uint16", None, [znc.Zlib(level=1), znc.CRC32C()], True),
    "shuffle_zstd": ("float64", None, [znc.Shuffle(elementsize=8), ZstdCodec(level=1)], False),
    "delta_zlib": ("int32", [znc.Delta(dtype="<i4")], [znc.Zlib(level=1)], True),
    "bitround": ("float32", [znc.BitRound(keepbits=8)], [ZstdCodec(level=1)], False),
    "fixedscaleoffset": ("float64", [znc.FixedScaleOffset(offset=-50, scale=100, dtype="<f8", astype="<i4")],
                         None, True),
    "quantize_gzip": ("float64", [znc.Quantize(digits=2, dtype="<f8")], [GzipCodec(level=1)], False),
}
def write_store(root: Path) -> dict[str, np.ndarray]:
    """The arrays, written by zarr-python 3 (v3), and what zarr-python 3 reads back natively."""
    g = zarr.open_group(str(root), mode="w", attributes={"about": "issue 18 real data"})
    made = {}
    for name, (dtype, fill, kw) in TYPES.items():
        for sharded in (False, True):
            zdtype = {"str": str, "vlen-bytes": zarr.dtype.VariableLengthBytes()}.get(dtype, dtype)
            made[f"{name}_{'sharded' if sharded else 'plain'}"] = (zdtype, fill, dict(kw), sharded, dtype)
    for name, (dtype, filters, compressors, sharded) in CODECS.items():
        made[name] = (dtype, 0, dict(filters=filters, compressors=compressors), sharded, dtype)
    native = {}
    for path, (zdtype, fill, kw, sharded, dtype) in made.items():
        a = g.create_array(path, shape=SHAPE, chunks=CHUNKS, shards=SHARDS if sharded else None, dtype=zdtype,
                           fill_value=fill, **kw)
        a[WRITTEN] = values(dtype)[WRITTEN]
        native[path] = zarr.open_array(str(root / path), mode="r")[...]
    zarr.consolidate_metadata(str(root))
    return native


def zarr2_expected(native: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What zarr-python 2 must read: zarr-python 3's native reads, except one thing v2 cannot
    say: a v2 fill value is JSON, so the empty-bytes fill of a variable_length_bytes array is
    the string "" (zarr-python 3 writes the same .zarray for it), and zarr-python 2 fills the
    never-written chunks of those arrays with "" instead of b"". Written chunks are bytes."""
    want = {}
    for p, a in native.items():
        if p.startswith("vlen_bytes"):
            a = a.copy()
            unwritten = np.ones(a.shape, dtype=bool)
            unwritten[WRITTEN] = False
            # whole chunks only: the written region's edge chunks hold b"" fill from zarr-python 3
            rows = math.ceil(WRITTEN[0].stop / CHUNKS[0]) * CHUNKS[0]
            unwritten[:rows] = False
            assert all(v == b"" for v in a[unwritten])
            a[unwritten] = ""
        want[p] = a
    return want
