"""Regenerate the v2 test vectors with zarr-python 2 (numcodecs' CRC32C needs the
`crc32c` package in that environment).

Run from the repository root:  .venv-zarr2/bin/python src/zarr/codecs/testdata/make_v2_vectors.py

For every case this writes, into src/zarr/codecs/testdata/v2/<name>/:
  .zarray        the array's metadata document, as zarr-python 2 wrote it
  chunk          the encoded bytes of chunk (1, 1) (or (1, 1, 1)), copied
  expected       that chunk's block as little-endian C-order bytes
"""

import json
import pathlib
import shutil
import tempfile

import numcodecs
import numpy as np
import zarr

import vector_data  # beside this script

HERE = pathlib.Path(__file__).resolve().parent / "v2"
SHAPE = (12, 10)
CHUNKS = (4, 5)


def data(dtype, shape):
    return vector_data.data(dtype, shape, seed=7)


# name: (dtype, zarr.open_array keyword arguments[, shape, chunks])
CASES = {
    "int32_F_zlib": ("<i4", dict(order="F", compressor=numcodecs.Zlib(level=1), fill_value=42)),
    "float64_big_blosc_slash": (
        ">f8",
        dict(
            compressor=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=1),
            dimension_separator="/",
            fill_value=np.nan,
        ),
    ),
    "uint16_zlib_filter_zstd_checksum": (
        "<u2",
        dict(
            filters=[numcodecs.Zlib(level=1)],
            compressor=numcodecs.Zstd(level=1, checksum=True),
            fill_value=0,
        ),
    ),
    "complex128_F_3d": (
        "<c16",
        dict(order="F", compressor=None, fill_value=1 + 2j),
        (4, 6, 10),
        (2, 3, 5),
    ),
    "bool_gzip": ("|b1", dict(compressor=numcodecs.GZip(level=5), fill_value=True)),
    "float16_blosc_zstd_bitshuffle": (
        "<f2",
        dict(compressor=numcodecs.Blosc(cname="zstd", clevel=3, shuffle=2), fill_value=None),
    ),
    "int16_big_gzip_crc32c": (
        ">i2",
        dict(filters=[numcodecs.GZip(level=1)], compressor=numcodecs.CRC32C(), fill_value=-3),
    ),
    # AUTOSHUFFLE (-1): bit shuffle for 1-byte items.
    "uint8_blosc_autoshuffle": (
        "|u1",
        dict(compressor=numcodecs.Blosc(cname="blosclz", clevel=9, shuffle=-1), fill_value=255),
    ),
    "float32_F_big_crc32c": (
        ">f4",
        dict(order="F", compressor=numcodecs.CRC32C(), fill_value=float("-inf")),
    ),
}


def main():
    if HERE.exists():
        shutil.rmtree(HERE)
    HERE.mkdir()
    for name, (dtype, kw, *grid) in CASES.items():
        shape, chunks = grid if grid else (SHAPE, CHUNKS)
        chunk = (1,) * len(shape)
        a = data(dtype, shape)
        with tempfile.TemporaryDirectory() as tmp:
            z = zarr.open_array(tmp, mode="w", shape=shape, chunks=chunks, dtype=dtype, **kw)
            z[...] = a
            tmp = pathlib.Path(tmp)
            meta = json.loads((tmp / ".zarray").read_text())
            sep = meta.get("dimension_separator") or "."
            out = HERE / name
            out.mkdir()
            shutil.copyfile(tmp / ".zarray", out / ".zarray")
            shutil.copyfile(tmp / sep.join(map(str, chunk)), out / "chunk")
            sl = tuple(slice(i * c, (i + 1) * c) for i, c in zip(chunk, chunks))
            block = np.ascontiguousarray(a[sl])
            dt = block.dtype.newbyteorder("<")
            (out / "expected").write_bytes(np.ascontiguousarray(block.astype(dt)).tobytes())
            print(name, meta["dtype"], meta["order"], meta["filters"], meta["compressor"])


if __name__ == "__main__":
    main()
