"""Reference model of zarr-mount's views, written independently of the Rust code.

Given a local directory store, `reference_view(root)` computes what the mount's default
(`unsharded`) view must contain: every file path and its bytes. Sharded Zarr v3 arrays whose
sharding codec is the only codec (nothing before or after it) are unpacked:

* their `zarr.json` gets chunk_grid = the inner chunk shape and codecs = the inner codecs;
* each inner chunk present in a shard's index (and inside the array's bounds) becomes a file
  at the array's chunk_key_encoding of its global inner-chunk coordinate, holding exactly the
  inner chunk's bytes from the shard;
* shard objects themselves are not visible.

Everything else (groups, v2 arrays, unsharded or non-unpackable arrays, other files) is passed
through byte for byte, except inline `consolidated_metadata` in group zarr.json files, whose
entries for unpacked arrays must be rewritten the same way (or the block dropped).

Shard index layout (sharding-indexed spec): n = prod(shard_shape / chunk_shape) pairs of
uint64 (offset, nbytes) in C order, little-endian unless the index `bytes` codec says big,
followed by a little-endian CRC-32C of those 16n bytes when index_codecs contain crc32c. The
index sits at the start or the end of the shard object. offset == nbytes == 2^64-1 is an absent
chunk.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import crc32c as _crc32c

ABSENT = 2**64 - 1


class CorruptShard(Exception):
    """The shard's index is unusable (checksum mismatch, truncated, entry out of range)."""


def crc32c(data: bytes) -> int:
    return _crc32c.crc32c(data)


# --------------------------------------------------------------------------- keys


def key_encoding(meta: dict) -> tuple[str, str]:
    """(name, separator) of a v3 array's chunk_key_encoding (or a v2 array's separator)."""
    if meta.get("zarr_format") == 2:
        return "v2", meta.get("dimension_separator") or "."
    cke = meta.get("chunk_key_encoding") or {"name": "default"}
    name = cke["name"]
    sep = (cke.get("configuration") or {}).get("separator", "/" if name == "default" else ".")
    return name, sep


def chunk_key(coords: tuple[int, ...], encoding: tuple[str, str]) -> str:
    name, sep = encoding
    if name == "default":
        return sep.join(["c", *map(str, coords)])
    if name == "v2":
        return sep.join(map(str, coords)) if coords else "0"
    raise ValueError(f"unknown chunk_key_encoding {name!r}")


def grid_shape(shape, chunk_shape) -> tuple[int, ...]:
    return tuple(math.ceil(s / c) for s, c in zip(shape, chunk_shape))


# --------------------------------------------------------------------------- sharding


@dataclass
class ShardLayout:
    shard_shape: tuple[int, ...]
    chunk_shape: tuple[int, ...]
    inner_codecs: list
    index_codecs: list
    index_location: str

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(self.shard_shape, self.chunk_shape))

    @property
    def n(self) -> int:
        return math.prod(self.chunks_per_shard)

    @property
    def index_crc(self) -> bool:
        return any(c["name"] == "crc32c" for c in self.index_codecs)

    @property
    def index_endian(self) -> str:
        for c in self.index_codecs:
            if c["name"] == "bytes":
                return (c.get("configuration") or {}).get("endian", "little")
        raise ValueError("index_codecs without bytes codec")

    @property
    def index_size(self) -> int:
        return 16 * self.n + (4 if self.index_crc else 0)


def unpack_decision(meta: dict) -> tuple[bool, str]:
    """Whether the unsharded view unpacks this node, and why not."""
    if meta.get("zarr_format") != 3 or meta.get("node_type") != "array":
        return False, "not a zarr v3 array"
    codecs = meta.get("codecs", [])
    names = [c["name"] for c in codecs]
    if "sharding_indexed" not in names:
        return False, "not sharded"
    i = names.index("sharding_indexed")
    if i > 0:
        return False, f"array->array codecs {names[:i]} before sharding"
    if i != len(names) - 1:
        return False, f"bytes->bytes codecs {names[i + 1:]} after sharding"
    if meta["chunk_grid"]["name"] != "regular":
        return False, "irregular chunk grid"
    return True, ""


