"""Regenerate the scale_offset / cast_value vectors with zarr-python >= 3.2 and cast-value-rs.

Run from the repository root with a Python >= 3.12 environment holding zarr >= 3.2 and
cast-value-rs:  python src/zarr/codecs/testdata/make_cast_vectors.py

It writes into src/zarr/codecs/testdata/:
  cast_value/<name>/  zarr.json, chunk and expected as make_vectors.py writes them: arrays
                      zarr-python wrote through scale_offset + cast_value (every rounding
                      mode, clamp, wrap, scalar_map sentinels for NaN and infinities,
                      sharded with an absent inner chunk), decoded by zarr-python.
  cast_table.txt      cast-value-rs (the backend zarr-python decodes cast_value with) on
                      awkward values: every pair of numeric types, every rounding mode and
                      out_of_range, one value at a time, so an error shows per value.
  fixedscaleoffset_equivalence.json
                      for scale_offset + cast_value configurations: whether numcodecs'
                      FixedScaleOffset (what a zarr-python 2 reader runs on the v2 view)
                      decodes every stored integer (all of them for 1- and 2-byte types,
                      extremes and a random sample for wider ones) bit for bit as
                      zarr-python 3 does.
"""

import json
import pathlib
import shutil
import tempfile
import warnings

import numcodecs
import numpy as np
import zarr
from cast_value_rs import cast_array
from zarr.codecs import CastValue, ScaleOffset, ZstdCodec

warnings.filterwarnings("ignore")
HERE = pathlib.Path(__file__).resolve().parent
SHAPE, CHUNKS = (12, 10), (4, 5)
SHARD_SHAPE, SHARDS, INNER = (16, 12), (8, 6), (4, 3)
ROUNDINGS = ["nearest-even", "towards-zero", "towards-positive", "towards-negative", "nearest-away"]
TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
         "float16", "float32", "float64"]


def grid_values(n, step, start):
    """Multiples of `step` from `start`: with scale 1/step they become exact ties."""
    return start + step * np.arange(n)


def f8_i2(n):
    # (x + 3) * 4 runs over halves: ties at every other element, some past int16.
    v = grid_values(n, 0.125, -3 - 4.0)
    v[::17] = 9000.375  # (9000.375 + 3) * 4 = 36013.5: out of int16 range
    return v


def f4_u1(n):
    # (x - 10) * 2: halves from -20 to 100 and beyond 255.
    v = grid_values(n, 0.25, 0.0).astype("float32")
    v[::11] = 200.25  # 380.5: past uint8
    v[1::13] = -7.75  # negative: below uint8
    return v


def with_specials(v):
    v = v.copy()
    v[3::19] = np.nan
    v[5::23] = np.inf
    v[7::29] = -np.inf
    return v


SENTINELS = dict(encode=[["NaN", 0], ["Infinity", 255], ["-Infinity", 254]],
                 decode=[[0, "NaN"], [255, "Infinity"], [254, "-Infinity"]])

# name: (dtype, fill, filters, values(n), sharded)
CASES = {}
for r in ROUNDINGS:
    CASES[f"f8_i2_{r}"] = ("float64", 0.0, [ScaleOffset(offset=-3, scale=4),
                                             CastValue(data_type="int16", rounding=r, out_of_range="clamp")],
                           f8_i2, False)
    CASES[f"f4_u1_{r}_clamp"] = ("float32", 10.0, [ScaleOffset(offset=10, scale=2),
                                                    CastValue(data_type="uint8", rounding=r, out_of_range="clamp")],
                                 f4_u1, False)
