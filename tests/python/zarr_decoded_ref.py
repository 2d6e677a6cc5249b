"""Reference models of zarr-mount's `decoded` and `v2` views (issue 7), written independently
of the Rust code.

Both views start from the unsharded view (zarr_view_ref.reference_view): the same arrays, the
same chunk grid (the inner chunk shape for unpacked sharded arrays, the shard shape for arrays
that cannot be unpacked), the same present chunks.

decoded view
    Every chunk file holds the decoded chunk: the raw elements in C order, little-endian,
    prod(chunk_shape) * itemsize bytes (edge chunks full size, padding included). The chunks
    are decoded here with numcodecs / gzip / crc32c / numpy, following the v3 codec chain
    (bytes, transpose, blosc, zstd, gzip, crc32c, sharding_indexed) or the v2 compressor and
    filters. Metadata: v3 `codecs` becomes [bytes little]; v2 `.zarray` gets compressor null,
    filters null, a little-endian dtype and order C; inline consolidated metadata and v2
    `.zmetadata` are rewritten the same way. A v2 array with a codec outside
    V2_DECODABLE passes through untouched.

v2 view
    v3 groups show `.zgroup` + `.zattrs`, v3 arrays `.zarray` + `.zattrs`; chunk keys become v2
    keys; codec chains numcodecs can express keep their encoded bytes, others are served
    decoded. Zarr v2 data passes through.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np

import zarr_view_ref as ref

LE_BYTES = {"name": "bytes", "configuration": {"endian": "little"}}

# v3 data_type -> little-endian numpy dtype
V3_DTYPES = {
    "bool": "|b1", "int8": "|i1", "uint8": "|u1",
    "int16": "<i2", "uint16": "<u2", "int32": "<i4", "uint32": "<u4", "int64": "<i8", "uint64": "<u8",
    "float16": "<f2", "float32": "<f4", "float64": "<f8", "complex64": "<c8", "complex128": "<c16",
}

# v2 codec ids the decoded view must decode (anything else: the array passes through)
V2_DECODABLE = {"blosc", "zstd", "gzip", "zlib", "crc32c", "fletcher32"}

ARRAY_META = {"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"}


class Unsupported(Exception):
    pass


# --------------------------------------------------------------------------- dtypes, fill values


def le_dtype(dt) -> np.dtype:
    dt = np.dtype(dt)
    return dt.newbyteorder("<") if dt.itemsize > 1 else dt


def dtype_str_le(s: str) -> str:
    """'>i2' -> '<i2'; '|u1', '<f8' unchanged."""
    return "<" + s[1:] if s.startswith(">") else s


def v3_dtype(meta: dict) -> np.dtype:
    name = meta["data_type"]
    if name not in V3_DTYPES:
        raise Unsupported(f"data_type {name!r}")
    return np.dtype(V3_DTYPES[name])


def v3_fill(meta: dict, dtype: np.dtype):
    fv = meta.get("fill_value")
    if isinstance(fv, str):
        if fv in ("NaN", "Infinity", "-Infinity"):
            return dtype.type({"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}[fv])
        if fv.startswith("0x"):
            raw = int(fv, 16).to_bytes(dtype.itemsize, "big")
            return np.frombuffer(raw, dtype.newbyteorder(">"))[0]
    if isinstance(fv, list):
        return dtype.type(complex(*[float(x) if not isinstance(x, str) else float(x.replace("Infinity", "inf"))
                                    for x in fv]))
    return dtype.type(fv)


def v2_fill_value_of(fv, dtype: np.dtype):
    """A v2 .zarray fill_value as a numpy scalar (None stays None)."""
    if fv is None:
        return None
    if isinstance(fv, str) and fv in ("NaN", "Infinity", "-Infinity"):
        return dtype.type({"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}[fv])
    if isinstance(fv, list) and dtype.kind == "c":
        re, im = (v2_fill_value_of(x, np.dtype(dtype.char.lower())) for x in fv)
        return dtype.type(complex(re, im))
    return dtype.type(fv)


def same_scalar(a, b) -> bool:
    if a is None or b is None:
        return a is b
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(a == b)


# --------------------------------------------------------------------------- chunk keys


def parse_chunk_key(key: str, encoding: tuple[str, str], ndim: int) -> tuple[int, ...] | None:
    name, sep = encoding
    if name == "default":
        if ndim == 0:
            return () if key == "c" else None
        if not key.startswith("c" + sep):
            return None
        parts = key[2:].split(sep)
    else:
        if ndim == 0:
            return () if key == "0" else None
        parts = key.split(sep)
    if len(parts) != ndim or not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def v2_view_encoding(meta: dict) -> tuple[str, str]:
    """The v2 key encoding ('v2', separator) the v2 view uses for a v3 array."""
    _, sep = ref.key_encoding(meta)
    return "v2", sep


# --------------------------------------------------------------------------- decoding


def crc32c_strip(data: bytes) -> bytes:
    if len(data) < 4:
        raise ValueError("crc32c: chunk shorter than its checksum")
    body, stored = data[:-4], int.from_bytes(data[-4:], "little")
    if ref.crc32c(body) != stored:
        raise ValueError("crc32c mismatch")
    return body


def decode_bytes_to_bytes(codec: dict, data: bytes) -> bytes:
    name = codec["name"]
    if name == "blosc":
        return bytes(numcodecs.Blosc().decode(data))
    if name == "zstd":
        return bytes(numcodecs.Zstd().decode(data))
    if name == "gzip":
        return gzip.decompress(data)
    if name == "crc32c":
        return crc32c_strip(data)
    raise Unsupported(f"bytes->bytes codec {name!r}")


def decode_v3_chunk(data: bytes, codecs: list, shape: tuple[int, ...], dtype: np.dtype, fill) -> np.ndarray:
    """Decode one chunk of `shape` (logical, C order) through a v3 codec chain."""
    shape = tuple(shape)
    i, orders = 0, []
    while i < len(codecs) and codecs[i]["name"] == "transpose":
        orders.append(tuple(codecs[i]["configuration"]["order"]))
        i += 1
    if i >= len(codecs):
        raise Unsupported("no array->bytes codec")
    ab, bb = codecs[i], codecs[i + 1:]
    enc_shape = shape
    for order in orders:
        enc_shape = tuple(enc_shape[o] for o in order)
    for c in reversed(bb):
        data = decode_bytes_to_bytes(c, data)
    if ab["name"] == "bytes":
        endian = (ab.get("configuration") or {}).get("endian", "little")
        dt = dtype.newbyteorder("<" if endian == "little" else ">") if dtype.itemsize > 1 else dtype
        n = math.prod(enc_shape)
        if len(data) != n * dt.itemsize:
            raise ValueError(f"decoded {len(data)} bytes, want {n * dt.itemsize}")
        arr = np.frombuffer(data, dtype=dt).reshape(enc_shape)
    elif ab["name"] == "sharding_indexed":
        arr = decode_shard(data, ab["configuration"], enc_shape, dtype, fill)
    else:
        raise Unsupported(f"array->bytes codec {ab['name']!r}")
    for order in reversed(orders):
        arr = arr.transpose(np.argsort(order))
    return np.array(arr, dtype=le_dtype(dtype), order="C")  # (ascontiguousarray makes 0-d arrays 1-d)


def decode_shard(data: bytes, cfg: dict, shard_shape: tuple[int, ...], dtype: np.dtype, fill) -> np.ndarray:
    layout = ref.ShardLayout(
        shard_shape=tuple(shard_shape), chunk_shape=tuple(cfg["chunk_shape"]), inner_codecs=cfg["codecs"],
        index_codecs=cfg.get("index_codecs") or [LE_BYTES, {"name": "crc32c"}],
        index_location=cfg.get("index_location", "end"))
    out = np.full(shard_shape, fill, dtype=le_dtype(dtype))
    for local, entry in zip(ref.local_coords(layout), ref.parse_index(data, layout)):
        if entry is None:
            continue
        sl = tuple(slice(l * c, (l + 1) * c) for l, c in zip(local, layout.chunk_shape))
        off, nb = entry
        out[sl] = decode_v3_chunk(data[off: off + nb], layout.inner_codecs, layout.chunk_shape, dtype, fill)
    return out


def v2_decodable(zarray: dict) -> bool:
    ids = [c["id"] for c in (zarray.get("filters") or [])]
    if zarray.get("compressor"):
        ids.append(zarray["compressor"]["id"])
    return all(i in V2_DECODABLE for i in ids)


def decode_v2_chunk(data: bytes, zarray: dict) -> np.ndarray:
    if zarray.get("compressor"):
        data = numcodecs.get_codec(zarray["compressor"]).decode(data)
    for f in reversed(zarray.get("filters") or []):
        data = numcodecs.get_codec(f).decode(data)
    dt = np.dtype(zarray["dtype"])
    shape = tuple(zarray["chunks"])
    arr = np.frombuffer(bytes(data), dtype=dt)
    if arr.size != math.prod(shape):
        raise ValueError(f"decoded {arr.size} elements, want {math.prod(shape)}")
    arr = arr.reshape(shape, order=zarray.get("order", "C"))
    return np.array(arr, dtype=le_dtype(dt), order="C")


def chunk_bytes(arr: np.ndarray) -> bytes:
    return np.asarray(arr, dtype=le_dtype(arr.dtype)).tobytes(order="C")


# --------------------------------------------------------------------------- arrays of the unsharded view


@dataclass
class ViewArray:
    """One array as the unsharded view presents it (the common base of decoded and v2)."""

    path: str  # relative to the store root ('' never: the root is a group)
    zarr_format: int
    meta: dict  # the unsharded view's zarr.json (v3) or .zarray (v2)
    chunk_shape: tuple[int, ...]
    dtype: np.dtype | None  # little-endian logical dtype (None if unknown)
    encoding: tuple[str, str]
    chunks: dict[str, tuple[int, ...]] = field(default_factory=dict)  # key (rel. to array) -> coords
    encoded: dict[str, bytes] = field(default_factory=dict)  # key -> bytes in the unsharded view
    decodable: bool = True

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.meta["shape"])

    @property
    def chunk_nbytes(self) -> int:
        return math.prod(self.chunk_shape) * self.dtype.itemsize

    def fill(self):
        if self.zarr_format == 3:
            return v3_fill(self.meta, self.dtype)
        return v2_fill_value_of(self.meta.get("fill_value"), self.dtype)

    def decode(self, key: str) -> np.ndarray:
        data = self.encoded[key]
        if self.zarr_format == 3:
            return decode_v3_chunk(data, self.meta["codecs"], self.chunk_shape, self.dtype, self.fill())
        return decode_v2_chunk(data, self.meta)

    def block_slices(self, coords: tuple[int, ...]) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """(slices into the array, slices into the chunk) of the chunk's in-bounds region."""
        arr_sl, chunk_sl = [], []
        for c, cs, s in zip(coords, self.chunk_shape, self.shape):
            lo, hi = c * cs, min((c + 1) * cs, s)
            arr_sl.append(slice(lo, hi))
            chunk_sl.append(slice(0, hi - lo))
        return tuple(arr_sl), tuple(chunk_sl)