def shard_layout(meta: dict) -> ShardLayout:
    cfg = next(c for c in meta["codecs"] if c["name"] == "sharding_indexed")["configuration"]
    return ShardLayout(
        shard_shape=tuple(meta["chunk_grid"]["configuration"]["chunk_shape"]),
        chunk_shape=tuple(cfg["chunk_shape"]),
        inner_codecs=cfg["codecs"],
        index_codecs=cfg.get("index_codecs") or [{"name": "bytes", "configuration": {"endian": "little"}},
                                                  {"name": "crc32c"}],
        index_location=cfg.get("index_location", "end"),
    )


def parse_index(shard: bytes, layout: ShardLayout) -> list[tuple[int, int] | None]:
    """Entries (offset, nbytes) in C order of local inner coordinates; None for absent."""
    size = layout.index_size
    if len(shard) < size:
        raise CorruptShard(f"shard of {len(shard)} bytes is shorter than its {size}-byte index")
    raw = shard[:size] if layout.index_location == "start" else shard[len(shard) - size:]
    body = raw[: 16 * layout.n]
    if layout.index_crc:
        (stored,) = struct.unpack("<I", raw[16 * layout.n:])
        actual = crc32c(body)
        if stored != actual:
            raise CorruptShard(f"index crc32c mismatch: stored {stored:#010x}, computed {actual:#010x}")
    fmt = ("<" if layout.index_endian == "little" else ">") + f"{2 * layout.n}Q"
    values = struct.unpack(fmt, body)
    entries: list[tuple[int, int] | None] = []
    for i in range(layout.n):
        off, nb = values[2 * i], values[2 * i + 1]
        if off == ABSENT and nb == ABSENT:
            entries.append(None)
            continue
        if off + nb > len(shard):
            raise CorruptShard(f"entry {i} ({off}, {nb}) past the end of a {len(shard)}-byte shard")
        entries.append((off, nb))
    return entries


def local_coords(layout: ShardLayout) -> list[tuple[int, ...]]:
    """Local inner-chunk coordinates in index order (C order)."""
    return list(itertools.product(*(range(c) for c in layout.chunks_per_shard)))


def inner_chunks_of_shard(shard: bytes, shard_coord: tuple[int, ...], meta: dict,
                          layout: ShardLayout | None = None) -> Iterator[tuple[tuple[int, ...], bytes | None, bool]]:
    """Yield (global inner coord, bytes or None if absent, inside_array) for every index entry."""
    layout = layout or shard_layout(meta)
    entries = parse_index(shard, layout)
    inner_grid = grid_shape(meta["shape"], layout.chunk_shape)
    cps = layout.chunks_per_shard
    for local, entry in zip(local_coords(layout), entries):
        g = tuple(s * n + l for s, n, l in zip(shard_coord, cps, local))
        inside = all(x < lim for x, lim in zip(g, inner_grid))
        yield g, (None if entry is None else shard[entry[0]: entry[0] + entry[1]]), inside


def shard_keys(meta: dict) -> Iterator[tuple[tuple[int, ...], str]]:
    layout = shard_layout(meta)
    enc = key_encoding(meta)
    for coord in itertools.product(*(range(g) for g in grid_shape(meta["shape"], layout.shard_shape))):
        yield coord, chunk_key(coord, enc)


def expected_inner_chunks(array_dir: Path, meta: dict) -> dict[str, bytes]:
    """Key (relative to the array dir) -> bytes of every inner chunk the view must show."""
    enc = key_encoding(meta)
    layout = shard_layout(meta)
    out: dict[str, bytes] = {}
    for coord, key in shard_keys(meta):
        p = array_dir / key
        if not p.is_file():
            continue
        for g, data, inside in inner_chunks_of_shard(p.read_bytes(), coord, meta, layout):
            if data is not None and inside:
                k = chunk_key(g, enc)
                assert k not in out, f"duplicate inner key {k}"
                out[k] = data
    return out


def rewritten_metadata(meta: dict) -> dict:
    """The unsharded view's zarr.json for an unpackable array."""
    layout = shard_layout(meta)
    new = copy.deepcopy(meta)
    new["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": list(layout.chunk_shape)}}
    new["codecs"] = copy.deepcopy(layout.inner_codecs)
    return new