CASES.update({
    "f8_i2_wrap": ("float64", 0.0, [ScaleOffset(offset=-3, scale=4),
                                    CastValue(data_type="int16", out_of_range="wrap")], f8_i2, False),
    "f8_u1_sentinels_sharded": ("float64", float("nan"),
                                [ScaleOffset(offset=-10, scale=0.1),
                                 CastValue(data_type="uint8", rounding="nearest-away", out_of_range="clamp",
                                           scalar_map=SENTINELS)],
                                lambda n: with_specials(grid_values(n, 7.3, 0.0)), True),
    "f8_i2_sharded": ("float64", 0.5, [ScaleOffset(offset=100, scale=8),
                                       CastValue(data_type="int16", out_of_range="clamp")],
                      lambda n: grid_values(n, 0.375, 50.0), True),
    "f4_i2_scale_tenth": ("float32", 0.0, [ScaleOffset(offset=0.5, scale=10),
                                           CastValue(data_type="int16")],
                          lambda n: grid_values(n, 0.1, -20.0).astype("float32"), False),
    "f2_u1": ("float16", 0.0, [ScaleOffset(offset=-1, scale=8),
                               CastValue(data_type="uint8", out_of_range="clamp")],
              lambda n: grid_values(n, 0.125, -1.5).astype("float16"), False),
    # Integer arithmetic: decoding divides exactly (a wrapped value would not).
    "i4_i2": ("int32", 1000, [ScaleOffset(offset=1000, scale=3), CastValue(data_type="int16")],
              lambda n: (np.arange(n) * 157 - 8000).astype("int32"), False),
    "i8_f8_towards_zero": ("int64", 0, [CastValue(data_type="float64", rounding="towards-zero",
                                                   out_of_range="clamp")],
                           lambda n: (np.iinfo("int64").max - np.arange(n) * 1234567).astype("int64"), False),
    "f8_i4_cast_only": ("float64", 0.0, [CastValue(data_type="int32", rounding="towards-negative")],
                        lambda n: grid_values(n, 1.5, -90.0), False),
    "f8_f4_towards_positive": ("float64", 0.0, [ScaleOffset(offset=0.25, scale=3),
                                                CastValue(data_type="float32", rounding="towards-positive")],
                               lambda n: grid_values(n, 0.1, -5.0), False),
})


def write_vector(name, tmp, key, block):
    out = HERE / "cast_value" / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copyfile(tmp / "zarr.json", out / "zarr.json")
    shutil.copyfile(tmp / key, out / "chunk")
    dt = block.dtype.newbyteorder("<")
    (out / "expected").write_bytes(np.ascontiguousarray(block.astype(dt)).tobytes())


def main_vectors():
    for name, (dtype, fill, filters, values, sharded) in CASES.items():
        shape = SHARD_SHAPE if sharded else SHAPE
        a = np.asarray(values(int(np.prod(shape)))).astype(dtype).reshape(shape)
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            kw = dict(chunks=INNER, shards=SHARDS) if sharded else dict(chunks=CHUNKS)
            z = zarr.create_array(store=tmp, shape=shape, dtype=dtype, fill_value=fill, zarr_format=3,
                                  filters=filters, compressors=[ZstdCodec(level=3)], **kw)
            if sharded:
                a[8:12, 9:12] = fill  # one inner chunk of shard (1, 1) left out
            z[...] = a
            region = tuple(slice(s, 2 * s) for s in (SHARDS if sharded else CHUNKS))
            got = z[region]
            if sharded:
                assert np.isnan(fill) or (got[0:4, 3:6] == fill).all()
            write_vector(name, tmp, "c/1/1", got)
            print(name, (tmp / "c/1/1").stat().st_size)


def interesting(t):
    """Values of type t that sit on rounding ties, range edges and special cases."""
    if np.dtype(t).kind == "f":
        v = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 0.49999999999999994, 0.1, -0.1, 1 / 3,
             127.5, 128.0, -128.5, 255.5, 256.0, 32767.5, -32768.5, 65504.0, 65519.0, 65520.0,
             2.0 ** 31 - 0.5, 2.0 ** 31, 2.0 ** 32 + 3, 2.0 ** 63, -(2.0 ** 63), 2.0 ** 64, -1e20,
             3.4028235e38, 3.5e38, -1e300, 1e-300, 1e-40, 6e-8, 1.0000001, 2049.0,
             float(np.nextafter(np.float32(1), np.float32(2))) + 2.0 ** -30,
             float("nan"), float("inf"), float("-inf")]
        with np.errstate(all="ignore"):
            return np.array(v).astype(t)
    info = np.iinfo(t)
    v = [0, 1, -1, 127, 128, -128, -129, 255, 256, 2047, 2049, 4095, 32767, 32768, -32769,
         65504, 65519, 65520, 65535, 65536, 2 ** 24 + 1, 2 ** 31 - 1, -(2 ** 31), 2 ** 32 - 1,
         2 ** 53 + 1, -(2 ** 53 + 1), 2 ** 63 - 1, -(2 ** 63), 2 ** 64 - 1, 2 ** 63 + 2 ** 11 + 1]
    return np.array([x for x in v if info.min <= x <= info.max], dtype=t)


def hex_of(a):
    return a.astype(a.dtype.newbyteorder("<")).tobytes().hex()