def _load_json_expect(e: ref.Expect) -> dict:
    return copy.deepcopy(e.json) if e.json is not None else json.loads(e.data)


def view_arrays(root: Path, unsharded: dict[str, ref.Expect] | None = None) -> dict[str, ViewArray]:
    """Every array of the unsharded view of `root`, with its chunk files."""
    root = Path(root)
    unsharded = unsharded if unsharded is not None else ref.reference_view(root)
    arrays: dict[str, ViewArray] = {}
    for rel, e in unsharded.items():
        d, _, name = rel.rpartition("/")
        if name == "zarr.json":
            meta = _load_json_expect(e)
            if meta.get("node_type") != "array":
                continue
            chunk_shape = tuple(meta["chunk_grid"]["configuration"]["chunk_shape"])
            try:
                dt = v3_dtype(meta)
            except Unsupported:
                dt = None
            arrays[d] = ViewArray(d, 3, meta, chunk_shape, dt, ref.key_encoding(meta), decodable=dt is not None)
        elif name == ".zarray":
            meta = _load_json_expect(e)
            meta.setdefault("zarr_format", 2)
            arrays[d] = ViewArray(d, 2, meta, tuple(meta["chunks"]), le_dtype(meta["dtype"]), ref.key_encoding(meta),
                                  decodable=v2_decodable(meta))
    for rel, e in unsharded.items():
        for apath, a in arrays.items():
            if rel.startswith(apath + "/"):
                key = rel[len(apath) + 1:]
                if key in ARRAY_META:
                    break
                coords = parse_chunk_key(key, a.encoding, len(a.shape))
                if coords is None:
                    break
                a.chunks[key] = coords
                a.encoded[key] = e.data
                break
    return arrays


