"""Issue 43 item 2: OME-Zarr 0.5 through the v2 views, read by the bioimaging readers people run.

The stores come from the real writers (ngff-zarr and ome-zarr-py, sharded; see
scripts/gen_ome_fixtures.py). What each test shows:

- 0.4-only readers (ome-zarr-py 0.9 on zarr-python 2, iohub 0.1, bioio 1.x with
  bioio-ome-zarr 1.2) read every level, label and plate field through `--view v2` and
  `--view v2-decoded` equal to what zarr-python reads from the original;
- ome-zarr-models validates the v2 view's image, labels, image-label, plate and well groups
  as OME-Zarr 0.4, and every `.zmetadata` entry equals the `.zattrs` beside it;
- 0.5-aware readers (ome-zarr-py 0.18, bioio-ome-zarr 3) read the `unsharded` view as 0.5;
- `--v2-ome keep` leaves every group's attributes as the writer wrote them.

The 0.4-only readers run in venvs of their own under the repo root, the 0.5-aware ones and the
writers in the suite's venv (scripts/setup.sh builds them all); a missing one is a failure
under CI=true or ZM_REQUIRE_BINARY=1, else a skip.

A reader failure that is the reader's own (it fails the same way on any store these writers
make) is listed in READER_LIMITS with the error it gives; one that the translation should fix
is listed in PENDING_FIXES and makes the test xfail until the fix lands.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import pytest
import zarr

from zm_harness import REPO, REQUIRE_BINARY, Mount, run_generator

HERE = Path(__file__).resolve().parent
READER_SCRIPT = HERE / "ome_readers.py"
MUST_HAVE = REQUIRE_BINARY or os.environ.get("CI") == "true"

# name: (ome_readers.py reader, its venv under the repo root or the package in the suite's own,
#        what the reader is asked besides levels and plate fields: "labels" (found through the
#        image or opened by path), "stitched" (plates tiled into one image), "space" (axes and
#        each level's coordinate transformations))
READERS_0_4 = {
    "ome-zarr-0.9": ("ome-zarr", ".venv-ome-zarr-0.9", {"labels", "stitched", "space"}),
    "iohub-0.1": ("iohub", ".venv-iohub", set()),
    "bioio-1": ("bioio", ".venv-bioio", {"labels"}),
}
READERS_0_5 = {
    "ome-zarr-0.18": ("ome-zarr", "ome-zarr", {"labels", "stitched"}),
    "bioio-3": ("bioio", "bioio-ome-zarr", {"labels"}),
}

# (reader, store, check) patterns -> the reader's own error, present whatever the view does.
READER_LIMITS = {
    # ome-zarr-py < 0.10 opens a well's levels at <field>/<level index> ("A/1/0/0"), not at the
    # datasets' paths; both writers name levels otherwise ("s0", "scale0/image"), so zarr-python
    # 2 is asked to create a missing array.
    ("ome-zarr-0.9", "*/plate.ome.zarr", "stitched plate"): "TypeError: shape is None",
    # iohub 0.1 requires `omero` with an `id` beside `multiscales`; ngff-zarr writes no `omero`.
    ("iohub-0.1", "ngff-zarr/*", "*"): "no valid OME metadata in the top-level keys ['multiscales']",
}

# (reader, store, check) patterns -> the failure the translation should fix (see the report).
PENDING_FIXES: dict[tuple[str, str, str], str] = {}


def _missing(what: str) -> None:
    if MUST_HAVE:
        pytest.fail(what)
    pytest.skip(what)


def require_package(dist: str) -> str:
    """The version of a package of the suite's own venv."""
    try:
        return version(dist)
    except PackageNotFoundError:
        _missing(f"{dist} is not installed in {sys.executable} (tests/python/requirements.txt)")


