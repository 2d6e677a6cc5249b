"""Regenerate the codec test vectors with zarr-python 3.

Run from the repository root:  .venv/bin/python src/zarr/codecs/testdata/make_vectors.py

For every case this writes, into src/zarr/codecs/testdata/<name>/:
  zarr.json      the array's metadata document, as zarr-python wrote it
  chunk          the encoded bytes of one chunk (the chunk key file, copied)
  expected       that chunk's block as little-endian C-order bytes
The chunk is (1, 1) or (1, 1, 1): a full, non-edge chunk. For the sharded cases
the chunk is a whole shard, in which one inner chunk (the `blank` region) holds
only the fill value, so zarr-python leaves it out of the shard and a decoder must
fill it in.

The v2 vectors (testdata/v2/) come from zarr-python 2: see make_v2_vectors.py.
Regenerating rewrites gzip chunks with a new header timestamp; everything else
comes out byte-identical.
"""

import json
import pathlib
import shutil
import tempfile

import numpy as np
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
from zarr.codecs.numcodecs import Zlib

import vector_data  # beside this script

HERE = pathlib.Path(__file__).resolve().parent
SHAPE = (12, 10)
CHUNKS = (4, 5)
SHAPE3 = (4, 6, 10)
CHUNKS3 = (2, 3, 5)


def data(dtype, shape):
    return vector_data.data(dtype, shape, seed=42)


CASES = {
    "int16_big": ("int16", dict(serializer=BytesCodec(endian="big"), compressors=None)),
    "float32_blosc_lz4_shuffle": (
        "float32",
        dict(compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4)]),
    ),
    "uint16_blosc_zstd_bitshuffle": (
        "uint16",
        dict(compressors=[BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle", typesize=2)]),
    ),
    "int32_zstd": ("int32", dict(compressors=[ZstdCodec(level=3)])),
    "float64_gzip": ("float64", dict(compressors=[GzipCodec(level=5)])),
    "int32_crc32c": ("int32", dict(compressors=[Crc32cCodec()])),
    "uint16_transpose": (
        "uint16",
        dict(filters=[TransposeCodec(order=(1, 0))], compressors=None),
    ),
    "float64_big_zstd_crc32c": (
        "float64",
        dict(serializer=BytesCodec(endian="big"), compressors=[ZstdCodec(level=1), Crc32cCodec()]),
    ),
    "bool": ("bool", dict(compressors=None)),
    # Big-endian complex swaps each component, not the whole 8-byte item.
    "complex64_big": ("complex64", dict(serializer=BytesCodec(endian="big"), compressors=None)),
    # A permutation that is not its own inverse, so a wrongly inverted one shows.
    "int32_transpose_3d": (
        "int32",
        dict(filters=[TransposeCodec(order=(2, 0, 1))], compressors=None),
        SHAPE3,
        CHUNKS3,
    ),
    "int32_numcodecs_zlib": ("int32", dict(compressors=[Zlib(level=1)])),
}

# Sharded cases: shape (16, 12), shards (8, 6); the vector is shard (1, 1).
# (dtype, create_array kwargs, fill value, blank region inside the shard)
SHARD_SHAPE = (16, 12)
SHARDS = (8, 6)


def sharded(compressors=None, filters=None, **sharding):
    """create_array arguments for one (8, 6) shard per chunk with this sharding codec."""
    kw = dict(chunks=SHARDS, serializer=ShardingCodec(**sharding), compressors=compressors)
    if filters:
        kw["filters"] = filters
    return kw


SHARDED = {
    # zarr-python's default sharding: index at the end, bytes + crc32c index codecs.
    "sharded_int32_end": (
        "int32",
        dict(shards=SHARDS, chunks=(2, 3), compressors=[ZstdCodec(level=3)]),
        7,
        (slice(2, 4), slice(3, 6)),
    ),
    "sharded_uint16_start": (
        "uint16",
        sharded(
            chunk_shape=(4, 3),
            codecs=[BytesCodec(endian="big"), Crc32cCodec()],
            index_location="start",
        ),
        65535,
        (slice(0, 4), slice(0, 3)),
    ),
    # The transpose runs before sharding: the shard is indexed in the transposed
    # (6, 8) space, a 3 x 4 grid of (2, 2) inner chunks. (zarr-python checks the
    # inner shape against the untransposed (8, 6) too, so it must divide both.)
    "transpose_sharded_float32": (
        "float32",
        sharded(filters=[TransposeCodec(order=(1, 0))], chunk_shape=(2, 2), codecs=[BytesCodec()]),
        float("nan"),
        (slice(4, 6), slice(2, 4)),
    ),
    # gzip after sharding wraps the whole shard.
    "sharded_gzip_after": (
        "int16",
        sharded(compressors=[GzipCodec(level=5)], chunk_shape=(2, 3), codecs=[BytesCodec()]),
        -1,
        (slice(6, 8), slice(0, 3)),
    ),
    # Shards of shards: (8, 6) -> (4, 3) -> (2, 3), index at the start outside and
    # at the end inside. One innermost chunk and one whole middle-level chunk are
    # fill.
    "nested_sharded_float64": (
        "float64",
        sharded(
            chunk_shape=(4, 3),
            codecs=[
                ShardingCodec(
                    chunk_shape=(2, 3),
                    codecs=[BytesCodec(), BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=8)],
                )
            ],
            index_location="start",
        ),
        0.5,
        [(slice(0, 2), slice(0, 3)), (slice(4, 8), slice(3, 6))],
    ),
}


def write_vector(name, tmp, key, block):
    tmp = pathlib.Path(tmp)
    out = HERE / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    shutil.copyfile(tmp / "zarr.json", out / "zarr.json")
    shutil.copyfile(tmp / key, out / "chunk")
    dt = block.dtype.newbyteorder("<")
    (out / "expected").write_bytes(np.ascontiguousarray(block.astype(dt)).tobytes())
    doc = json.loads((out / "zarr.json").read_text())
    print(name, [c["name"] for c in doc["codecs"]], (out / "chunk").stat().st_size)


def main_sharded():
    for name, (dtype, kw, fill, blank) in SHARDED.items():
        a = data(dtype, SHARD_SHAPE)
        origin = tuple(slice(s, 2 * s) for s in SHARDS)  # shard (1, 1)
        block = a[origin]  # a view: blanking it blanks `a`
        for region in blank if isinstance(blank, list) else [blank]:
            block[region] = fill
        with tempfile.TemporaryDirectory() as tmp:
            z = zarr.create_array(
                store=tmp, shape=SHARD_SHAPE, dtype=dtype, fill_value=fill, zarr_format=3, **kw
            )
            z[...] = a
            write_vector(name, tmp, "c/1/1", np.ascontiguousarray(block))


def main():
    main_sharded()
    for name, (dtype, kw, *grid) in CASES.items():
        shape, chunks = grid if grid else (SHAPE, CHUNKS)
        chunk = (1,) * len(shape)
        a = data(dtype, shape)
        with tempfile.TemporaryDirectory() as tmp:
            z = zarr.create_array(
                store=tmp, shape=shape, chunks=chunks, dtype=dtype, fill_value=0, zarr_format=3, **kw
            )
            z[...] = a
            key = "c/" + "/".join(map(str, chunk))
            sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(chunk, chunks))
            write_vector(name, tmp, key, np.ascontiguousarray(a[sl]))


if __name__ == "__main__":
    main()
