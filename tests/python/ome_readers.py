"""Read OME-Zarr images and plates with one bioimaging reader (run in that reader's venv).

    PYTHON ome_readers.py READER JOBS.json RESULTS.json

READER is one of
    ome-zarr  ome_zarr.reader.Reader on parse_url(path) (ome-zarr-py, any version)
    iohub     iohub.ngff.open_ome_zarr (layout "fov" for images, "hcs" for plates)
    bioio     bioio.BioImage with the bioio_ome_zarr.Reader plugin (bioio 1.x or 3.x)

JOBS.json: {"jobs": [job, ...]}, each job one of
    {"id", "kind": "image", "path": IMAGE_GROUP, "levels": [NPY, ...],
     "labels": {NAME: {"path": LABEL_GROUP, "levels": [NPY, ...]}},
     "axes": [NAME, ...], "transforms": [[{"type", "scale" | "translation"}, ...] per level]}
    {"id", "kind": "plate", "path": PLATE_GROUP, "fields": {FIELD_PATH: [NPY, ...]},
     "stitched": [NPY, ...]}
FIELD_PATH is a field image's path in the plate ("A/1/0"); "stitched" is the plate's levels
as ome-zarr-py shows them: the first field of each well tiled by row and column. Readers are
asked only what they can do: empty "labels", "stitched" or "axes" are not checked. Axes and
transformations are checked by the ome-zarr reader only (what it reports in node metadata).

RESULTS.json: {"reader": ..., "versions": {...}, "results": {ID: {CHECK: "ok" | ERROR}}}, one
CHECK per level ("level 1"), label level ("label cells level 0"), plate field level
("field A/1/0 level 2") or stitched plate level; a check that could not even start is
reported under "open". Every job runs even when others fail.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
import warnings
from importlib.metadata import PackageNotFoundError, version

import numpy as np

warnings.filterwarnings("ignore")


def compare(got, expected_npy: str) -> str:
    got = np.asarray(got)
    want = np.load(expected_npy)
    if got.shape != want.shape:
        return f"shape {got.shape}, want {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, want {want.dtype}"
    if not np.array_equal(got, want):
        diff = np.argwhere(got != want)
        first = tuple(int(i) for i in diff[0])
        return f"{len(diff)} of {want.size} elements differ, first at {first}: {got[first]} != {want[first]}"
    return "ok"


def error(e: BaseException) -> str:
    tail = traceback.format_exception(type(e), e, e.__traceback__)[-3:]
    return f"{type(e).__name__}: {e}\n{''.join(tail)}"


def check(checks: dict, name: str, fn) -> None:
    try:
        checks[name] = fn()
    except Exception as e:  # noqa: BLE001 - every failure goes back to the test
        checks[name] = error(e)


def opened(checks: dict, name: str, fn):
    """fn()'s result, or None with the error recorded as check `name`."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001
        checks[name] = error(e)
        return None


def compare_levels(checks: dict, prefix: str, levels: list, expected: list[str]) -> None:
    """`levels`: the reader's arrays, finest first."""
    if len(levels) != len(expected):
        checks[f"{prefix}levels"] = f"{len(levels)} levels, want {len(expected)}"
    for i, (arr, npy) in enumerate(zip(levels, expected)):
        check(checks, f"{prefix}level {i}", lambda: compare(arr, npy))


# --------------------------------------------------------------------------- ome-zarr-py


def ome_zarr_image(job: dict, checks: dict) -> None:
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Label, Multiscales, Reader

    nodes = list(Reader(parse_url(job["path"]))())
    if not nodes or nodes[0].load(Multiscales) is None:
        checks["open"] = f"no multiscales image found: nodes {nodes}"
        return
    compare_levels(checks, "", nodes[0].data, job["levels"])
    if job.get("axes"):
        got = [a["name"] for a in nodes[0].metadata.get("axes", [])]
        checks["axes"] = "ok" if got == job["axes"] else f"axes {got}, want {job['axes']}"
        got = nodes[0].metadata.get("coordinateTransformations")
        checks["transformations"] = "ok" if got == job["transforms"] else f"{got}, want {job['transforms']}"
    # Labels are found the ome-zarr way: the image's labels/ group lists them. A label node's
    # name is its multiscale's name when it has one, so match by group name.
    found = {n.zarr.basename(): n for n in nodes[1:] if n.load(Label) is not None}
    for name, label in job["labels"].items():
        if name not in found:
            checks[f"label {name}"] = f"label not found; the reader found nodes {nodes}"
            continue
        compare_levels(checks, f"label {name} ", found[name].data, label["levels"])


