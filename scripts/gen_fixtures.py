#!/usr/bin/env python3
"""Generate the zarr-mount test fixtures: a local directory store plus manifest.json.

    .venv/bin/python scripts/gen_fixtures.py OUTDIR [--force]

OUTDIR becomes a Zarr v3 directory store with one root group and the arrays listed in
OUTDIR/manifest.json (written by zarr-python 3 and tensorstore; the data is deterministic:
np.arange-based or from a seeded RNG). Every array is read back with zarr-python after
writing and compared with the data that was meant to be written; the sharding layout in
each zarr.json is checked against the manifest. Exits non-zero if any check fails.

Layout (paths relative to OUTDIR):
  zarr.json            root group (attributes)
  manifest.json        what was written and what the views must show
  zp/...               arrays written by zarr-python 3 (group with attributes)
  ts/...               arrays written by tensorstore's zarr3 driver (group made by zarr-python)
  nested/...           nested groups, consolidated at nested/ (inline consolidated_metadata)
  v2/...               a Zarr v2 group with .zattrs and consolidated .zmetadata

Writers that refuse something are noted at the spec that needed the other writer.
Two runs give identical trees except for gzip-compressed chunks written by zarr-python
(numcodecs' gzip header carries the current time); the decoded data is always the same.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import numcodecs
import numpy as np
import tensorstore as ts
import zarr
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)

# zarr-python warns that sharding followed by a bytes->bytes codec disables partial reads;
# that array is written on purpose.
warnings.filterwarnings("ignore", message=".*disables partial reads.*")
# v2 consolidated metadata is not part of the v3 spec; we write it on purpose.
warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")

MANIFEST_VERSION = 1

# --------------------------------------------------------------------------- data helpers


def ramp(shape, dtype, modulus: int | None = None, offset: int = 0) -> np.ndarray:
    n = math.prod(shape)
    a = np.arange(offset, offset + n, dtype=np.int64)
    if modulus is not None:
        a = a % modulus
    return a.reshape(shape).astype(dtype)


def noisy_float(shape, seed: int, dtype="float64") -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 100).round(3).astype(dtype)


# --------------------------------------------------------------------------- spec table

# Each writer function gets (root_path, array_path) and returns (expected ndarray, extra
# manifest fields). Metadata-derived fields (shape, codecs, index location, ...) are read
# back from the written zarr.json afterwards, so the manifest states what is on disk.

SPECS: list[tuple[str, str, str, Callable[..., tuple[np.ndarray, dict]]]] = []


def spec(path: str, writer: str, description: str):
    def deco(fn):
        SPECS.append((path, writer, description, fn))
        return fn

    return deco


def zgroup(root: Path, path: str):
    return zarr.open_group(str(root), mode="r+").require_group(path) if path else zarr.open_group(
        str(root), mode="r+"
    )


def zp_array(root: Path, path: str, **kw):
    parent, _, name = path.rpartition("/")
    return zgroup(root, parent).create_array(name, **kw)


def zp_array_codecs(root: Path, path: str, *, shape, chunks, dtype, codecs, **kw):
    """Arrays with an explicit codec list (nested sharding, transpose, codec after sharding),
    which zarr.create_array's filters/serializer/compressors arguments cannot express."""
    return zarr.create(
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        codecs=codecs,
        store=str(root),
        path=path,
        zarr_format=3,
        **kw,
    )


# ---- zarr-python, sharded, unpackable ------------------------------------------------


@spec("zp/i32_end_blosc_lz4_shuffle", "zarr-python", "2-d int32, index at end, blosc lz4 byte-shuffle")
def _(root, path):
    data = ramp((30, 40), "int32", offset=-600)
    a = zp_array(root, path, shape=data.shape, dtype="int32", shards=(10, 8), chunks=(5, 4),
                 compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")],
                 dimension_names=["y", "x"], attributes={"units": "counts", "scale": [1.0, 2.0]})
    a[:] = data
    return data, {}


