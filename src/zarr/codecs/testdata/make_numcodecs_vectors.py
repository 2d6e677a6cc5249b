"""Regenerate the numcodecs codec vectors with zarr-python 3 (which encodes `numcodecs.<id>`
codecs with numcodecs itself).

Run from the repository root:  .venv/bin/python src/zarr/codecs/testdata/make_numcodecs_vectors.py

For every case this writes src/zarr/codecs/testdata/numcodecs/<name>/ with zarr.json, chunk
(the encoded bytes of chunk (1, 1), a full non-edge chunk) and expected (that block as
little-endian C-order bytes), as make_vectors.py does for the v3 codecs.

It also writes src/zarr/codecs/testdata/numcodecs_transforms.json: numcodecs' own encode and
decode of fletcher32 (odd lengths, all-0xff data, more than 360 words), packbits (every
padding) and fixedscaleoffset (every numeric astype, float rounding in float16/32/64, NaN,
infinities and subnormals), for the unit tests of the decoders.
"""

import json
import pathlib
import shutil
import tempfile
import warnings

import numcodecs
import numpy as np
import zarr
import zarr.codecs.numcodecs as znc
from zarr.codecs import BytesCodec, ZstdCodec

import vector_data  # beside this script

warnings.filterwarnings("ignore")
HERE = pathlib.Path(__file__).resolve().parent / "numcodecs"
SHAPE, CHUNKS = (12, 10), (4, 5)
FSO = znc.FixedScaleOffset

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
    "fixedscaleoffset_f8_i4": ("float64", dict(filters=[FSO(offset=-50, scale=100, dtype="<f8", astype="<i4")],
                                               compressors=None)),
    "fixedscaleoffset_f8_u1_zlib": ("float64", dict(filters=[FSO(offset=-1000, scale=0.1, dtype="<f8", astype="|u1")],
                                                    compressors=[znc.Zlib(level=1)])),
    # (not with a big-endian `bytes` codec: zarr-python 3.1 writes that big-endian and reads it back
    # as little-endian astype, so the decoder refuses it)
    "fixedscaleoffset_f8_i2_zstd": ("float64", dict(filters=[FSO(offset=0.5, scale=10, dtype="<f8", astype="<i2")],
                                                    compressors=[ZstdCodec(level=1)])),
    "fixedscaleoffset_f4_f2": ("float32", dict(filters=[FSO(offset=3.3, scale=0.037, dtype="<f4", astype="<f2")],
                                               compressors=None)),
    "fixedscaleoffset_f8_f4": ("float64", dict(filters=[FSO(offset=0.1, scale=3, dtype="<f8", astype="<f4")],
                                               compressors=None)),
    "fixedscaleoffset_i4_delta": ("int32", dict(filters=[FSO(offset=7, scale=0.001, dtype="<i4", astype="<i4"),
                                                         znc.Delta(dtype="<i4")], compressors=None)),
    "packbits": ("bool", dict(filters=[znc.PackBits()], compressors=None)),  # 20 bits: 4 padding
    "packbits_pad0_zstd": ("bool", dict(filters=[znc.PackBits()], compressors=[ZstdCodec(level=1)]), (4, 4)),
    "packbits_pad7": ("bool", dict(filters=[znc.PackBits()], compressors=None), (3, 3)),
    "fletcher32": ("int64", dict(compressors=[znc.Fletcher32()])),
    "fletcher32_zstd": ("float32", dict(compressors=[ZstdCodec(level=1), znc.Fletcher32()])),
}