# --------------------------------------------------------------------------- decoded view


def decoded_v3_meta(meta: dict) -> dict:
    new = copy.deepcopy(meta)
    new["codecs"] = [copy.deepcopy(LE_BYTES)]
    return new


def decoded_zarray(zarray: dict) -> dict:
    if not v2_decodable(zarray):
        return zarray
    new = copy.deepcopy(zarray)
    new.update(compressor=None, filters=None, dtype=dtype_str_le(zarray["dtype"]), order="C")
    return new


def _decoded_consolidated(group_meta: dict) -> dict:
    new = copy.deepcopy(group_meta)
    cm = new.get("consolidated_metadata")
    if isinstance(cm, dict) and isinstance(cm.get("metadata"), dict):
        for k, m in cm["metadata"].items():
            if m.get("node_type") == "array":
                cm["metadata"][k] = decoded_v3_meta(m)
            elif m.get("node_type") == "group":
                cm["metadata"][k] = _decoded_consolidated(m)
    return new


def _decoded_zmetadata(zmeta: dict) -> dict:
    new = copy.deepcopy(zmeta)
    for k, m in new.get("metadata", {}).items():
        if k == ".zarray" or k.endswith("/.zarray"):
            new["metadata"][k] = decoded_zarray(m)
    return new


def reference_decoded_view(root: Path) -> tuple[dict[str, ref.Expect], dict[str, ViewArray]]:
    """(relative path -> Expect for every file of the decoded view, the view's arrays)."""
    root = Path(root)
    unsharded = ref.reference_view(root)
    arrays = view_arrays(root, unsharded)
    out: dict[str, ref.Expect] = {}
    owner: dict[str, ViewArray] = {}
    for a in arrays.values():
        for key in a.chunks:
            owner[f"{a.path}/{key}"] = a
    for rel, e in unsharded.items():
        d, _, name = rel.rpartition("/")
        a = arrays.get(d)
        if rel in owner:
            a = owner[rel]
            if a.decodable:
                out[rel] = ref.Expect(data=chunk_bytes(a.decode(rel[len(a.path) + 1:])), kind="decoded-chunk")
            else:
                out[rel] = ref.Expect(data=e.data, kind="passthrough")
        elif a is not None and name == "zarr.json":
            out[rel] = ref.Expect(json=decoded_v3_meta(a.meta) if a.decodable else a.meta, kind="array-metadata")
        elif a is not None and name == ".zarray":
            out[rel] = ref.Expect(json=decoded_zarray(a.meta), kind="array-metadata")
        elif name == "zarr.json":
            meta = _load_json_expect(e)
            if meta.get("consolidated_metadata"):
                out[rel] = ref.Expect(json=_decoded_consolidated(meta), kind="group-metadata")
            else:
                out[rel] = e
        elif name == ".zmetadata":
            out[rel] = ref.Expect(json=_decoded_zmetadata(_load_json_expect(e)), kind="zmetadata")
        else:
            out[rel] = e
    return out, arrays


