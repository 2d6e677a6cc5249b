"""Read arrays with zarr-python 2 (run with .venv-zarr2/bin/python, not the suite's venv).

    .venv-zarr2/bin/python zarr2_reader.py JOBS.json RESULTS.json

JOBS.json: {"jobs": [job, ...]}, each job one of
    {"id": ID, "kind": "array", "path": ARRAY_DIR, "expected": NPY}
        zarr.open_array(ARRAY_DIR, mode="r")[...] must equal the array in NPY
    {"id": ID, "kind": "consolidated", "root": GROUP_DIR, "member": REL, "expected": NPY}
        zarr.open_consolidated(GROUP_DIR, mode="r")[REL][...] must equal NPY
    {"id": ID, "kind": "group", "path": GROUP_DIR, "arrays": [...], "groups": [...], "attrs": {...}}
        zarr.open_group(GROUP_DIR, mode="r") lists exactly those member arrays and groups and
        has those attributes
    {"id": ID, "kind": "attrs", "path": NODE_DIR, "attrs": {...}}
    {"id": ID, "kind": "attrs", "root": GROUP_DIR, "member": REL, "attrs": {...}}
        the node's attributes (zarr.open, resp. through zarr.open_consolidated) are those, NaN
        equal to NaN (compared as Python's json writes them)

RESULTS.json: {"zarr_version": ..., "results": {ID: {"ok": bool, "error": str|None, "info": {...}}}}
Comparison: same shape, same dtype kind and item size (byte order may differ), equal values
(NaN equal to NaN). Every job runs even when others fail; the exit status is 0 unless the
job file itself cannot be read.
"""

from __future__ import annotations

import json
import sys
import traceback

import numpy as np
import zarr


def compare(got, expected: np.ndarray) -> None:
    got = np.asarray(got)
    if got.shape != expected.shape:
        raise AssertionError(f"shape {got.shape}, want {expected.shape}")
    if (got.dtype.kind, got.dtype.itemsize) != (expected.dtype.kind, expected.dtype.itemsize):
        raise AssertionError(f"dtype {got.dtype.str}, want {expected.dtype.str}")
    nan = expected.dtype.kind in "fcmM"  # NaN and NaT equal themselves here
    if not np.array_equal(got, expected, equal_nan=nan):
        diff = np.argwhere(~((got == expected) | (np.isnan(got) & np.isnan(expected))
                             if nan else (got == expected)))
        first = [tuple(int(x) for x in d) for d in diff[:5]]
        raise AssertionError(f"{len(diff)} of {expected.size} elements differ, first at {first}: "
                             f"got {[repr(got[i]) for i in first]}, want {[repr(expected[i]) for i in first]}")


def _info(z) -> dict:
    return {"dtype": z.dtype.str, "chunks": list(z.chunks), "order": z.order,
            "compressor": None if z.compressor is None else z.compressor.get_config(),
            "filters": None if not z.filters else [f.get_config() for f in z.filters]}


def run_job(job: dict) -> dict:
    kind = job["kind"]
    if kind == "array":
        z = zarr.open_array(job["path"], mode="r")
        info = _info(z)
        compare(z[...], np.load(job["expected"], allow_pickle=True))
        return info
    if kind == "consolidated":
        g = zarr.open_consolidated(job["root"], mode="r")
        z = g[job["member"]]
        info = _info(z)
        compare(z[...], np.load(job["expected"], allow_pickle=True))
        return info
    if kind == "group":
        g = zarr.open_group(job["path"], mode="r")
        arrays, groups = sorted(g.array_keys()), sorted(g.group_keys())
        attrs = dict(g.attrs)
        problems = []
        if arrays != sorted(job["arrays"]):
            problems.append(f"arrays {arrays}, want {sorted(job['arrays'])}")
        if groups != sorted(job["groups"]):
            problems.append(f"groups {groups}, want {sorted(job['groups'])}")
        if attrs != job["attrs"]:
            problems.append(f"attributes {attrs}, want {job['attrs']}")
        if problems:
            raise AssertionError("; ".join(problems))
        return {"arrays": arrays, "groups": groups}
    if kind == "attrs":
        if "root" in job:
            node = zarr.open_consolidated(job["root"], mode="r")
            node = node[job["member"]] if job["member"] else node
        else:
            node = zarr.open(job["path"], mode="r")
        got, want = json.dumps(dict(node.attrs), sort_keys=True), json.dumps(job["attrs"], sort_keys=True)
        if got != want:
            raise AssertionError(f"attributes {got}, want {want}")
        return {"attrs": got}
    raise ValueError(f"unknown job kind {kind!r}")


def main(argv: list[str]) -> int:
    jobs_path, results_path = argv[1], argv[2]
    with open(jobs_path) as f:
        jobs = json.load(f)["jobs"]
    results = {}
    for job in jobs:
        try:
            info = run_job(job)
            results[job["id"]] = {"ok": True, "error": None, "info": info}
        except Exception as e:  # noqa: BLE001 - every failure is reported to the parent test
            tb = traceback.format_exception(type(e), e, e.__traceback__)
            results[job["id"]] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                                  "traceback": "".join(tb[-6:])}
    with open(results_path, "w") as f:
        json.dump({"zarr_version": zarr.__version__, "python": sys.version, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
