"""Regenerate the numcodecs codec vectors with zarr-python 3 (which encodes `numcodecs.<id>`
codecs with numcodecs itself).

Run from the repository root:  .venv/bin/python src/zarr/codecs/testdata/make_numcodecs_vectors.py

For every case this writes src/zarr/codecs/testdata/numcodecs/<name>/ with zarr.json, chunk
(the encoded bytes of chunk (1, 1), a full non-edge chunk) and expected (that block as
little-endian C-order bytes), as make_vectors.py does for the v3 codecs.
"""

import json
import pathlib
import shutil
import tempfile
import warnings

import numpy as np
import zarr
import zarr.codecs.numcodecs as znc
from zarr.codecs import BytesCodec, ZstdCodec

import vector_data  # beside this script

warnings.filterwarnings("ignore")
HERE = pathlib.Path(__file__).resolve().parent / "numcodecs"
SHAPE, CHUNKS = (12, 10), (4, 5)

CASES = {
    "bz2": ("float64", dict(compressors=[znc.BZ2(level=5)])),
    "lz4": ("int16", dict(compressors=[znc.LZ4(acceleration=1)])),
    "lzma_xz": ("uint32", dict(compressors=[znc.LZMA(preset=3)])),
    "lzma_alone": ("int32", dict(compressors=[znc.LZMA(format=2, preset=1)])),
    "adler32": ("float32", dict(compressors=[znc.Adler32()])),
    "adler32_end_zstd": ("int64", dict(compressors=[znc.Adler32(location="end"), ZstdCodec(level=1)])),
    "crc32": ("uint16", dict(compressors=[znc.Zlib(level=1), znc.CRC32()])),
    "crc32c": ("int32", dict(compressors=[znc.CRC32C()])),
    "shuffle_zstd": ("float64", dict(compressors=[znc.Shuffle(elementsize=8), znc.Zstd(level=2)])),
    "bitround_zstd": ("float32", dict(filters=[znc.BitRound(keepbits=6)], compressors=[ZstdCodec(level=1)])),
    "quantize_gzip": ("float64", dict(filters=[znc.Quantize(digits=2, dtype="<f8")],
                                      compressors=[znc.GZip(level=1)])),
    "lz4_big_endian": ("uint64", dict(serializer=BytesCodec(endian="big"), compressors=[znc.LZ4()])),
    "delta_int32_zlib": ("int32", dict(filters=[znc.Delta(dtype="<i4")], compressors=[znc.Zlib(level=1)])),
    "delta_uint8_wraps": ("uint8", dict(filters=[znc.Delta(dtype="|u1")], compressors=None)),
    "delta_float32": ("float32", dict(filters=[znc.Delta(dtype="<f4", astype="<f4")], compressors=None)),
}


def main():
    if HERE.exists():
        shutil.rmtree(HERE)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (dtype, kw) in CASES.items():
            out = HERE / name
            out.mkdir(parents=True)
            a = zarr.create_array(f"{tmp}/{name}", shape=SHAPE, chunks=CHUNKS, dtype=dtype, **kw)
            a[:] = vector_data.data(dtype, SHAPE, seed=7)
            shutil.copy(f"{tmp}/{name}/zarr.json", out / "zarr.json")
            shutil.copy(f"{tmp}/{name}/c/1/1", out / "chunk")
            block = zarr.open_array(f"{tmp}/{name}", mode="r")[4:8, 5:10]
            (out / "expected").write_bytes(np.ascontiguousarray(block.astype(block.dtype.newbyteorder("<"))).tobytes())
            print(name, json.loads((out / "zarr.json").read_text())["codecs"])


if __name__ == "__main__":
    main()