# --------------------------------------------------------------------------- v2 view

BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


VLEN_CODECS = {"vlen-utf8", "vlen-bytes"}
# v3 data types stored through a vlen codec: shown as dtype '|O' with that codec as a filter
VLEN_TYPES = {"string": "vlen-utf8", "variable_length_bytes": "vlen-bytes"}


def v2_codec_plan(codecs: list, ndim: int) -> dict | None:
    """How the v2 view expresses a v3 codec chain while keeping the encoded chunks, or None if
    v2 cannot express it (the chunks are then served decoded). A trailing crc32c is left out
    of the v2 form (`strip_crc32c`: chunks are served without their last 4 bytes); a crc32c
    anywhere else makes the chain one that is served decoded."""
    i, order = 0, "C"
    if codecs and codecs[0]["name"] == "transpose":
        perm = list(codecs[0]["configuration"]["order"])
        if perm == list(range(ndim)):
            order = "C"
        elif perm == list(reversed(range(ndim))):
            order = "F"
        else:
            return None
        i = 1
    if i >= len(codecs) or codecs[i]["name"] not in {"bytes"} | VLEN_CODECS:
        return None
    endian = (codecs[i].get("configuration") or {}).get("endian", "little")
    ids = [{"id": codecs[i]["name"]}] if codecs[i]["name"] in VLEN_CODECS else []
    rest = codecs[i + 1:]
    strip = bool(rest) and rest[-1]["name"] == "crc32c"
    if strip:
        rest = rest[:-1]
    for c in rest:
        cfg = c.get("configuration") or {}
        if c["name"] == "blosc":
            ids.append({"id": "blosc", "cname": cfg.get("cname"), "clevel": cfg.get("clevel"),
                        "shuffle": BLOSC_SHUFFLE.get(cfg.get("shuffle"), cfg.get("shuffle"))})
        elif c["name"] == "zstd":
            ids.append({"id": "zstd", "level": cfg.get("level")})
        elif c["name"] == "gzip":
            ids.append({"id": "gzip", "level": cfg.get("level")})
        else:
            return None
    return {"order": order, "endian": endian, "codecs": ids, "strip_crc32c": strip}


