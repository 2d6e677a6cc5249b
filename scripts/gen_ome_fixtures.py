#!/usr/bin/env python3
"""Write OME-Zarr 0.5 (and one 0.6) test stores with the real writers, sharded (issue 43 item 2).

    python scripts/gen_ome_fixtures.py OUT_DIR

Needs Python >= 3.12 with ngff-zarr (0.50.x), ome-zarr (0.18) and zarr-python 3 (the suite's
.venv). For each writer, under OUT_DIR/<writer>/:

- image.ome.zarr: a 3-level z,y,x multiscales image (ngff-zarr also writes it as 0.6, with a
  translation, in image-0.6.ome.zarr);
- tczyx.ome.zarr: a 3-level t,c,z,y,x image with one label image, labels/cells, that is zero
  outside a small blob, so the writers leave most of its chunks (and whole shards) out;
- plate.ome.zarr: an HCS plate with two wells (A/1, A/2) of one field each.

OUT_DIR/manifest.json says what was written, for the tests:
    {"stores": [{"writer", "path", "version" (OME), "kind": "image"|"plate",
                 "images": [{"path", "levels": [array paths], "labels": [{"name", "path",
                             "levels"}]}],
                 "plate": {"wells": [well paths]} (plates only)}],
     "versions": {package: version}}
Paths are relative to OUT_DIR; levels and label paths relative to the store.
"""

from __future__ import annotations

import json
import math
import sys
from importlib.metadata import version
from pathlib import Path

import ngff_zarr as nz
import numpy as np
import zarr
from ome_zarr.format import FormatV05
from ome_zarr.writer import write_image, write_labels, write_plate_metadata, write_well_metadata

SPACE = {"z": 2.0, "y": 0.5, "x": 0.5}
UNITS = {"z": "micrometer", "y": "micrometer", "x": "micrometer"}
LEVELS = 3
WELLS = [("A", "1"), ("A", "2")]


def zyx_data() -> np.ndarray:
    rng = np.random.default_rng(43)
    return rng.integers(0, 4000, size=(8, 64, 48), dtype=np.uint16)


def tczyx_data() -> np.ndarray:
    t, c, z, y, x = np.indices((2, 2, 4, 64, 64))
    return ((t * 1000 + c * 300 + z * 40 + y + x) % 4096).astype(np.uint16)


def label_data() -> np.ndarray:
    """Zero but for a blob in one corner: the writers leave out the all-zero chunks and shards."""
    labels = np.zeros((2, 1, 4, 64, 64), dtype=np.uint32)
    labels[0, 0, 1:3, 4:14, 6:12] = 7
    labels[0, 0, 2, 8:10, 8:10] = 9
    return labels


def plate_grid() -> tuple[list[str], list[str]]:
    """The plate's row and column names."""
    return sorted({r for r, _ in WELLS}), sorted({c for _, c in WELLS})


def well_data(row: int, col: int) -> np.ndarray:
    c, y, x = np.indices((2, 32, 32))
    return (c * 500 + row * 100 + col * 10 + y * x % 7).astype(np.uint16)


# --------------------------------------------------------------------------- ngff-zarr


def _ngff_multiscales(data, dims, chunks, label=False, translation=None):
    scale = {d: SPACE.get(d, 1.0) for d in dims}
    image = nz.to_ngff_image(data, dims=dims, scale=scale, translation=translation, name="image",
                             axes_units={d: UNITS[d] for d in dims if d in UNITS})
    factors = [{d: 2 ** i if d in "yx" else 1 for d in dims if d in SPACE}
               for i in range(1, LEVELS)]
    method = nz.Methods.ITKWASM_LABEL_IMAGE if label else nz.Methods.DASK_BIN_SHRINK
    return nz.to_multiscales(image, scale_factors=factors, chunks=chunks, method=method)


def _ngff_write(path: Path, data, dims, chunks, label=False):
    nz.to_ome_zarr(str(path), _ngff_multiscales(data, dims, chunks, label), version="0.5",
                   chunks_per_shard=2)