def main_table():
    lines = ["# cast-value-rs, one value at a time: `in <type> <hex...>` lists a source type's inputs;",
             "# `<from> <to> <out_of_range|-> <roundings,...> <hex or E per input>` its casts."]
    for src in TYPES:
        x = interesting(src)
        lines.append(f"in {src} " + " ".join(hex_of(x[i:i + 1]) for i in range(len(x))))
        for dst in TYPES:
            modes = [None, "clamp"] + (["wrap"] if np.dtype(dst).kind != "f" else [])
            for oor in modes:
                by_result = {}
                for r in ROUNDINGS:
                    out = []
                    for i in range(len(x)):
                        try:
                            y = cast_array(x[i:i + 1], target_dtype=dst, rounding_mode=r, out_of_range_mode=oor)
                            out.append(hex_of(y))
                        except (ValueError, OverflowError):
                            out.append("E")
                    by_result.setdefault(" ".join(out), []).append(r)
                for result, rs in by_result.items():
                    lines.append(f"{src} {dst} {oor or '-'} {','.join(rs)} {result}")
    (HERE / "cast_table.txt").write_text("\n".join(lines) + "\n")
    print("cast_table.txt", len(lines), "lines")


def stored_values(t, rng):
    info = np.iinfo(t)
    if np.dtype(t).itemsize <= 2:
        return np.arange(info.min, info.max + 1).astype(t)
    ends = [info.min, info.min + 1, -1, 0, 1, info.max - 1, info.max, 2 ** 24 + 1, 2 ** 53 + 1]
    sample = rng.integers(info.min, info.max, 20000, dtype=t, endpoint=True)
    return np.concatenate([np.array([e for e in ends if info.min <= e <= info.max], dtype=t), sample])


# (array dtype, scale_offset configuration or None, cast_value configuration)
EQUIVALENCE = []
for a, t in [("float64", "int16"), ("float64", "uint8"), ("float64", "int32"), ("float64", "uint32"),
             ("float64", "int64"), ("float64", "uint64"), ("float32", "int16"), ("float32", "uint8"),
             ("float32", "uint16"), ("float32", "int32"), ("float16", "int8"), ("float16", "uint8"),
             ("float16", "int16")]:
    for so in [None, {"scale": 4, "offset": -3}, {"scale": 0.1, "offset": 7.3}, {"scale": 0.5, "offset": 0.1},
               {"scale": -0.0625, "offset": 1000.7}, {"scale": 3}, {"scale": 2 ** -12}, {"scale": 256},
               {"scale": 0.1}, {"scale": 1e30}, {"scale": -7, "offset": 0.0}]:
        for r in ["nearest-even", "towards-zero"]:
            EQUIVALENCE.append((a, so, {"data_type": t, "rounding": r, "out_of_range": "clamp"}))
EQUIVALENCE.append(("float64", {"offset": -10, "scale": 0.1},
                    {"data_type": "uint8", "scalar_map": {"decode": [[0, "NaN"]]}}))


def zarr3_decode(a, so, cast, stored):
    """zarr-python's decode of stored integers through cast_value then scale_offset."""
    from zarr.core.array_spec import ArrayConfig, ArraySpec
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.dtype import get_data_type_from_native_dtype

    spec = ArraySpec(shape=stored.shape, dtype=get_data_type_from_native_dtype(np.dtype(a)), fill_value=0,
                     config=ArrayConfig.from_dict({}), prototype=default_buffer_prototype())
    buf = default_buffer_prototype().nd_buffer.from_ndarray_like(stored)
    out = CastValue(**cast)._decode_sync(buf, spec)
    if so is not None:
        out = ScaleOffset(**so)._decode_sync(out, spec)
    return out.as_ndarray_like()


def main_equivalence():
    rng = np.random.default_rng(7)
    cases = []
    for a, so, cast in EQUIVALENCE:
        stored = stored_values(cast["data_type"], rng)
        ours = zarr3_decode(a, so, cast, stored)
        p = so or {}
        f = numcodecs.FixedScaleOffset(offset=float(np.dtype(a).type(p.get("offset", 0))),
                                       scale=float(np.dtype(a).type(p.get("scale", 1))),
                                       dtype=np.dtype(a).str, astype=stored.dtype.str)
        theirs = f.decode(stored.tobytes())
        same = ours.tobytes() == np.asarray(theirs).astype(a).tobytes()
        cases.append({"data_type": a, "scale_offset": so, "cast_value": cast, "bit_exact": same})
    (HERE / "fixedscaleoffset_equivalence.json").write_text(json.dumps(cases, indent=1) + "\n")
    print("fixedscaleoffset_equivalence.json", sum(c["bit_exact"] for c in cases), "of", len(cases), "bit-exact")


if __name__ == "__main__":
    main_vectors()
    main_table()
    main_equivalence()