def rewrite_consolidated(group_meta: dict) -> dict:
    """A group's zarr.json with its inline consolidated entries rewritten like the arrays."""
    new = copy.deepcopy(group_meta)
    cm = new.get("consolidated_metadata")
    if isinstance(cm, dict) and isinstance(cm.get("metadata"), dict):
        for k, m in cm["metadata"].items():
            if m.get("node_type") == "array" and unpack_decision(m)[0]:
                cm["metadata"][k] = rewritten_metadata(m)
            elif m.get("node_type") == "group":
                cm["metadata"][k] = rewrite_consolidated(m)
    return new


# --------------------------------------------------------------------------- whole view


@dataclass
class Expect:
    """What one file of the view must hold."""

    data: bytes | None = None  # exact bytes
    json: dict | None = None  # JSON object that must compare equal (key order free)
    original: dict | None = None  # for group zarr.json: the source, to allow dropped consolidation
    kind: str = "passthrough"  # passthrough | array-metadata | group-metadata | inner-chunk


def reference_view(root: Path) -> dict[str, Expect]:
    """Relative file path (with '/') -> Expect, for the whole unsharded view of `root`."""
    root = Path(root)
    out: dict[str, Expect] = {}
    unpacked_dirs: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        if any(d == u or u in d.parents for u in unpacked_dirs):
            continue
        dirnames.sort()
        rel_dir = d.relative_to(root)
        meta = None
        if "zarr.json" in filenames:
            meta = json.loads((d / "zarr.json").read_text())
        if meta is not None and meta.get("node_type") == "array" and unpack_decision(meta)[0]:
            unpacked_dirs.append(d)
            dirnames[:] = []
            out[_rel(rel_dir, "zarr.json")] = Expect(json=rewritten_metadata(meta), kind="array-metadata")
            for key, data in expected_inner_chunks(d, meta).items():
                out[_rel(rel_dir, key)] = Expect(data=data, kind="inner-chunk")
            continue
        for name in filenames:
            rel = _rel(rel_dir, name)
            if name == "zarr.json" and meta is not None and meta.get("node_type") == "group" \
                    and meta.get("consolidated_metadata"):
                out[rel] = Expect(json=rewrite_consolidated(meta), original=meta, kind="group-metadata")
            else:
                out[rel] = Expect(data=(d / name).read_bytes())
    return out


def _rel(rel_dir: Path, name: str) -> str:
    return name if str(rel_dir) == "." else f"{rel_dir.as_posix()}/{name}"


def check_file(rel: str, expect: Expect, actual: bytes) -> str | None:
    """None if `actual` is what the view must show at `rel`, else a message."""
    if expect.data is not None:
        if actual != expect.data:
            return f"{rel}: {len(actual)} bytes differ from the expected {len(expect.data)} ({expect.kind})"
        return None
    try:
        got = json.loads(actual)
    except ValueError as e:
        return f"{rel}: not JSON ({e})"
    if got == expect.json:
        return None
    if expect.kind == "group-metadata" and expect.original is not None:
        # Dropping the inline consolidated metadata is allowed; everything else must match.
        orig = {k: v for k, v in expect.original.items() if k != "consolidated_metadata"}
        got_wo = {k: v for k, v in got.items() if k != "consolidated_metadata"}
        if got_wo == orig and got.get("consolidated_metadata") is None:
            return None
    return f"{rel}: JSON differs ({expect.kind})\n  expected: {json.dumps(expect.json, sort_keys=True)}\n  actual:   {json.dumps(got, sort_keys=True)}"


def write_view(view: dict[str, Expect], dest: Path) -> None:
    """Materialise a reference view into a directory (for reading it with zarr clients)."""
    for rel, e in view.items():
        p = Path(dest) / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(e.data if e.data is not None else json.dumps(e.json, indent=2).encode())


def tree_files(root: Path) -> dict[str, Path]:
    """Relative path -> absolute path of every regular file under root (follows the view)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            p = Path(dirpath) / name
            out[p.relative_to(root).as_posix()] = p
    return out
