"""Read arrays with zarr-python >= 3.2 (rectilinear chunk grids), in-process when the suite's
venv has it, else as a subprocess of another interpreter:

    PYTHON zarr_latest_reader.py JOBS.json RESULTS.json

JOBS.json: {"jobs": [{"id": ID, "path": ARRAY_DIR, "out": NPY}, ...]}: each array is read whole
(zarr.open_array(ARRAY_DIR, mode="r")[...]) and saved to NPY.
RESULTS.json: {"zarr_version": ..., "results": {ID: {"ok": bool, "error": str|None}}}; every job
runs even when others fail.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def read_array(path: str) -> np.ndarray:
    import zarr

    with zarr.config.set({"array.rectilinear_chunks": True}):
        return zarr.open_array(path, mode="r")[...]


def run_jobs(jobs: list[dict]) -> dict[str, dict]:
    results = {}
    for job in jobs:
        try:
            arr = read_array(job["path"])
            if arr.dtype.kind == "T":  # numpy 2 strings: saved as objects, like the expected files
                arr = arr.astype(object)
            np.save(job["out"], arr, allow_pickle=arr.dtype == object)
            results[job["id"]] = {"ok": True, "error": None}
        except Exception as e:  # noqa: BLE001 - every failure is a result
            results[job["id"]] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    return results


def main() -> None:
    import zarr

    jobs = json.loads(open(sys.argv[1]).read())["jobs"]
    results = run_jobs(jobs)
    with open(sys.argv[2], "w") as f:
        json.dump({"zarr_version": zarr.__version__, "results": results}, f)


if __name__ == "__main__":
    main()