def v2_dtype_str(dtype: np.dtype, endian: str) -> str:
    if dtype.itemsize == 1:
        return "|" + dtype.str[1:]
    return ("<" if endian == "little" else ">") + dtype.str[1:]


@dataclass
class V2ArrayExpect:
    view: ViewArray
    plan: dict | None  # None: served decoded
    dtype: str
    order: str
    separator: str
    attrs: dict
    chunks: dict[str, bytes]  # v2 key -> bytes

    def zarray_problems(self, z: Any) -> list[str]:
        p = []
        if not isinstance(z, dict):
            return [f".zarray is not a JSON object: {z!r}"]
        a = self.view
        want = {"zarr_format": 2, "shape": list(a.shape), "chunks": list(a.chunk_shape), "dtype": self.dtype,
                "order": self.order}
        for k, v in want.items():
            if z.get(k) != v:
                p.append(f".zarray {k} = {z.get(k)!r}, want {v!r}")
        sep = z.get("dimension_separator", ".")
        if sep != self.separator:
            p.append(f".zarray dimension_separator = {z.get('dimension_separator')!r}, want {self.separator!r}")
        for k in ("compressor", "filters", "fill_value"):
            if k not in z:
                p.append(f".zarray has no {k!r} key")
        got_codecs = list(z.get("filters") or []) + ([z["compressor"]] if z.get("compressor") else [])
        want_codecs = self.plan["codecs"] if self.plan else []
        if [c.get("id") for c in got_codecs] != [c["id"] for c in want_codecs]:
            p.append(f".zarray codecs (filters + compressor) {got_codecs}, want ids {[c['id'] for c in want_codecs]}")
        else:
            for g, w in zip(got_codecs, want_codecs):
                for k, v in w.items():
                    if k != "id" and v is not None and g.get(k) != v:
                        p.append(f".zarray codec {w['id']}: {k} = {g.get(k)!r}, want {v!r}")
        if "fill_value" in z and self.dtype == "|O":
            if z["fill_value"] != a.meta.get("fill_value"):
                p.append(f".zarray fill_value {z['fill_value']!r}, want {a.meta.get('fill_value')!r}")
        elif "fill_value" in z:
            try:
                got_fill = v2_fill_value_of(z["fill_value"], np.dtype(self.dtype))
            except (TypeError, ValueError) as e:
                p.append(f".zarray fill_value {z['fill_value']!r}: {e}")
            else:
                if not same_scalar(got_fill, a.fill()):
                    p.append(f".zarray fill_value {z['fill_value']!r}, want {a.meta.get('fill_value')!r}")
        return p