def reader_python(where: str) -> Path:
    """The interpreter of a reader: `where` is a venv under the repo root (".venv-iohub") or a
    package of the suite's own venv ("bioio-ome-zarr")."""
    if not where.startswith(".venv"):
        require_package(where)
        return Path(sys.executable)
    py = REPO / where / "bin" / "python"
    if not (py.is_file() and os.access(py, os.X_OK)):
        _missing(f"{py} not found (scripts/setup.sh builds {where})")
    return py


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def ome_store(tmp_path_factory) -> Path:
    """The writers' stores (scripts/gen_ome_fixtures.py run with the suite's interpreter)."""
    for writer in ("ngff-zarr", "ome-zarr"):
        require_package(writer)
    return run_generator("gen_ome_fixtures.py", tmp_path_factory.mktemp("ome"), timeout=900)


@pytest.fixture(scope="module")
def manifest(ome_store) -> dict:
    return json.loads((ome_store / "manifest.json").read_text())


@pytest.fixture(scope="module")
def expected(ome_store, manifest, tmp_path_factory) -> dict[str, str]:
    """Every level array of the manifest, read by zarr-python from the original, as .npy
    files by array path (store path / level path); plates' stitched levels by
    "<store>/stitched/<level>"."""
    npy_dir = tmp_path_factory.mktemp("expected")
    out: dict[str, str] = {}

    def save(key: str, arr: np.ndarray) -> None:
        f = npy_dir / (key.replace("/", "__") + ".npy")
        np.save(f, arr)
        out[key] = str(f)

    for store in manifest["stores"]:
        for image in store["images"]:
            for level in image["levels"] + [lv for lb in image["labels"] for lv in lb["levels"]]:
                key = f"{store['path']}/{level}"
                save(key, zarr.open_array(ome_store / key, mode="r")[...])
        if store["kind"] == "plate":
            for i, tiles in enumerate(_stitched_tiles(ome_store, store)):
                save(f"{store['path']}/stitched/{i}", tiles)
    return out


def _stitched_tiles(root: Path, store: dict) -> list[np.ndarray]:
    """The plate's levels as ome-zarr-py tiles them: rows of wells (zeros where a well is
    missing), the first field of each, side by side along x, rows stacked along y."""
    plate = zarr.open_group(root / store["path"], mode="r").attrs["ome"]["plate"]
    rows = [r["name"] for r in plate["rows"]]
    cols = [c["name"] for c in plate["columns"]]
    fields = {img["path"].rpartition("/")[0]: img for img in store["images"]}
    first = next(iter(fields.values()))
    levels = []
    for i in range(len(first["levels"])):
        def tile(well: str) -> np.ndarray:
            template = zarr.open_array(root / store["path"] / first["levels"][i], mode="r")
            if well not in fields:
                return np.zeros(template.shape, template.dtype)
            return zarr.open_array(root / store["path"] / fields[well]["levels"][i], mode="r")[...]
        grid = [np.concatenate([tile(f"{r}/{c}") for c in cols], axis=-1) for r in rows]
        levels.append(np.concatenate(grid, axis=-2))
    return levels


def _mount(tmp_path_factory, source: Path, view: str, extra: list[str] | None = None) -> Mount:
    m = Mount(source, tmp_path_factory.mktemp(f"mnt-ome-{view}"), view=view, read_only=True,
              extra_args=extra)
    return m.start()


@pytest.fixture(scope="module")
def views(zarr_mount_bin, ome_store, tmp_path_factory):
    """One read-only mount of the stores per view, started on first use."""
    mounts: dict[tuple, Mount] = {}

    def get(view: str, *extra: str) -> Mount:
        key = (view, *extra)
        if key not in mounts:
            mounts[key] = _mount(tmp_path_factory, ome_store, view, list(extra))
        mounts[key].check_alive()
        return mounts[key]

    yield get
    for m in mounts.values():
        m.stop_checked()


# --------------------------------------------------------------------------- reader runs


