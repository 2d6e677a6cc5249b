"""Regenerate the codec test vectors with zarr-python 3.

Run from the repository root:  .venv/bin/python src/zarr/codecs/testdata/make_vectors.py

For every case this writes, into src/zarr/codecs/testdata/<name>/:
  zarr.json      the array's metadata document, as zarr-python wrote it
  chunk          the encoded bytes of one chunk (the chunk key file, copied)
  expected       that chunk's block as little-endian C-order bytes
The chunk is (1, 1) or (1, 1, 1): a full, non-edge chunk.
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
    TransposeCodec,
    ZstdCodec,
)

HERE = pathlib.Path(__file__).resolve().parent
SHAPE = (12, 10)
CHUNKS = (4, 5)
SHAPE3 = (4, 6, 10)
CHUNKS3 = (2, 3, 5)


def data(dtype, shape):
    rng = np.random.default_rng(42)
    n = int(np.prod(shape))
    dt = np.dtype(dtype)
    if dt.kind == "b":
        a = rng.integers(0, 2, n).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        # smooth-ish data so compressors have something to do, plus full-range values
        a = (np.arange(n) * 37 + info.min // 2).astype(dt)
        a[::7] = rng.integers(info.min, info.max, len(a[::7]), dtype=dt, endpoint=True)
    elif dt.kind == "c":
        a = (np.linspace(-10, 10, n) + 1j * rng.standard_normal(n)).astype(dt)
    else:
        a = (np.linspace(-1000, 1000, n) + rng.standard_normal(n)).astype(dt)
    return a.reshape(shape)


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
}


def main():
    for name, (dtype, kw, *grid) in CASES.items():
        shape, chunks = grid if grid else (SHAPE, CHUNKS)
        chunk = (1,) * len(shape)
        a = data(dtype, shape)
        with tempfile.TemporaryDirectory() as tmp:
            z = zarr.create_array(
                store=tmp, shape=shape, chunks=chunks, dtype=dtype, fill_value=0, zarr_format=3, **kw
            )
            z[...] = a
            tmp = pathlib.Path(tmp)
            out = HERE / name
            if out.exists():
                shutil.rmtree(out)
            out.mkdir()
            shutil.copyfile(tmp / "zarr.json", out / "zarr.json")
            doc = json.loads((out / "zarr.json").read_text())
            key = "c/" + "/".join(map(str, chunk))
            shutil.copyfile(tmp / key, out / "chunk")
            sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(chunk, chunks))
            block = np.ascontiguousarray(a[sl])
            dt = block.dtype.newbyteorder("<")
            (out / "expected").write_bytes(np.ascontiguousarray(block.astype(dt)).tobytes())
            print(name, [c["name"] for c in doc["codecs"]], (out / "chunk").stat().st_size)


if __name__ == "__main__":
    main()