@spec("zp/i32_start_blosc_zstd_bitshuffle", "zarr-python", "2-d int32, index at start, blosc zstd bit-shuffle")
def _(root, path):
    data = ramp((30, 40), "int32", modulus=97)
    # create_array builds the sharding codec itself from shards=/chunks= and has no
    # index_location argument, so the explicit codec list is used for index-at-start arrays.
    a = zp_array_codecs(root, path, shape=data.shape, chunks=(10, 8), dtype="int32", codecs=[
        ShardingCodec(chunk_shape=(5, 4),
                      codecs=[BytesCodec(), BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle")],
                      index_location="start")])
    a[:] = data
    return data, {}


@spec("zp/u8_ragged_blosc_noshuffle", "zarr-python",
      "2-d uint8 23x37 (not a multiple of shard 10x8 or chunk 5x4), blosc blosclz no shuffle")
def _(root, path):
    data = ramp((23, 37), "uint8", modulus=251)
    a = zp_array(root, path, shape=data.shape, dtype="uint8", shards=(10, 8), chunks=(5, 4),
                 compressors=[BloscCodec(cname="blosclz", clevel=9, shuffle="noshuffle")])
    a[:] = data
    return data, {}


@spec("zp/f64_3d_zstd", "zarr-python", "3-d float64 12x10x9 ragged in two dims, zstd")
def _(root, path):
    data = noisy_float((12, 10, 9), seed=3)
    a = zp_array(root, path, shape=data.shape, dtype="float64", shards=(6, 4, 6), chunks=(3, 2, 3),
                 compressors=[ZstdCodec(level=5)], dimension_names=["z", "y", "x"])
    a[:] = data
    return data, {}


@spec("zp/i16_bigendian_gzip_start", "zarr-python", "2-d int16 big-endian bytes codec + gzip, index at start")
def _(root, path):
    data = ramp((30, 40), "int16", offset=-20000) * 7
    a = zp_array_codecs(root, path, shape=data.shape, chunks=(10, 8), dtype="int16", codecs=[
        ShardingCodec(chunk_shape=(5, 4), codecs=[BytesCodec(endian="big"), GzipCodec(level=6)],
                      index_location="start")])
    a[:] = data
    return data, {}


@spec("zp/i32_crc32c_inner", "zarr-python", "2-d int32, inner codecs bytes + crc32c (no compression)")
def _(root, path):
    data = ramp((20, 24), "int32", offset=1000)
    a = zp_array(root, path, shape=data.shape, dtype="int32", shards=(10, 8), chunks=(5, 4),
                 compressors=[Crc32cCodec()])
    a[:] = data
    return data, {}


@spec("zp/u8_1d_nocompress", "zarr-python", "1-d uint8, no bytes->bytes codec at all")
def _(root, path):
    data = ramp((100,), "uint8")
    a = zp_array(root, path, shape=data.shape, dtype="uint8", shards=(20,), chunks=(5,), compressors=None)
    a[:] = data
    return data, {}


@spec("zp/f32_4d_gzip", "zarr-python", "4-d float32 4x6x5x9 (ragged last dim), gzip")
def _(root, path):
    data = noisy_float((4, 6, 5, 9), seed=4, dtype="float32")
    a = zp_array(root, path, shape=data.shape, dtype="float32", shards=(2, 3, 5, 4), chunks=(1, 3, 5, 2),
                 compressors=[GzipCodec(level=1)])
    a[:] = data
    return data, {}


@spec("zp/bool_1d_ragged", "zarr-python", "1-d bool 50 in shards of 16 and chunks of 4, zstd")
def _(root, path):
    data = (ramp((50,), "int64") % 3 == 0)
    a = zp_array(root, path, shape=data.shape, dtype="bool", shards=(16,), chunks=(4,),
                 compressors=[ZstdCodec(level=1)])
    a[:] = data
    return data, {}


def _sparse(root, path, write_empty: bool):
    fill = -1
    data = np.full((30, 40), fill, dtype="int32")
    a = zp_array(root, path, shape=data.shape, dtype="int32", shards=(10, 8), chunks=(5, 4),
                 fill_value=fill, compressors=[ZstdCodec(level=1)],
                 config={"write_empty_chunks": write_empty})
    # partial write across shards (0,0) and (0,1): parts of inner chunks stay fill
    region = ramp((7, 9), "int32")
    data[0:7, 0:9] = region
    a[0:7, 0:9] = region
    # whole shard (1,1) written, but one inner chunk of it equals the fill value
    block = ramp((10, 8), "int32", offset=500)
    block[0:5, 0:4] = fill
    data[10:20, 8:16] = block
    a[10:20, 8:16] = block
    # shard (2,4) written with nothing but the fill value
    a[20:30, 32:40] = fill
    return data, {"fill_regions": "shard (2,4) written with fill only; shards (0,2.., 1,0, ...) never written"}


@spec("zp/sparse_omit_fill", "zarr-python",
      "fill -1; partially written; fill-valued inner chunks omitted (default write_empty_chunks=False)")
def _(root, path):
    data, extra = _sparse(root, path, write_empty=False)
    return data, {**extra, "write_empty_chunks": False}


@spec("zp/sparse_write_empty", "zarr-python",
      "same writes as sparse_omit_fill but with config write_empty_chunks=True")
def _(root, path):
    data, extra = _sparse(root, path, write_empty=True)
    return data, {**extra, "write_empty_chunks": True}


@spec("zp/f64_nan_fill", "zarr-python", "float64 with fill_value NaN, one inner chunk written")
def _(root, path):
    data = np.full((20, 16), np.nan)
    a = zp_array(root, path, shape=data.shape, dtype="float64", shards=(10, 8), chunks=(5, 4),
                 fill_value=np.nan, compressors=[ZstdCodec(level=1)])
    data[5:10, 4:8] = noisy_float((5, 4), seed=5)
    a[5:10, 4:8] = data[5:10, 4:8]
    return data, {}


def _keys(root, path, encoding):
    data = ramp((20, 16), "int32", offset=7)
    a = zp_array(root, path, shape=data.shape, dtype="int32", shards=(10, 8), chunks=(5, 4),
                 chunk_key_encoding=encoding, compressors=[ZstdCodec(level=1)])
    a[:] = data
    return data, {}


@spec("zp/keys_v2_dot", "zarr-python", "chunk_key_encoding v2 with '.'")
def _(root, path):
    return _keys(root, path, {"name": "v2", "separator": "."})


@spec("zp/keys_v2_slash", "zarr-python", "chunk_key_encoding v2 with '/'")
def _(root, path):
    return _keys(root, path, {"name": "v2", "separator": "/"})


@spec("zp/keys_default_dot", "zarr-python", "chunk_key_encoding default with '.'")
def _(root, path):
    return _keys(root, path, {"name": "default", "separator": "."})


@spec("zp/index_no_crc", "zarr-python", "index_codecs = [bytes] only (16n-byte index, no checksum), index at end")
def _(root, path):
    data = ramp((20, 16), "uint16", offset=3)
    a = zp_array_codecs(root, path, shape=data.shape, chunks=(10, 8), dtype="uint16", codecs=[
        ShardingCodec(chunk_shape=(5, 4), codecs=[BytesCodec(), ZstdCodec(level=2)],
                      index_codecs=[BytesCodec()], index_location="end")])
    a[:] = data
    return data, {}


@spec("zp/nested_sharding", "zarr-python",
      "outer shard 20x16 of sharded 10x8 chunks, innermost chunks 5x4; the outer level is unpacked")
def _(root, path):
    data = ramp((40, 32), "uint8", modulus=253)
    a = zp_array_codecs(root, path, shape=data.shape, chunks=(20, 16), dtype="uint8", codecs=[
        ShardingCodec(chunk_shape=(10, 8), codecs=[
            ShardingCodec(chunk_shape=(5, 4), codecs=[BytesCodec(), ZstdCodec(level=1)],
                          index_location="start")])])
    a[:] = data
    data2 = data.copy()
    # leave the last outer shard's second half unwritten -> omitted middle-level shards
    a[20:40, 16:32] = 0
    data2[20:40, 16:32] = 0
    return data2, {}


@spec("zp/shrunk_stored_past_edge", "zarr-python",
      "written as 20x16, then resized to 18x11: shards that straddle the new edge keep inner chunks "
      "past it (inner column 3 stored, but outside the 4x3 inner grid) which the view must hide")
def _(root, path):
    data = ramp((20, 16), "int32", offset=-50)
    a = zp_array(root, path, shape=data.shape, dtype="int32", shards=(10, 8), chunks=(5, 4),
                 compressors=[ZstdCodec(level=1)])
    a[:] = data
    a.resize((18, 11))
    return data[:18, :11].copy(), {}


@spec("zp/empty", "zarr-python", "sharded array created but never written (no shard objects)")
def _(root, path):
    zp_array(root, path, shape=(30, 40), dtype="int32", shards=(10, 8), chunks=(5, 4), fill_value=42)
    return np.full((30, 40), 42, dtype="int32"), {}


@spec("zp/f64_large_chunks", "zarr-python",
      "float64 300x260, shards 512x512 of 256x256 inner chunks: each decoded chunk is 512 KiB (several "
      "FUSE reads), while the stored (zstd) chunks stay small")
def _(root, path):
    data = (ramp((300, 260), "float64", modulus=1000) / 8).astype("float64")
    a = zp_array(root, path, shape=data.shape, dtype="float64", shards=(512, 512), chunks=(256, 256),
                 compressors=[ZstdCodec(level=3)])
    a[:] = data
    return data, {}


@spec("zp/c64_sparse_gzip", "zarr-python",
      "complex64 10x9, fill 1.5-2j ([re, im] in v3, also in v2), sharded, partially written, gzip")
def _(root, path):
    fill = np.complex64(1.5 - 2j)
    data = np.full((10, 9), fill, dtype="complex64")
    a = zp_array(root, path, shape=data.shape, dtype="complex64", shards=(4, 6), chunks=(2, 3),
                 fill_value=fill, compressors=[GzipCodec(level=2)])
    region = (ramp((5, 5), "float32") - 1j * ramp((5, 5), "float32", offset=3)).astype("complex64")
    data[1:6, 2:7] = region
    a[1:6, 2:7] = region
    return data, {}


@spec("zp/u64_max_fill", "zarr-python",
      "uint64 12x10, fill 2**64-1 (not exact as a double), sharded, partially written, zstd")
def _(root, path):
    fill = np.uint64(2**64 - 1)
    data = np.full((12, 10), fill, dtype="uint64")
    a = zp_array(root, path, shape=data.shape, dtype="uint64", shards=(8, 10), chunks=(4, 5),
                 fill_value=fill, compressors=[ZstdCodec(level=1)])
    region = ramp((5, 6), "uint64", offset=2**63 - 7)
    data[0:5, 1:7] = region
    a[0:5, 1:7] = region
    return data, {}


@spec("zp/f16_nan_fill_blosc", "zarr-python",
      "unsharded float16 9x11, fill NaN, partially written, blosc lz4 bit-shuffle (typesize 2)")
def _(root, path):
    data = np.full((9, 11), np.nan, dtype="float16")
    a = zp_array(root, path, shape=data.shape, dtype="float16", chunks=(4, 4), fill_value=np.nan,
                 compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle")])
    region = (ramp((5, 6), "float16", offset=-10) / 4).astype("float16")
    data[2:7, 0:6] = region
    a[2:7, 0:6] = region
    return data, {}


# ---- zarr-python, not sharded / not unpackable -----------------------------------------


@spec("zp/unsharded_zstd", "zarr-python", "plain unsharded v3 array, zstd; passes through unchanged")
def _(root, path):
    data = ramp((30, 40), "int32", offset=-5)
    a = zp_array(root, path, shape=data.shape, dtype="int32", chunks=(5, 4),
                 compressors=[ZstdCodec(level=1)], attributes={"kind": "unsharded"})
    a[:] = data
    return data, {}


@spec("zp/scalar_unsharded", "zarr-python",
      "0-d float64, unsharded (zarr-python 3.1 cannot write a sharded 0-d array: shards=() fails "
      "with IndexError; tensorstore writes ts/f64_scalar_sharded instead)")
def _(root, path):
    a = zp_array(root, path, shape=(), dtype="float64", chunks=())
    a[()] = 3.25
    return np.array(3.25), {}


@spec("zp/no_unpack_transpose", "zarr-python",
      "transpose (array->array) before sharding: must be passed through, not unpacked")
def _(root, path):
    data = ramp((20, 20), "int32")
    a = zp_array_codecs(root, path, shape=data.shape, chunks=(10, 10), dtype="int32", codecs=[
        TransposeCodec(order=(1, 0)),
        ShardingCodec(chunk_shape=(5, 5), codecs=[BytesCodec(), ZstdCodec(level=1)])])
    a[:] = data
    return data, {}


@spec("zp/no_unpack_gzip_after", "zarr-python",
      "gzip (bytes->bytes) after sharding wraps whole shards: must be passed through, not unpacked")
def _(root, path):
    data = ramp((20, 16), "int32")
    a = zp_array_codecs(root, path, shape=data.shape, chunks=(10, 8), dtype="int32", codecs=[
        ShardingCodec(chunk_shape=(5, 4), codecs=[BytesCodec()]), GzipCodec(level=1)])
    a[:] = data
    # tensorstore 0.1.86 refuses to open it: "Sharding codec ... is not compatible with
    # subsequent bytes -> bytes codecs"; the tests read it with zarr-python only.
    return data, {"tensorstore_readable": False}


@spec("zp/unsharded_transpose_zstd", "zarr-python",
      "unsharded 2-d int32 13x10 (ragged), transpose [1,0] + bytes + zstd; dimension_names with a null "
      "(no _ARRAY_DIMENSIONS in the v2 view); the v2 view can keep its chunks as order F")
def _(root, path):
    data = ramp((13, 10), "int32", offset=-40) * 11
    a = zp_array_codecs(root, path, shape=data.shape, chunks=(5, 4), dtype="int32", codecs=[
        TransposeCodec(order=(1, 0)), BytesCodec(), ZstdCodec(level=2)], dimension_names=["t", None])
    a[:] = data
    return data, {}


@spec("zp/unsharded_transpose3d_blosc_zlib", "zarr-python",
      "unsharded 3-d uint16 6x5x7, transpose [2,0,1] (not a full reversal: no v2 order expresses it) "
      "+ bytes + blosc zlib bit-shuffle")
def _(root, path):
    data = ramp((6, 5, 7), "uint16", offset=40000)
    a = zp_array_codecs(root, path, shape=data.shape, chunks=(4, 3, 4), dtype="uint16", codecs=[
        TransposeCodec(order=(2, 0, 1)), BytesCodec(),
        BloscCodec(cname="zlib", clevel=4, shuffle="bitshuffle")])
    a[:] = data
    return data, {}


@spec("zp/unsharded_blosc_lz4hc", "zarr-python", "unsharded 2-d float32 20x18 (ragged), blosc lz4hc byte-shuffle")
def _(root, path):
    data = noisy_float((20, 18), seed=9, dtype="float32")
    a = zp_array(root, path, shape=data.shape, dtype="float32", chunks=(8, 8),
                 compressors=[BloscCodec(cname="lz4hc", clevel=6, shuffle="shuffle")],
                 attributes={"kind": "unsharded blosc"})
    a[:] = data
    return data, {}


@spec("zp/string_vlen", "zarr-python",
      "1-d variable-length UTF-8 strings (v3 data_type string, vlen-utf8 codec): no fixed-size raw form "
      "and no v2 data type in zarr-mount's v2 view, so the decoded view passes it through and the v2 "
      "view leaves it out")
def _(root, path):
    data = np.array(["", "a", "bb", "ccc", "\u00e9t\u00e9", "ff", "g" * 40, "x y"], dtype=np.dtypes.StringDType())
    a = zp_array(root, path, shape=data.shape, dtype=str, chunks=(3,))
    a[:] = data
    # tensorstore 0.1.86: "string data type is not one of the supported data types"
    return data, {"tensorstore_readable": False, "decoded_passthrough": True}


# ---- nested groups, consolidated at nested/ ---------------------------------------------


@spec("nested/g1/a", "zarr-python", "sharded int32 in nested group (consolidated at nested/)")
def _(root, path):
    data = ramp((20, 16), "int32", offset=77)
    a = zp_array(root, path, shape=data.shape, dtype="int32", shards=(10, 8), chunks=(5, 4),
                 compressors=[BloscCodec(cname="lz4", shuffle="shuffle")], attributes={"leaf": "a"})
    a[:] = data
    return data, {}


@spec("nested/g1/g2/b", "zarr-python", "sharded float64, index at start, two levels deep (consolidated at nested/)")
def _(root, path):
    data = noisy_float((12, 10), seed=6)
    a = zp_array_codecs(root, path, shape=data.shape, chunks=(6, 10), dtype="float64", codecs=[
        ShardingCodec(chunk_shape=(3, 5), codecs=[BytesCodec(), ZstdCodec(level=1)], index_location="start")],
        attributes={"leaf": "b"})
    a[:] = data
    return data, {}


@spec("nested/c_unsharded", "zarr-python", "unsharded int8 in the consolidated group")
def _(root, path):
    data = ramp((9, 7), "int8", modulus=100)
    a = zp_array(root, path, shape=data.shape, dtype="int8", chunks=(4, 4), compressors=[GzipCodec()])
    a[:] = data
    return data, {}


# ---- zarr v2 ----------------------------------------------------------------------------


@spec("v2/arr_blosc", "zarr-python", "Zarr v2 array (.zarray), blosc, '.' separator; passes through")
def _(root, path):
    data = ramp((30, 40), "int32")
    g = zarr.open_group(str(root / "v2"), mode="a", zarr_format=2)
    a = g.create_array(path.rsplit("/", 1)[1], shape=data.shape, dtype="int32", chunks=(5, 4),
                       compressors=numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.SHUFFLE),
                       attributes={"v2attr": [1, 2, 3]})
    a[:] = data
    return data, {}


@spec("v2/arr_slash_f8", "zarr-python", "Zarr v2 array, float64, dimension_separator '/', zlib")
def _(root, path):
    data = noisy_float((13, 11), seed=7)
    g = zarr.open_group(str(root / "v2"), mode="a", zarr_format=2)
    a = g.create_array(path.rsplit("/", 1)[1], shape=data.shape, dtype="float64", chunks=(5, 4),
                       compressors=numcodecs.Zlib(level=1), chunk_key_encoding={"name": "v2", "separator": "/"})
    a[:] = data
    return data, {}


def _v2_group(root: Path):
    return zarr.open_group(str(root / "v2"), mode="a", zarr_format=2)


@spec("v2/arr_F_bigendian_zstd", "zarr-python",
      "Zarr v2 array, dtype '>i2' (big-endian), order 'F', zstd; the decoded view serves '<i2' in C order")
def _(root, path):
    data = (ramp((13, 9), "int16", offset=-60) * 37).astype(">i2")
    a = _v2_group(root).create_array(path.rsplit("/", 1)[1], shape=data.shape, dtype=">i2", chunks=(5, 4),
                                     order="F", compressors=numcodecs.Zstd(level=3))
    a[:] = data
    # tensorstore reads it correctly but returns native-endian int16, and the shared readers
    # (zm_readers.assert_same_array) compare dtypes exactly with zarr-python's '>i2'.
    return data, {"tensorstore_readable": False}


@spec("v2/arr_gzip_sparse", "zarr-python",
      "Zarr v2 array, uint16 ragged 17x15, gzip, fill 9, partially written (absent chunks stay absent)")
def _(root, path):
    data = np.full((17, 15), 9, dtype="uint16")
    a = _v2_group(root).create_array(path.rsplit("/", 1)[1], shape=data.shape, dtype="uint16", chunks=(6, 4),
                                     fill_value=9, compressors=numcodecs.GZip(level=5))
    data[0:8, 2:11] = ramp((8, 9), "uint16", offset=1000)
    a[0:8, 2:11] = data[0:8, 2:11]
    data[12:17, 12:15] = ramp((5, 3), "uint16", offset=3000)
    a[12:17, 12:15] = data[12:17, 12:15]
    return data, {}


@spec("v2/arr_fletcher32_filter", "zarr-python",
      "Zarr v2 array with a numcodecs Fletcher32 filter + zlib: the decoded view inflates it and cuts the "
      "checksum off (unchecked)")
def _(root, path):
    data = ramp((40,), "int32", offset=5) * 3
    a = _v2_group(root).create_array(path.rsplit("/", 1)[1], shape=data.shape, dtype="<i4", chunks=(12,),
                                     filters=[numcodecs.Fletcher32()], compressors=numcodecs.Zlib(level=1))
    a[:] = data
    # tensorstore's zarr (v2) driver supports no filters
    return data, {"tensorstore_readable": False}


@spec("v2/arr_base64_filter", "zarr-python",
      "Zarr v2 array with a numcodecs Base64 filter + zlib: a filter the decoded view does not decode, "
      "so it passes through untouched (metadata and chunks)")
def _(root, path):
    data = ramp((30,), "int16", offset=-7) * 5
    a = _v2_group(root).create_array(path.rsplit("/", 1)[1], shape=data.shape, dtype="<i2", chunks=(8,),
                                     filters=[numcodecs.Base64()], compressors=numcodecs.Zlib(level=1))
    a[:] = data
    # tensorstore's zarr (v2) driver supports no filters
    return data, {"tensorstore_readable": False, "decoded_passthrough": True}


# ---- tensorstore --------------------------------------------------------------------------

LE = {"name": "bytes", "configuration": {"endian": "little"}}
INDEX_CRC = [LE, {"name": "crc32c"}]


def ts_sharded(root: Path, path: str, *, shape, dtype, shard, inner, codecs, index_location=None,
               index_codecs=INDEX_CRC, key_encoding=None, fill=None, attributes=None, dimension_names=None):
    cfg: dict[str, Any] = {"chunk_shape": list(inner), "codecs": codecs, "index_codecs": index_codecs}
    if index_location is not None:
        cfg["index_location"] = index_location
    md: dict[str, Any] = {
        "shape": list(shape),
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shard)}},
        "codecs": [{"name": "sharding_indexed", "configuration": cfg}],
    }
    if key_encoding is not None:
        md["chunk_key_encoding"] = key_encoding
    if fill is not None:
        md["fill_value"] = fill
    if attributes is not None:
        md["attributes"] = attributes
    if dimension_names is not None:
        md["dimension_names"] = dimension_names
    return ts.open({
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(root / path)},
        "metadata": md,
        "create": True,
        "delete_existing": True,
    }).result()