def expected_space(original: Path, version: str) -> tuple[list[str], list[list[dict]]]:
    """The axes and per-level transformations a 0.4 reader should report for an image, from
    the writer's metadata: 0.5 has them in 0.4 form; 0.6 names the axes in the coordinate
    system the levels map into and gives each level one transformation, here a scale or a
    sequence of scale and translation."""
    [ms] = zarr.open_group(original, mode="r").attrs["ome"]["multiscales"]
    if version == "0.5":
        axes = ms["axes"]
        transforms = [d["coordinateTransformations"] for d in ms["datasets"]]
    else:
        transforms = []
        for d in ms["datasets"]:
            [t] = d["coordinateTransformations"]
            output = t["output"]["name"]
            transforms.append(t["transformations"] if t["type"] == "sequence" else [t])
        [system] = [s for s in ms["coordinateSystems"] if s["name"] == output]
        axes = system["axes"]
    keep = ("type", "scale", "translation")
    return ([a["name"] for a in axes],
            [[{k: v for k, v in t.items() if k in keep} for t in ts] for ts in transforms])


def jobs_for(root: Path, original: Path, manifest: dict, expected: dict[str, str],
             can: set[str]) -> list[dict]:
    """The reader's jobs for the stores mounted at `root` (`original`: the stores themselves)."""
    jobs = []
    for store in manifest["stores"]:
        sp = store["path"]
        if store["kind"] == "image":
            [image] = store["images"]
            labels = {}
            if "labels" in can:
                labels = {lb["name"]: {"path": str(root / sp / lb["path"]),
                                       "levels": [expected[f"{sp}/{lv}"] for lv in lb["levels"]]}
                          for lb in image["labels"]}
            job = {"id": sp, "kind": "image", "path": str(root / sp),
                   "levels": [expected[f"{sp}/{lv}"] for lv in image["levels"]], "labels": labels}
            if "space" in can:
                job["axes"], job["transforms"] = expected_space(original / sp, store["version"])
            jobs.append(job)
        else:
            fields = {img["path"]: [expected[f"{sp}/{lv}"] for lv in img["levels"]]
                      for img in store["images"]}
            n = len(store["images"][0]["levels"])
            stitched = [expected[f"{sp}/stitched/{i}"] for i in range(n)] if "stitched" in can else []
            jobs.append({"id": sp, "kind": "plate", "path": str(root / sp), "fields": fields,
                         "stitched": stitched})
    return jobs