def ngff_zarr_stores(out: Path) -> None:
    _ngff_write(out / "image.ome.zarr", zyx_data(), ["z", "y", "x"], 8)
    # 0.6 (RFC-5) as ngff-zarr writes it: one coordinate system, a scale-then-translation
    # sequence per level, which 0.4 can express.
    shifted = _ngff_multiscales(zyx_data(), ["z", "y", "x"], 8,
                                translation={"z": 0.0, "y": 1.0, "x": -2.0})
    nz.to_ome_zarr(str(out / "image-0.6.ome.zarr"), shifted, version="0.6", chunks_per_shard=2)

    image = out / "tczyx.ome.zarr"
    _ngff_write(image, tczyx_data(), ["t", "c", "z", "y", "x"], (1, 1, 4, 16, 16))
    # ngff-zarr writes no labels metadata: the label image is its multiscales, the `labels`
    # and `image-label` objects are added the way the 0.5 spec places them.
    _ngff_write(image / "labels" / "cells", label_data(), ["t", "c", "z", "y", "x"],
                (1, 1, 4, 16, 16), label=True)
    labels = zarr.open_group(image / "labels", mode="a", zarr_format=3)
    labels.attrs["ome"] = {"version": "0.5", "labels": ["cells"]}
    cells = zarr.open_group(image / "labels" / "cells", mode="a", zarr_format=3)
    ome = dict(cells.attrs["ome"])
    ome["image-label"] = {"colors": [{"label-value": 7, "rgba": [255, 0, 0, 255]}],
                          "source": {"image": "../../"}}
    cells.attrs["ome"] = ome
    # The root's consolidated metadata (ngff-zarr writes it) must list the labels too.
    zarr.consolidate_metadata(str(image))

    rows, cols = plate_grid()
    plate = nz.Plate(
        rows=[nz.PlateRow(name=r) for r in rows],
        columns=[nz.PlateColumn(name=c) for c in cols],
        wells=[nz.PlateWell(path=f"{r}/{c}", rowIndex=rows.index(r), columnIndex=cols.index(c))
               for r, c in WELLS],
        name="test plate", field_count=1, version="0.5",
    )
    with nz.HCSPlateWriter(str(out / "plate.ome.zarr"), plate) as writer:
        for r, c in WELLS:
            ms = _ngff_multiscales(well_data(rows.index(r), cols.index(c)), ["c", "y", "x"],
                                   (1, 16, 16))
            writer.write_well_image(ms, row_name=r, column_name=c, field_index=0,
                                    chunks_per_shard=2)


# --------------------------------------------------------------------------- ome-zarr-py


def _omezarr_options(chunks, shards):
    return [{"chunks": chunks, "shards": shards}] * LEVELS


def _omero(channels: int) -> dict:
    """Rendering settings with the image `id` that iohub 0.1 requires."""
    window = {"start": 0, "end": 4095, "min": 0, "max": 4095}
    colors = ["FF0000", "00FF00", "0000FF"]
    return {"id": 1, "name": "fixture",
            "channels": [{"label": f"ch{i}", "color": colors[i], "active": True,
                          "window": window} for i in range(channels)]}


