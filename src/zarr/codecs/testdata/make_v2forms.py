"""Regenerate the v2-form vectors: what zarr-python 3 writes for one array as Zarr v3 and,
for the same data type, codecs and fill value, as Zarr v2.

Run from the repository root:  .venv/bin/python src/zarr/codecs/testdata/make_v2forms.py

For every case this writes src/zarr/codecs/testdata/v2forms/<name>/ with
  zarr.json   the v3 array document zarr-python 3 wrote
  .zarray     the v2 document zarr-python 3 wrote for the same array with zarr_format=2
The v2 view (src/views/presented/mapping/v2.rs) must show each zarr.json as that .zarray. Cases
whose v3 chain ends in crc32c get the .zarray of the chain without it (the view strips the
checksum).
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
from zarr.codecs import BytesCodec, Crc32cCodec, ZstdCodec

warnings.filterwarnings("ignore")
HERE = pathlib.Path(__file__).resolve().parent / "v2forms"

# name: (dtype, fill_value, v3 keyword arguments, v2 keyword arguments)
CASES = {
    "datetime64_10ms": ("datetime64[10ms]", None, {}, {}),
    "datetime64_ns_nat_fill": ("datetime64[ns]", np.datetime64("NaT"), {}, {}),
    "timedelta64_s_fill": ("timedelta64[s]", np.timedelta64(7, "s"), {}, {}),
    "string_vlen": (str, None, {}, {}),
    "string_fill": (str, "n/a", {}, {}),
    "bytes_vlen": (zarr.dtype.VariableLengthBytes(), None, {}, {}),
    "utf32_u4": ("<U4", "abc", {}, {}),
    "bytes_s3": ("|S3", None, {}, {}),
    "float16_nan": ("float16", np.nan, {}, {}),
    "complex64": ("complex64", 1 + 2j, {}, {}),
    "complex128_inf": ("complex128", complex(np.inf, -1), {}, {}),
    "bool_true": ("bool", True, {}, {}),
    "int32_big": ("int32", -5, dict(serializer=BytesCodec(endian="big"), compressors=None),
                  dict(dtype=">i4", compressors=None)),
    "uint16_crc32c": ("uint16", 3, dict(compressors=[ZstdCodec(level=2), Crc32cCodec()]),
                      dict(compressors=numcodecs.Zstd(level=2))),
    "int32_crc32c_only": ("int32", 0, dict(compressors=[Crc32cCodec()]), dict(compressors=None)),
}


def numcodecs_case(name, dtype, v3_filters, v3_compressors, v2_filters, v2_compressor):
    CASES[name] = (dtype, 0, dict(filters=v3_filters, compressors=v3_compressors),
                   dict(filters=v2_filters, compressors=v2_compressor))


numcodecs_case("float64_bz2", "float64", None, [znc.BZ2(level=3)], None, numcodecs.BZ2(level=3))
numcodecs_case("int16_lz4", "int16", None, [znc.LZ4(acceleration=2)], None, numcodecs.LZ4(acceleration=2))
numcodecs_case("uint8_lzma", "uint8", None, [znc.LZMA(preset=6)], None, numcodecs.LZMA(preset=6))
numcodecs_case("int32_zlib", "int32", None, [znc.Zlib(level=4)], None, numcodecs.Zlib(level=4))
numcodecs_case("float32_adler32", "float32", None, [znc.Adler32()], None, numcodecs.Adler32())
numcodecs_case("int64_fletcher32", "int64", None, [znc.Fletcher32()], None, numcodecs.Fletcher32())
numcodecs_case("uint32_crc32", "uint32", None, [znc.CRC32()], None, numcodecs.CRC32())
numcodecs_case("numcodecs_crc32c", "uint32", None, [znc.Zlib(level=1), znc.CRC32C()], None, numcodecs.Zlib(level=1))
numcodecs_case("float64_shuffle_zstd", "float64", None, [znc.Shuffle(elementsize=8), znc.Zstd(level=1)],
               [numcodecs.Shuffle(elementsize=8)], numcodecs.Zstd(level=1))
numcodecs_case("int32_delta_zlib", "int32", [znc.Delta(dtype="<i4")], [znc.Zlib(level=1)],
               [numcodecs.Delta(dtype="<i4")], numcodecs.Zlib(level=1))
numcodecs_case("float32_bitround", "float32", [znc.BitRound(keepbits=10)], [znc.Zstd(level=1)],
               [numcodecs.BitRound(keepbits=10)], numcodecs.Zstd(level=1))
numcodecs_case("float64_fixedscaleoffset", "float64",
               [znc.FixedScaleOffset(offset=1000, scale=10, dtype="<f8", astype="<i4")], None,
               [numcodecs.FixedScaleOffset(offset=1000, scale=10, dtype="<f8", astype="<i4")], None)
numcodecs_case("float64_quantize", "float64", [znc.Quantize(digits=3, dtype="<f8")], [znc.GZip(level=2)],
               [numcodecs.Quantize(digits=3, dtype="<f8")], numcodecs.GZip(level=2))


def write(path, dtype, fill, fmt, kw):
    kw = dict(kw)
    if fill is not None:
        kw["fill_value"] = fill
    zarr.create_array(str(path), shape=(7, 5), chunks=(3, 2), dtype=kw.pop("dtype", dtype),
                      zarr_format=fmt, **kw)


def main():
    if HERE.exists():
        shutil.rmtree(HERE)
    with tempfile.TemporaryDirectory() as tmp:
        for name, (dtype, fill, v3, v2) in CASES.items():
            out = HERE / name
            out.mkdir(parents=True)
            write(pathlib.Path(tmp) / name / "v3", dtype, fill, 3, v3)
            write(pathlib.Path(tmp) / name / "v2", dtype, fill, 2, v2)
            shutil.copy(pathlib.Path(tmp) / name / "v3" / "zarr.json", out / "zarr.json")
            zarray = json.loads((pathlib.Path(tmp) / name / "v2" / ".zarray").read_text())
            (out / ".zarray").write_text(json.dumps(zarray, indent=2) + "\n")
            print(name, json.dumps({k: zarray[k] for k in ("dtype", "fill_value", "filters", "compressor")}))


if __name__ == "__main__":
    main()