@spec("ts/i32_end_zstd", "tensorstore", "tensorstore: index at end (implicit default), zstd")
def _(root, path):
    data = ramp((30, 40), "int32", offset=12345)
    a = ts_sharded(root, path, shape=data.shape, dtype="int32", shard=(10, 8), inner=(5, 4),
                   codecs=[LE, {"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
                   attributes={"writer": "tensorstore"}, dimension_names=["row", "col"])
    a[...] = data
    return data, {}


@spec("ts/u16_start_crc32c_ragged_v2keys", "tensorstore",
      "tensorstore: index at start, inner bytes + crc32c, ragged 23x37, v2 keys '.'")
def _(root, path):
    data = ramp((23, 37), "uint16", offset=60000)
    a = ts_sharded(root, path, shape=data.shape, dtype="uint16", shard=(10, 8), inner=(5, 4),
                   codecs=[LE, {"name": "crc32c"}], index_location="start",
                   key_encoding={"name": "v2", "configuration": {"separator": "."}})
    a[...] = data
    return data, {}


@spec("ts/f32_3d_blosc_dotkeys", "tensorstore",
      "tensorstore: 3-d float32 13x11x7 ragged, blosc zstd shuffle, default keys with '.'")
def _(root, path):
    data = noisy_float((13, 11, 7), seed=8, dtype="float32")
    a = ts_sharded(root, path, shape=data.shape, dtype="float32", shard=(6, 4, 4), inner=(3, 2, 2),
                   codecs=[LE, {"name": "blosc", "configuration": {
                       "cname": "zstd", "clevel": 4, "shuffle": "shuffle", "typesize": 4, "blocksize": 0}}],
                   key_encoding={"name": "default", "configuration": {"separator": "."}})
    a[...] = data
    return data, {}


@spec("ts/u8_sparse_fill7", "tensorstore",
      "tensorstore: fill 7, partially written; tensorstore omits fill-valued inner chunks and empty shards")
def _(root, path):
    data = np.full((24, 24), 7, dtype="uint8")
    a = ts_sharded(root, path, shape=data.shape, dtype="uint8", shard=(12, 12), inner=(4, 4),
                   codecs=[LE, {"name": "gzip", "configuration": {"level": 5}}], index_location="end", fill=7)
    data[2:9, 3:6] = ramp((7, 3), "uint8")
    a[2:9, 3:6] = data[2:9, 3:6]
    data[12:24, 12:24] = 7
    a[12:24, 12:24] = data[12:24, 12:24]
    return data, {}


@spec("ts/i64_4d_gzip", "tensorstore", "tensorstore: 4-d int64 3x4x5x6, gzip, index end")
def _(root, path):
    data = ramp((3, 4, 5, 6), "int64", offset=-(2**40))
    a = ts_sharded(root, path, shape=data.shape, dtype="int64", shard=(2, 2, 5, 3), inner=(1, 2, 5, 1),
                   codecs=[LE, {"name": "gzip", "configuration": {"level": 1}}], index_location="end")
    a[...] = data
    return data, {}


@spec("ts/f64_scalar_sharded", "tensorstore", "tensorstore: 0-d float64 sharded (one shard key 'c', one inner chunk)")
def _(root, path):
    a = ts_sharded(root, path, shape=(), dtype="float64", shard=(), inner=(), codecs=[LE])
    a[...] = 2.5
    return np.array(2.5), {}


@spec("ts/i32_big_endian_start", "tensorstore", "tensorstore: big-endian bytes codec, index at start")
def _(root, path):
    data = ramp((16, 16), "int32", offset=-100000) * 3
    a = ts_sharded(root, path, shape=data.shape, dtype="int32", shard=(8, 8), inner=(4, 4),
                   codecs=[{"name": "bytes", "configuration": {"endian": "big"}}], index_location="start")
    a[...] = data
    return data, {}


# --------------------------------------------------------------------------- manifest


def key_encoding_of(meta: dict) -> dict:
    if meta.get("zarr_format") == 2:
        return {"name": "v2", "separator": meta.get("dimension_separator") or "."}
    cke = meta.get("chunk_key_encoding", {"name": "default"})
    name = cke["name"]
    sep = cke.get("configuration", {}).get("separator", "/" if name == "default" else ".")
    return {"name": name, "separator": sep}


def describe(root: Path, path: str) -> dict:
    """Manifest fields derived from what is on disk."""
    p = root / path
    if (p / "zarr.json").exists():
        meta = json.loads((p / "zarr.json").read_text())
    else:
        meta = json.loads((p / ".zarray").read_text())
        meta["zarr_format"] = 2
    out: dict[str, Any] = {"zarr_format": meta["zarr_format"], "chunk_key_encoding": key_encoding_of(meta)}
    if meta["zarr_format"] == 2:
        out.update(shape=meta["shape"], chunk_shape=meta["chunks"], sharded=False, unpack=False,
                   unpack_reason="zarr v2 array", codecs=[(meta.get("compressor") or {}).get("id")],
                   filters=[f["id"] for f in meta.get("filters") or []], v2_dtype=meta["dtype"],
                   order=meta.get("order", "C"))
        attrs_file = p / ".zattrs"
        out["attributes"] = json.loads(attrs_file.read_text()) if attrs_file.exists() else {}
        return out
    codecs = meta["codecs"]
    names = [c["name"] for c in codecs]
    out.update(shape=meta["shape"], data_type=meta["data_type"], fill_value=meta["fill_value"],
               codecs=names, attributes=meta.get("attributes", {}))
    grid = meta["chunk_grid"]["configuration"]["chunk_shape"]
    if "sharding_indexed" not in names:
        out.update(sharded=False, unpack=False, unpack_reason="not sharded", chunk_shape=grid)
        return out
    i = names.index("sharding_indexed")
    cfg = codecs[i]["configuration"]
    out.update(
        sharded=True,
        shard_shape=grid,
        inner_chunk_shape=cfg["chunk_shape"],
        index_location=cfg.get("index_location", "end"),
        index_crc32c=any(c["name"] == "crc32c" for c in cfg["index_codecs"]),
        inner_codecs=[c["name"] for c in cfg["codecs"]],
    )
    if i > 0:
        out.update(unpack=False, unpack_reason=f"array->array codec {names[:i]} before sharding")
    elif i < len(names) - 1:
        out.update(unpack=False, unpack_reason=f"bytes->bytes codec {names[i + 1:]} after sharding")
    else:
        out.update(unpack=True, unpack_reason=None)
    return out


def group_info(root: Path, path: str) -> dict:
    p = root / path if path else root
    if (p / "zarr.json").exists():
        meta = json.loads((p / "zarr.json").read_text())
        return {"path": path, "zarr_format": 3, "attributes": meta.get("attributes", {}),
                "consolidated": meta.get("consolidated_metadata") is not None}
    attrs = json.loads((p / ".zattrs").read_text()) if (p / ".zattrs").exists() else {}
    return {"path": path, "zarr_format": 2, "attributes": attrs, "consolidated": (p / ".zmetadata").exists()}


def check_readback(root: Path, path: str, expected: np.ndarray, tensorstore_readable: bool) -> None:
    arr = zarr.open_array(str(root / path), mode="r")
    got = arr[...]
    if got.shape != expected.shape:
        raise AssertionError(f"{path}: shape {got.shape} != {expected.shape}")
    if got.dtype.kind != expected.dtype.kind or got.dtype.itemsize != expected.dtype.itemsize:
        raise AssertionError(f"{path}: dtype {got.dtype} != {expected.dtype}")
    np.testing.assert_array_equal(got, expected, err_msg=f"zarr-python readback of {path}")
    # tensorstore must read every v3 array the same way (it is the second reader in the tests)
    if tensorstore_readable:
        driver = "zarr3" if (root / path / "zarr.json").exists() else "zarr"
        t = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(root / path)},
                     "open": True}).result()
        np.testing.assert_array_equal(t.read().result(), expected, err_msg=f"tensorstore readback of {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--force", action="store_true", help="replace OUTDIR if it exists and is not empty")
    args = ap.parse_args(argv)
    root: Path = args.outdir.resolve()
    if root.exists() and any(root.iterdir()):
        if not args.force:
            print(f"gen_fixtures: {root} is not empty (use --force to replace it)", file=sys.stderr)
            return 2
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()

    zarr.open_group(str(root), mode="w", attributes={
        "title": "zarr-mount test fixtures", "generator": "scripts/gen_fixtures.py", "nested": {"list": [1, 2]}})
    zgroup(root, "zp").attrs.update({"writer": "zarr-python", "zarr_version": zarr.__version__})
    zgroup(root, "ts").attrs.update({"writer": "tensorstore", "note": "group zarr.json written by zarr-python"})
    zgroup(root, "nested").attrs.update({"level": 0, "consolidated": True})
    zgroup(root, "nested/g1").attrs.update({"level": 1})
    zgroup(root, "nested/g1/g2").attrs.update({"level": 2})
    zarr.open_group(str(root / "v2"), mode="w", zarr_format=2, attributes={"format": "v2", "n": 2})

    arrays = []
    failures = []
    for path, writer, description, fn in SPECS:
        expected, extra = fn(root, path)
        extra.setdefault("tensorstore_readable", True)
        try:
            check_readback(root, path, expected, extra["tensorstore_readable"])
        except AssertionError as e:
            failures.append(str(e))
        entry = {"path": path, "writer": writer, "description": description, "dtype": str(expected.dtype)}
        entry.update(describe(root, path))
        entry.update(extra)
        entry.setdefault("write_empty_chunks", False)
        entry.setdefault("decoded_passthrough", False)
        entry["consolidated_root"] = "nested" if path.startswith("nested/") else (
            "v2" if path.startswith("v2/") else None)
        entry["parent"] = path.rpartition("/")[0]
        arrays.append(entry)

    zarr.consolidate_metadata(str(root), path="nested")
    zarr.consolidate_metadata(str(root / "v2"), zarr_format=2)

    # sanity of the layout: what the manifest promises about sharding holds on disk
    for e in arrays:
        if e.get("sharded") and "start" in e["path"].split("/")[-1] and e["index_location"] != "start":
            failures.append(f"{e['path']}: expected index at start, zarr.json says {e['index_location']}")
        if e["path"].startswith("zp/no_unpack") and e["unpack"]:
            failures.append(f"{e['path']}: meant to be non-unpackable")
        if e["path"] == "zp/empty" and any((root / "zp/empty").rglob("c*")):
            failures.append("zp/empty: has chunk objects")

    groups = [group_info(root, g) for g in ["", "zp", "ts", "nested", "nested/g1", "nested/g1/g2", "v2"]]
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "generator": "scripts/gen_fixtures.py",
        "versions": {"zarr": zarr.__version__, "tensorstore": importlib.metadata.version("tensorstore"),
                     "numcodecs": numcodecs.__version__, "numpy": np.__version__},
        "groups": groups,
        "arrays": arrays,
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")

    total = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    dt = time.monotonic() - t0
    print(f"gen_fixtures: {len(arrays)} arrays, {len(groups)} groups, {total} bytes in {root} ({dt:.1f} s)")
    if total > 5 * 1024 * 1024:
        failures.append(f"fixtures too large: {total} bytes")
    for f in failures:
        print(f"gen_fixtures: FAIL {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