def ome_zarr_plate(job: dict, checks: dict) -> None:
    from ome_zarr.io import parse_url
    from ome_zarr.reader import Multiscales, Plate, Reader

    def stitched():
        nodes = list(Reader(parse_url(job["path"]))())
        if not nodes or nodes[0].load(Plate) is None:
            raise AssertionError(f"no plate found: nodes {nodes}")
        return nodes[0].data

    levels = opened(checks, "stitched plate", stitched) if job["stitched"] else None
    if levels is not None:
        compare_levels(checks, "stitched plate ", levels, job["stitched"])
    for field, expected in job["fields"].items():
        nodes = list(Reader(parse_url(f"{job['path']}/{field}"))())
        if not nodes or nodes[0].load(Multiscales) is None:
            checks[f"field {field}"] = f"no multiscales image found: nodes {nodes}"
            continue
        compare_levels(checks, f"field {field} ", nodes[0].data, expected)


# --------------------------------------------------------------------------- iohub


class IohubLog(logging.Handler):
    """iohub tells why it skips a group only in log warnings ("does not have valid metadata")."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        logging.getLogger().addHandler(self)

    def emit(self, record):
        self.lines.append(record.getMessage())

    def why(self) -> str:
        return f"iohub warned: {self.lines}"


def iohub_levels(position, log: IohubLog) -> list:
    # Metadata iohub cannot validate leaves the position without `metadata`.
    if not hasattr(position, "metadata"):
        keys = sorted(position.zattrs.keys())
        raise AssertionError(f"no valid OME metadata in the top-level keys {keys}; {log.why()}")
    datasets = position.metadata.multiscales[0].datasets
    return [position[d.path][...] for d in datasets]


def iohub_image(job: dict, checks: dict) -> None:
    from iohub.ngff import open_ome_zarr

    log = IohubLog()
    with open_ome_zarr(job["path"], layout="fov", mode="r") as position:
        compare_levels(checks, "", iohub_levels(position, log), job["levels"])


def iohub_plate(job: dict, checks: dict) -> None:
    from iohub.ngff import open_ome_zarr

    log = IohubLog()
    with open_ome_zarr(job["path"], layout="hcs", mode="r") as plate:
        positions = dict(plate.positions())
        for field, expected in job["fields"].items():
            if field not in positions:
                # iohub skips a position it cannot validate: open it alone to learn why.
                with open_ome_zarr(f"{job['path']}/{field}", layout="fov", mode="r") as alone:
                    if opened(checks, f"field {field}", lambda: iohub_levels(alone, log)) is not None:
                        checks[f"field {field}"] = (f"readable alone, but not among the plate's "
                                                    f"positions {sorted(positions)}")
                continue
            levels = opened(checks, f"field {field}", lambda: iohub_levels(positions[field], log))
            if levels is not None:
                compare_levels(checks, f"field {field} ", levels, expected)


# --------------------------------------------------------------------------- bioio


def bioio_levels(path: str) -> list:
    import bioio_ome_zarr
    from bioio import BioImage

    reader = BioImage(path, reader=bioio_ome_zarr.Reader).reader
    levels = []
    for level in reader.resolution_levels:
        reader.set_resolution_level(level)
        levels.append(reader.data)  # the image's own dimensions, no reshaping to TCZYX
    return levels


def bioio_image(job: dict, checks: dict) -> None:
    compare_levels(checks, "", bioio_levels(job["path"]), job["levels"])
    # bioio has no labels API: a label image is read as the image it is.
    for name, label in job["labels"].items():
        levels = opened(checks, f"label {name}", lambda: bioio_levels(label["path"]))
        if levels is not None:
            compare_levels(checks, f"label {name} ", levels, label["levels"])


def bioio_plate(job: dict, checks: dict) -> None:
    for field, expected in job["fields"].items():
        compare_levels(checks, f"field {field} ", bioio_levels(f"{job['path']}/{field}"), expected)


# --------------------------------------------------------------------------- main

READERS = {
    "ome-zarr": ({"image": ome_zarr_image, "plate": ome_zarr_plate}, ["ome-zarr", "zarr"]),
    "iohub": ({"image": iohub_image, "plate": iohub_plate}, ["iohub", "zarr"]),
    "bioio": ({"image": bioio_image, "plate": bioio_plate}, ["bioio", "bioio-ome-zarr", "ome-zarr", "zarr"]),
}


def package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def main(argv: list[str]) -> int:
    reader, jobs_path, results_path = argv[1], argv[2], argv[3]
    kinds, packages = READERS[reader]
    with open(jobs_path) as f:
        jobs = json.load(f)["jobs"]
    results = {}
    for job in jobs:
        checks: dict[str, str] = {}
        try:
            kinds[job["kind"]](job, checks)
        except Exception as e:  # noqa: BLE001
            checks["open"] = error(e)
        results[job["id"]] = checks
    with open(results_path, "w") as f:
        json.dump({"reader": reader, "python": sys.version,
                   "versions": {p: package_version(p) for p in packages}, "results": results},
                  f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