def ome_zarr_py_stores(out: Path) -> None:
    fmt = FormatV05()
    factors = [2 ** i for i in range(1, LEVELS)]

    root = zarr.open_group(out / "image.ome.zarr", mode="w", zarr_format=3)
    write_image(zyx_data(), root, scale_factors=factors, axes=["z", "y", "x"], fmt=fmt,
                scale=SPACE, axes_units=UNITS,
                storage_options=_omezarr_options((8, 8, 8), (8, 16, 16)), omero=_omero(1))

    axes = ["t", "c", "z", "y", "x"]
    root = zarr.open_group(out / "tczyx.ome.zarr", mode="w", zarr_format=3)
    chunks, shards = (1, 1, 4, 16, 16), (1, 1, 4, 32, 32)
    write_image(tczyx_data(), root, scale_factors=factors, axes=axes, fmt=fmt, scale=SPACE,
                axes_units=UNITS, storage_options=_omezarr_options(chunks, shards),
                omero=_omero(2))
    write_labels(label_data(), root, name="cells", scaler=None, scale_factors=factors, axes=axes,
                 fmt=fmt, scale=SPACE, axes_units=UNITS,
                 storage_options=_omezarr_options(chunks, shards),
                 label_metadata={"colors": [{"label-value": 7, "rgba": [255, 0, 0, 255]}]})

    rows, cols = plate_grid()
    root = zarr.open_group(out / "plate.ome.zarr", mode="w", zarr_format=3)
    write_plate_metadata(root, rows, cols, [f"{r}/{c}" for r, c in WELLS], fmt=fmt,
                         name="test plate", field_count=1)
    for r, c in WELLS:
        well = root.require_group(r).require_group(c)
        write_well_metadata(well, [{"path": "0"}], fmt=fmt)
        field = well.require_group("0")
        write_image(well_data(rows.index(r), cols.index(c)), field, scale_factors=factors,
                    axes=["c", "y", "x"], fmt=fmt, omero=_omero(2),
                    storage_options=_omezarr_options((1, 16, 16), (1, 32, 32)))


# --------------------------------------------------------------------------- manifest


def _ome(group: zarr.Group) -> dict:
    return group.attrs.asdict().get("ome", {})


def _image_entry(store: Path, path: str) -> dict:
    group = zarr.open_group(store / path if path else store, mode="r")
    ome = _ome(group)
    [ms] = ome["multiscales"]
    prefix = f"{path}/" if path else ""
    entry = {"path": path, "levels": [prefix + d["path"] for d in ms["datasets"]], "labels": []}
    if "labels" in group.group_keys():
        for name in _ome(group["labels"]).get("labels", []):
            label = _image_entry(store, f"{prefix}labels/{name}")
            entry["labels"].append({"name": name, "path": label["path"], "levels": label["levels"]})
    return entry


def _store_entry(out: Path, writer: str, name: str) -> dict:
    store = out / writer / name
    ome = _ome(zarr.open_group(store, mode="r"))
    entry = {"writer": writer, "path": f"{writer}/{name}", "version": ome["version"]}
    if "plate" in ome:
        wells = [w["path"] for w in ome["plate"]["wells"]]
        images = []
        for w in wells:
            well = _ome(zarr.open_group(store / w, mode="r"))["well"]
            images += [_image_entry(store, f"{w}/{i['path']}") for i in well["images"]]
        entry.update(kind="plate", plate={"wells": wells}, images=images)
    else:
        entry.update(kind="image", images=[_image_entry(store, "")])
    return entry


def _check_layout(out: Path, entry: dict) -> None:
    """Every level must be sharded and the label levels must have shards left out, else the
    fixture misses its point."""
    for image in entry["images"]:
        for level in image["levels"] + [lv for lb in image["labels"] for lv in lb["levels"]]:
            if zarr.open_array(out / entry["path"] / level, mode="r").shards is None:
                raise SystemExit(f"{entry['path']}/{level}: the writer did not shard")
        for label in image["labels"]:
            level0 = out / entry["path"] / label["levels"][0]
            array = zarr.open_array(level0, mode="r")
            grid = math.prod(-(-n // s) for n, s in zip(array.shape, array.shards))
            written = sum(1 for f in (level0 / "c").rglob("*") if f.is_file())
            if written >= grid:
                raise SystemExit(f"{level0}: the writer left no shard out ({written} of {grid})")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    writers = {"ngff-zarr": ngff_zarr_stores, "ome-zarr-py": ome_zarr_py_stores}
    stores = []
    for writer, write in writers.items():
        (out / writer).mkdir(exist_ok=True)
        write(out / writer)
        for name in sorted(p.name for p in (out / writer).iterdir()):
            entry = _store_entry(out, writer, name)
            _check_layout(out, entry)
            stores.append(entry)
    versions = {p: version(p) for p in ("zarr", "ngff-zarr", "ome-zarr", "numpy")}
    (out / "manifest.json").write_text(json.dumps({"stores": stores, "versions": versions},
                                                  indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
