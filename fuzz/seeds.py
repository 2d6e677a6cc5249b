#!/usr/bin/env python3
"""Write seed inputs for the fuzz targets from the project's real fixtures.

    python3 fuzz/seeds.py OUTDIR      -> OUTDIR/<target>/<seed>

Sources: examples/sample.zarr, the zip fixtures in tests/fixtures/zip (also read as stores),
the decoding vectors in src/zarr/codecs/testdata, the VirtualiZarr reference fixtures, and
hand-written reference templates and OME attributes (0.5, 0.6, labels, plates, wells). Standard library only. scripts/fuzz.sh
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

    reference_seeds(out)
    template_seeds(out)
    ome_seeds(out)


def reference_seeds(out: Path) -> None:
    """The refs target: an even first byte and a JSON reference file, or an odd one, the
    `.zmetadata` length (2 bytes, little-endian), the `.zmetadata` and one record file."""
    vz = ROOT / "tests/fixtures/virtualizarr"
    add(out, "refs", b"\0" + (vz / "refs.json").read_bytes())
    small = {"version": 1, "refs": {
        ".zgroup": '{"zarr_format":2}',
        "a/.zarray": json.dumps({"shape": [8], "chunks": [4], "dtype": "<u1", "fill_value": 0,
                                 "order": "C", "filters": None, "compressor": None, "zarr_format": 2}),
        "a/0": "base64:AAECAw==",
        "a/1": ["s3://bucket/data.nc", 16, 4],
        "b/0": ["{{u}}", 0, 8],
    }, "templates": {"u": "s3://bucket/data.nc"},
        "gen": [{"key": "g/{{i}}", "url": "{{u}}", "offset": "{{i * 4}}", "length": "4",
                 "dimensions": {"i": {"start": 0, "stop": 4, "step": 1}}}]}
    add(out, "refs", b"\0" + json.dumps(small).encode())
    zmetadata = (vz / "refs.parq/.zmetadata").read_bytes()
    for record in sorted((vz / "refs.parq").glob("*/refs.0.parq"))[:3]:
        add(out, "refs", b"\1" + struct.pack("<H", len(zmetadata)) + zmetadata + record.read_bytes())


def template_seeds(out: Path) -> None:
    """The template target: `NAME=VALUE` lines, a NUL, two characters that bind `i` and `j`,
    then the template."""
    for globals_, template in [
        ("u=s3://bucket/data", "{{u}}/{{i}}.nc"),
        ("", "file_{{ '%03d' % i }}_{{j}}.bin"),
        ("a=x\nb=y", "{{a}}{{b}}-{{i + j}}-{{i * 2 // 3}}"),
        ("", "{% if i > 2 %}big{% else %}small{% endif %}"),
        ("", "{{ i | string }}"),
    ]:
        add(out, "template", f"{globals_}\0\x05\x07{template}".encode())


def ome_seeds(out: Path) -> None:
    """The ome target: a group's attributes, OME 0.5 and 0.6 images, labels, plates, wells."""
    axes = [{"name": "c", "type": "channel"}, {"name": "y", "type": "space", "unit": "micrometer"},
            {"name": "x", "type": "space", "unit": "micrometer"}]
    datasets = [{"path": str(i), "coordinateTransformations": [
        {"type": "scale", "scale": [1.0, 2.0 ** i, 2.0 ** i]}]} for i in range(3)]
    image = {"ome": {"version": "0.5", "multiscales": [{"name": "img", "axes": axes, "datasets": datasets}],
                     "omero": {"channels": [{"color": "FF0000", "window": {"start": 0, "end": 255}}]}},
             "title": "kept"}
    add(out, "ome", json.dumps(image).encode())
    v06 = {"ome": {"version": "0.6", "multiscales": [{
        "coordinateSystems": [{"name": "physical", "axes": axes}],
        "datasets": [{"path": "0", "coordinateTransformations": [
            {"type": "scale", "scale": [1.0, 0.5, 0.5], "input": "0", "output": "physical"}]}]}]}}
    add(out, "ome", json.dumps(v06).encode())
    for ome in [{"version": "0.5", "labels": ["cells"]},
                {"version": "0.5", "image-label": {"colors": [{"label-value": 1, "rgba": [255, 0, 0, 255]}]}},
                {"version": "0.5", "plate": {"rows": [{"name": "A"}], "columns": [{"name": "1"}],
                                             "wells": [{"path": "A/1", "rowIndex": 0, "columnIndex": 0}]}},
                {"version": "0.5", "well": {"images": [{"path": "0"}]}},
                {"bioformats2raw.layout": 3, "series": ["0"]}]:
        add(out, "ome", json.dumps({"ome": ome}).encode())


if __name__ == "__main__":
    main()
