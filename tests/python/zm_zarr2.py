"""Running zarr-python 2 (in .venv-zarr2) on a directory tree from the suite's venv.

The parent test saves the expected arrays (what the writers wrote, read natively) as .npy
files, describes the reads in a job file and runs zarr2_reader.py with the zarr-2 interpreter;
every job's outcome comes back in a JSON results file.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
READER = HERE / "zarr2_reader.py"


def save_expected(native: dict[str, np.ndarray], npy_dir: Path) -> dict[str, str]:
    npy_dir.mkdir(parents=True, exist_ok=True)
    out = {}
    for path, arr in native.items():
        f = npy_dir / (path.replace("/", "__") + ".npy")
        if arr.dtype.kind == "T":  # numpy 2 strings: zarr-python 2 reads them as objects
            arr = arr.astype(object)
        np.save(f, arr, allow_pickle=True)
        out[path] = str(f)
    return out


def jobs_for(root: Path | str, manifest: dict, npy: dict[str, str], hidden: frozenset[str] = frozenset()) -> list[dict]:
    """Every array (by path, and through its consolidated root if it has one) and every group;
    arrays in `hidden` (left out of the view) are neither read nor expected among members.
    `root` is a directory, or an http:// URL (a str) that zarr-python 2 opens with its FSStore."""
    if isinstance(root, str) and "://" in root:
        def at(p: str) -> str:
            return root.rstrip("/") + "/" + p if p else root.rstrip("/")
    else:
        def at(p: str) -> str:
            return str(Path(root) / p) if p else str(root)
    jobs = []
    for e in manifest["arrays"]:
        p = e["path"]
        if p in hidden:
            continue
        jobs.append({"id": f"array:{p}", "kind": "array", "path": at(p), "expected": npy[p]})
        if e["consolidated_root"]:
            c = e["consolidated_root"]
            jobs.append({"id": f"consolidated:{p}", "kind": "consolidated", "root": at(c),
                         "member": p[len(c) + 1:], "expected": npy[p]})
    group_paths = [g["path"] for g in manifest["groups"]]
    for g in manifest["groups"]:
        gp = g["path"]
        arrays = [e["path"].rpartition("/")[2] for e in manifest["arrays"]
                  if e["parent"] == gp and e["path"] not in hidden]
        groups = [h.rpartition("/")[2] for h in group_paths if h and h.rpartition("/")[0] == gp]
        jobs.append({"id": f"group:{gp}", "kind": "group", "path": at(gp),
                     "arrays": arrays, "groups": groups, "attrs": g["attributes"]})
    return jobs


def run(python: Path, jobs: list[dict], workdir: Path, timeout: float = 600) -> dict[str, dict]:
    workdir.mkdir(parents=True, exist_ok=True)
    jobs_file, results_file = workdir / "jobs.json", workdir / "results.json"
    jobs_file.write_text(json.dumps({"jobs": jobs}))
    res = subprocess.run([str(python), str(READER), str(jobs_file), str(results_file)],
                         capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0 or not results_file.exists():
        raise RuntimeError(f"zarr2_reader.py failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    results = json.loads(results_file.read_text())["results"]
    missing = [j["id"] for j in jobs if j["id"] not in results]
    if missing:
        raise RuntimeError(f"zarr2_reader.py gave no result for {missing}")
    return results


def describe_failure(r: dict) -> str:
    return f"{r['error']}\n{r.get('traceback', '')}"