def transforms(rng):
    """numcodecs' own encodings, for the decoders' unit tests."""
    # The data is `decoded` (hex), or `len` bytes: `fill` repeated, or if `fill` is null the
    # ramp (7 * i + 3) % 256 (long data stays out of the file). numcodecs appends `checksum`.
    fletcher = []
    for n in [1, 2, 3, 4, 5, 7, 8, 359, 360, 361, 719, 720, 721, 722, 1441, 3001]:
        for fill in ("random", 0xff, 0xfe, 0, None):
            if fill == "random":
                if n > 800:
                    continue
                data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
                case = {"decoded": data.hex()}
            else:
                data = bytes((7 * i + 3) % 256 for i in range(n)) if fill is None else bytes([fill]) * n
                case = {"fill": fill, "len": n}
            enc = bytes(numcodecs.Fletcher32().encode(np.frombuffer(data, dtype="u1")))
            assert enc[:-4] == data
            fletcher.append({**case, "checksum": enc[-4:].hex()})
    packbits = []
    for n in list(range(0, 18)) + [63, 64, 65]:
        x = rng.integers(0, 2, n).astype(bool)
        enc = numcodecs.PackBits().encode(x)
        packbits.append({"count": n, "encoded": bytes(enc).hex(), "decoded": x.astype("u1").tobytes().hex()})
    fso = []
    pairs = [(100, -50), (0.1, 3.3), (3, 1e-3), (0.037, -1000.25), (1e9, 2**40), (7, 0)]
    astypes = ["|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8"]
    for k, (dtype, astype) in enumerate([(d, a) for d in ["<f8", "<f4", "<f2"] for a in astypes]
                                        + [("<i4", a) for a in ["|i1", "|u1", "<i2", "<u2", "<f4"]]
                                        + [("<u2", "|u1"), ("<i8", "<i4")]):
        scale, offset = pairs[k % len(pairs)]
        at = np.dtype(astype)
        if np.dtype(dtype).kind in "iu":
            scale, offset = [(0.37, -3.5), (4, 100)][k % 2]
        if at.kind == "f":
            # every bit pattern: NaN, infinities, subnormals
            enc = rng.integers(0, 256, 24 * at.itemsize, dtype=np.uint8).tobytes()
            if np.dtype(dtype).kind in "iu":  # keep the result in the integer's range
                enc = rng.uniform(-100, 100, 24).astype(at).tobytes()
        else:
            info = np.iinfo(at)
            enc = rng.integers(info.min, info.max, 24, dtype=at, endpoint=True).tobytes()
        codec = numcodecs.FixedScaleOffset(offset=offset, scale=scale, dtype=dtype, astype=astype)
        with np.errstate(all="ignore"):
            dec = codec.decode(enc)
        fso.append({"configuration": {"offset": offset, "scale": scale, "dtype": dtype, "astype": astype},
                    "encoded": enc.hex(), "decoded": np.asarray(dec).tobytes().hex()})
    return {"fletcher32": fletcher, "packbits": packbits, "fixedscaleoffset": fso}


def main():
    if HERE.exists():
        shutil.rmtree(HERE)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (dtype, kw, *chunks) in CASES.items():
            chunks = chunks[0] if chunks else CHUNKS
            out = HERE / name
            out.mkdir(parents=True)
            a = zarr.create_array(f"{tmp}/{name}", shape=SHAPE, chunks=chunks, dtype=dtype, **kw)
            a[:] = vector_data.data(dtype, SHAPE, seed=7)
            shutil.copy(f"{tmp}/{name}/zarr.json", out / "zarr.json")
            shutil.copy(f"{tmp}/{name}/c/1/1", out / "chunk")
            block = zarr.open_array(f"{tmp}/{name}", mode="r")[chunks[0]:2 * chunks[0], chunks[1]:2 * chunks[1]]
            (out / "expected").write_bytes(np.ascontiguousarray(block.astype(block.dtype.newbyteorder("<"))).tobytes())
            print(name, json.loads((out / "zarr.json").read_text())["codecs"])
    doc = transforms(np.random.default_rng(18))
    (HERE.parent / "numcodecs_transforms.json").write_text(json.dumps(doc, indent=1) + "\n")
    print("numcodecs_transforms.json", {k: len(v) for k, v in doc.items()})


if __name__ == "__main__":
    main()