def v2_array_expect(a: ViewArray) -> V2ArrayExpect:
    meta = a.meta
    plan = v2_codec_plan(meta["codecs"], len(a.shape))
    # A chain that ends in sharding (or anything else v2 cannot express) is served decoded.
    if a.dtype is None:  # a vlen type: '|O', its codecs kept
        dtype, order = "|O", plan["order"]
    elif plan is None:
        dtype, order = v2_dtype_str(a.dtype, "little"), "C"
    else:
        dtype, order = v2_dtype_str(a.dtype, plan["endian"]), plan["order"]
    enc = v2_view_encoding(meta)
    chunks = {}
    for key, coords in a.chunks.items():
        if plan is None:
            data = chunk_bytes(a.decode(key))
        elif plan["strip_crc32c"]:
            data = crc32c_strip(a.encoded[key])
        else:
            data = a.encoded[key]
        chunks[ref.chunk_key(coords, enc)] = data
    attrs = copy.deepcopy(meta.get("attributes") or {})
    names = meta.get("dimension_names")
    if names and all(isinstance(n, str) for n in names):
        attrs["_ARRAY_DIMENSIONS"] = list(names)
    return V2ArrayExpect(a, plan, dtype, order, enc[1], attrs, chunks)


@dataclass
class V2View:
    passthrough: dict[str, bytes]  # v2 data and other files: exact bytes
    groups: dict[str, dict]  # v3 group path -> attributes
    arrays: dict[str, V2ArrayExpect]  # v3 array path -> expectation
    consolidated: dict[str, dict]  # v3 group path with inline consolidated metadata -> its zarr.json

    def files(self) -> set[str]:
        out = set(self.passthrough)
        for g in self.groups:
            out |= {_rel(g, ".zgroup"), _rel(g, ".zattrs")}
        for g in self.consolidated:
            out.add(_rel(g, ".zmetadata"))
        for p, a in self.arrays.items():
            out |= {_rel(p, ".zarray"), _rel(p, ".zattrs")}
            out |= {_rel(p, k) for k in a.chunks}
        return out


def _rel(d: str, name: str) -> str:
    return f"{d}/{name}" if d else name


def reference_v2_view(root: Path) -> V2View:
    root = Path(root)
    unsharded = ref.reference_view(root)
    arrays = view_arrays(root, unsharded)
    v3_arrays = {p: a for p, a in arrays.items() if a.zarr_format == 3}
    view = V2View({}, {}, {}, {})
    for p, a in v3_arrays.items():
        vlen = VLEN_TYPES.get(a.meta.get("data_type"))
        plan = v2_codec_plan(a.meta["codecs"], len(a.shape)) if vlen else None
        if a.dtype is not None or (plan and plan["codecs"][:1] == [{"id": vlen}]):
            view.arrays[p] = v2_array_expect(a)  # other data types without a v2 equivalent are left out
    for rel, e in unsharded.items():
        d, _, name = rel.rpartition("/")
        if any(rel.startswith(p + "/") for p in v3_arrays):
            continue  # v3 array metadata and chunks: covered by view.arrays
        if name == "zarr.json":
            meta = _load_json_expect(e)
            if meta.get("node_type") == "group":
                view.groups[d] = meta.get("attributes") or {}
                if meta.get("consolidated_metadata"):
                    view.consolidated[d] = meta
            continue
        view.passthrough[rel] = e.data if e.data is not None else (root / rel).read_bytes()
    return view


