#!/usr/bin/env python3
"""Write seed inputs for the fuzz targets from the project's real fixtures.

    python3 fuzz/seeds.py OUTDIR      -> OUTDIR/<target>/<seed>

Sources: examples/sample.zarr, the zip fixtures in tests/fixtures/zip (also read as stores)
and the decoding vectors in src/zarr/codecs/testdata. Standard library only. scripts/fuzz.sh
adds these to every run, so they need not stay in the committed (minimised) corpus.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import struct
import sys
import warnings
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTDATA = ROOT / "src/zarr/codecs/testdata"


def stores():
    """(name, {key: bytes}) for every store-shaped fixture."""
    sample = ROOT / "examples/sample.zarr"
    yield "sample", {p.relative_to(sample).as_posix(): p.read_bytes() for p in sample.rglob("*") if p.is_file()}
    for z in sorted((ROOT / "tests/fixtures/zip").glob("*.zip")):
        with zipfile.ZipFile(z) as f:
            # Later duplicates win, as in the mount.
            yield z.stem, {i.filename: f.read(i) for i in f.infolist() if not i.is_dir()}


def add(out: Path, target: str, data: bytes) -> None:
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / ("seed-" + hashlib.sha1(data).hexdigest())).write_bytes(data)


def shard_header(meta: dict) -> bytes | None:
    """The shard_index target's header for a sharded array, or None if it cannot say it."""
    codecs = meta.get("codecs") or []
    if len(codecs) != 1 or not isinstance(codecs[0], dict) or codecs[0].get("name") != "sharding_indexed":
        return None
    conf = codecs[0]["configuration"]
    shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
    inner = conf["chunk_shape"]
    if len(shard) > 3 or len(inner) != len(shard):
        return None
    names = [c if isinstance(c, str) else c["name"] for c in conf.get("index_codecs", [])]
    flags = (1 if conf.get("index_location", "end") == "start" else 0) | (2 if "crc32c" in names else 0)
    flags |= len(shard) << 2
    h = bytes([flags])
    for s, i in zip(shard, inner):
        if s % i or s // i > 0xFFFF or i > 0xFF:
            return None
        h += struct.pack("<HB", s // i, i)
    return h


def index_region(header: bytes, shard: bytes) -> bytes:
    flags, ndim = header[0], (header[0] >> 2) & 3
    n = 1
    for d in range(ndim):
        n *= struct.unpack_from("<H", header, 1 + 3 * d)[0]
    size = 16 * n + (4 if flags & 2 else 0)
    return shard[:size] if flags & 1 else shard[len(shard) - size:]


def shard_seeds(out: Path, meta: dict, chunks: list[bytes]) -> None:
    h = shard_header(meta)
    if h is None:
        return
    for shard in chunks:
        add(out, "shard_index", h + shard)
        # Explicit size mode: the index bytes alone with the real size.
        add(out, "shard_index", bytes([h[0] | 16]) + h[1:] + struct.pack("<Q", len(shard)) + index_region(h, shard))


def main() -> None:
    out = Path(sys.argv[1])
    warnings.simplefilter("ignore")  # zipfile warns about the duplicate name on purpose
    for _, files in stores():
        for key, data in files.items():
            name = key.rsplit("/", 1)[-1]
            if name == "zarr.json":
                add(out, "zarr_json", data)
                try:
                    meta = json.loads(data)
                except ValueError:
                    continue
                if isinstance(meta, dict) and meta.get("node_type") == "array":
                    prefix = key[: -len("zarr.json")]
                    chunks = [v for k, v in files.items()
                              if k.startswith(prefix) and not k.rsplit("/", 1)[-1].startswith((".", "zarr.json"))]
                    try:
                        shard_seeds(out, meta, chunks[:4])
                    except (KeyError, TypeError):
                        pass
            elif name in (".zarray", ".zmetadata"):
                add(out, "zarray", data)
    for z in sorted((ROOT / "tests/fixtures/zip").glob("*.zip")):
        add(out, "zip", z.read_bytes())

    # Small archives: mutations of these stay small, so the minimised corpus does too.
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        for variant in range(3):
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w", compression=method) as z:
                z.writestr("zarr.json", b'{"zarr_format":3,"node_type":"group"}')
                z.writestr("a/", b"")
                with z.open("a/c/0", "w", force_zip64=variant == 1) as f:
                    f.write(bytes(range(40)) * 2)
                if variant == 2:
                    z.writestr("a/c/0", b"duplicate name")
                    z.comment = b"comment"
            add(out, "zip", buf.getvalue())

    # Hand-made hostile seeds.
    add(out, "shard_index", bytes([3 << 2]) + struct.pack("<HB", 0xFFFF, 1) * 3)  # 2^48 entries
    eocd64 = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, 1 << 40, 1 << 40, 1 << 20, 0)
    locator = struct.pack("<IIQI", 0x07064B50, 0, 0, 1)
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    add(out, "zip", eocd64 + locator + eocd)  # a ZIP64 archive claiming 2^40 entries
    add(out, "zip", struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFE, 0xFFFE, 0, 0, 0))

    # Python's json writes bare NaN, Infinity and -Infinity: zarr-python in attributes,
    # VirtualiZarr (kerchunk) in references and their .zmetadata.
    add(out, "zarray", (ROOT / "tests/fixtures/virtualizarr/refs.parq/.zmetadata").read_bytes())
    array = json.loads((TESTDATA / "int32_zstd" / "zarr.json").read_bytes())
    array["attributes"] = {"_FillValue": math.nan, "range": [-math.inf, math.inf], "s": "NaN"}
    add(out, "zarr_json", json.dumps(array, indent=2).encode())
    zarray = {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<f8", "compressor": None,
              "fill_value": math.nan, "order": "C", "filters": None}
    add(out, "zarray", json.dumps(zarray).encode())

    # Decoding vectors, in the codec target's CHAINS order.
    source = (ROOT / "fuzz/fuzz_targets/codec.rs").read_text()
    chains = re.findall(r'^\s*(v3|v2)!\("([^"]+)"\),', source, re.M)
    for i, (kind, name) in enumerate(chains):
        d = TESTDATA / name if kind == "v3" else TESTDATA / "v2" / name
        chunk = (d / "chunk").read_bytes()
        add(out, "codec", bytes([i]) + chunk)
        doc = d / ("zarr.json" if kind == "v3" else ".zarray")
        add(out, "zarr_json" if kind == "v3" else "zarray", doc.read_bytes())
        if kind == "v3":
            shard_seeds(out, json.loads(doc.read_bytes()), [chunk])


if __name__ == "__main__":
    main()