def run_reader(python: Path, reader: str, jobs: list[dict], workdir: Path) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    jobs_file, results_file = workdir / "jobs.json", workdir / "results.json"
    jobs_file.write_text(json.dumps({"jobs": jobs}))
    res = subprocess.run([str(python), str(READER_SCRIPT), reader, str(jobs_file), str(results_file)],
                         capture_output=True, text=True, timeout=900)
    if res.returncode != 0 or not results_file.exists():
        raise RuntimeError(f"ome_readers.py {reader} failed ({res.returncode}):\n"
                           f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return json.loads(results_file.read_text())


def _match(table: dict, reader: str, store: str, check: str) -> str | None:
    for (r, s, c), error in table.items():
        if r == reader and fnmatch.fnmatch(store, s) and fnmatch.fnmatch(check, c):
            return error
    return None


def judge(name: str, results: dict[str, dict[str, str]], versions: dict) -> None:
    """Fail on any check that is neither ok nor a listed reader limit; xfail on a pending fix.
    `results`: {store: {check: "ok" | error}}."""
    failures, pending, lifted = [], [], []
    summary = []
    for store, checks in results.items():
        if not checks:
            failures.append(f"{store}: the reader ran no check")
        for check, result in checks.items():
            limit = _match(READER_LIMITS, name, store, check)
            fix = _match(PENDING_FIXES, name, store, check)
            known = limit or fix
            if result == "ok":
                summary.append(f"ok   {store}: {check}")
                if known:
                    lifted.append(f"{store}: {check} now reads (expected {known!r})")
            elif known and known in result:
                summary.append(f"known {store}: {check}: {known}")
                if fix:
                    pending.append(f"{store}: {check}: {result.splitlines()[0]}")
            else:
                failures.append(f"{store}: {check}: {result}")
    print(f"{name} {versions}\n" + "\n".join(summary))
    assert not failures, f"{name} ({versions}):\n" + "\n".join(failures)
    assert not lifted, "update READER_LIMITS / PENDING_FIXES:\n" + "\n".join(lifted)
    if pending:
        pytest.xfail("pending translation fixes:\n" + "\n".join(pending))


# --------------------------------------------------------------------------- tests


@pytest.mark.mount
@pytest.mark.parametrize("view", ["v2", "v2-decoded"])
@pytest.mark.parametrize("name", sorted(READERS_0_4))
def test_0_4_reader_reads_v2_view(name, view, views, ome_store, manifest, expected, tmp_path):
    reader, where, can = READERS_0_4[name]
    python = reader_python(where)
    root = views(view).path
    out = run_reader(python, reader, jobs_for(root, ome_store, manifest, expected, can), tmp_path)
    judge(name, out["results"], out["versions"])


@pytest.mark.mount
@pytest.mark.parametrize("name", sorted(READERS_0_5))
def test_0_5_reader_reads_unsharded_view(name, views, ome_store, manifest, expected, tmp_path):
    reader, where, can = READERS_0_5[name]
    python = reader_python(where)
    root = views("unsharded").path
    out = run_reader(python, reader, jobs_for(root, ome_store, manifest, expected, can), tmp_path)
    judge(name, out["results"], out["versions"])


def _ome_groups(store: dict) -> dict[str, str]:
    """Every OME group of a store (path in the store -> its ome-zarr-models v04 class)."""
    if store["kind"] == "plate":
        groups = {"": "HCS"}
        groups.update({w: "Well" for w in store["plate"]["wells"]})
    else:
        groups = {}
    for image in store["images"]:
        groups[image["path"]] = "Image"
        for label in image["labels"]:
            groups[label["path"].rpartition("/")[0]] = "Labels"
            groups[label["path"]] = "ImageLabel"
    return groups


@pytest.mark.mount
def test_ome_zarr_models_validates_v2_view_as_0_4(views, manifest):
    """ome-zarr-models reads each OME group of the v2 view (attributes and arrays) as 0.4."""
    models_version = require_package("ome-zarr-models")
    from ome_zarr_models import v04

    root = views("v2").path
    results = {}
    for store in manifest["stores"]:
        checks = results.setdefault(store["path"], {})
        for path, model in _ome_groups(store).items():
            group = zarr.open_group(root / store["path"] / path, mode="r", zarr_format=2)
            try:
                getattr(v04, model).from_zarr(group)
                checks[f"{model} {path}"] = "ok"
            except Exception as e:  # noqa: BLE001 - judged below
                checks[f"{model} {path}"] = f"{type(e).__name__}: {e}"
    judge("ome-zarr-models", results, {"ome-zarr-models": models_version})


@pytest.mark.mount
@pytest.mark.parametrize("view", ["v2", "v2-decoded"])
def test_zmetadata_entries_equal_zattrs(view, views, manifest):
    """A v2 reader that opens the consolidated metadata sees the same OME attributes."""
    root = views(view).path
    seen = 0
    for zmetadata in sorted(root.rglob(".zmetadata")):
        entries = json.loads(zmetadata.read_text())["metadata"]
        for key, attrs in entries.items():
            if key.endswith(".zattrs"):
                assert json.loads((zmetadata.parent / key).read_text()) == attrs, zmetadata.parent / key
                seen += "multiscales" in attrs or "labels" in attrs or "image-label" in attrs
    # ngff-zarr consolidates its stores: their image, labels and label groups are listed.
    assert seen >= 4, f"only {seen} OME groups found in .zmetadata files under {root}"


@pytest.mark.mount
def test_v2_ome_keep_leaves_attributes(views, manifest, ome_store):
    """--v2-ome keep: every OME group's .zattrs holds the writer's attributes, `ome` and all."""
    root = views("v2", "--v2-ome", "keep").path
    groups = 0
    for store in manifest["stores"]:
        for path in _ome_groups(store):
            rel = Path(store["path"]) / path
            original = zarr.open_group(ome_store / rel, mode="r").attrs.asdict()
            shown = json.loads((root / rel / ".zattrs").read_text())
            assert "ome" in shown and shown == original, rel
            groups += 1
    assert groups, "no OME groups in the manifest"