def expected_zmetadata_keys(view: V2View, group: str) -> tuple[set[str], set[str]]:
    """(keys a synthesized .zmetadata must have, keys it may have) for a consolidated v3 group."""
    must, may = {".zgroup"}, {".zgroup", ".zattrs"}
    if view.groups.get(group):
        must.add(".zattrs")
    prefix = group + "/" if group else ""
    for g, attrs in view.groups.items():
        if g.startswith(prefix) and g != group:
            r = g[len(prefix):]
            must.add(f"{r}/.zgroup")
            may |= {f"{r}/.zgroup", f"{r}/.zattrs"}
            if attrs:
                must.add(f"{r}/.zattrs")
    for p, a in view.arrays.items():
        if p.startswith(prefix):
            r = p[len(prefix):]
            must.add(f"{r}/.zarray")
            may |= {f"{r}/.zarray", f"{r}/.zattrs"}
            if a.attrs:
                must.add(f"{r}/.zattrs")
    return must, may


def tree_files(root: Path) -> dict[str, Path]:
    return ref.tree_files(root)


def _numcodecs_config(c: dict) -> dict:
    if c["id"] == "blosc":
        return {"id": "blosc", "cname": c["cname"], "clevel": c["clevel"], "shuffle": c["shuffle"], "blocksize": 0}
    return {k: v for k, v in c.items() if v is not None}


def _v2_fill_json(value, dtype: np.dtype):
    if value is None:
        return None
    v = np.asarray(value, dtype=dtype).item()
    if isinstance(v, complex):
        return [_v2_fill_json(v.real, np.dtype("f8")), _v2_fill_json(v.imag, np.dtype("f8"))]
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
    return v


def reference_zarray(a: V2ArrayExpect) -> dict:
    """A .zarray that satisfies `a` (what the reference v2 view materialises)."""
    codecs = [_numcodecs_config(c) for c in (a.plan["codecs"] if a.plan else [])]
    return {"zarr_format": 2, "shape": list(a.view.shape), "chunks": list(a.view.chunk_shape), "dtype": a.dtype,
            "compressor": codecs[-1] if codecs else None, "filters": codecs[:-1] or None,
            "fill_value": (a.view.meta.get("fill_value") if a.dtype == "|O"
                           else _v2_fill_json(a.view.fill(), np.dtype(a.dtype))), "order": a.order,
            "dimension_separator": a.separator}


def write_v2_view(view: V2View, dest: Path) -> None:
    """Materialise the reference v2 view into a directory (to check it with zarr-python 2)."""
    dest = Path(dest)

    def put(rel: str, data: bytes):
        p = dest / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    for rel, data in view.passthrough.items():
        put(rel, data)
    docs: dict[str, dict] = {}
    for g, attrs in view.groups.items():
        docs[_rel(g, ".zgroup")] = {"zarr_format": 2}
        docs[_rel(g, ".zattrs")] = attrs
    for p, a in view.arrays.items():
        docs[_rel(p, ".zarray")] = reference_zarray(a)
        docs[_rel(p, ".zattrs")] = a.attrs
        for k, data in a.chunks.items():
            put(_rel(p, k), data)
    for g in view.consolidated:
        prefix = g + "/" if g else ""
        meta = {rel[len(prefix):]: doc for rel, doc in docs.items() if rel.startswith(prefix)}
        docs[_rel(g, ".zmetadata")] = {"zarr_consolidated_format": 1, "metadata": meta}
    for rel, doc in docs.items():
        put(rel, json.dumps(doc, indent=2).encode())
