"""The v2 and v2-decoded views read by the v2 readers people still run, each array equal to
zarr-python 3 reading the original natively:

- tensorstore's `zarr` driver, which is strict: a member of `.zarray` it does not know (such as
  a zstd `checksum`) is an error;
- zarr-python 2.18.2 on numcodecs 0.12 (.venv-zarr2-old), whose Zstd takes no `checksum`;
- zarrita 0.7 (npm, tests/js/zarrita_read.mjs).

Stores: the suite's fixture store (scripts/gen_fixtures.py) and the real-data store of
test_v2_real_data.py (zm_real_data.py). Arrays a view leaves out are found in the tree and
must each have the daemon's log line with the reason; arrays a reader cannot read by its own
documented limits (tensorstore: no filters, compressors blosc/zlib/gzip/bz2/zstd; zarrita: the
codecs its registry lists) are skipped for that reader only. Both counts, with the reasons,
are printed at the end of the run ("zarr-mount notes").
"""

from __future__ import annotations

import json
import re
import subprocess
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts

import zm_real_data
import zm_zarr2
from zarr2_reader import compare
from zm_harness import Mount, fixture_array_paths
from zm_readers import zp_read

warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")

STORES = ("fixtures", "real")
VIEWS = ("v2", "v2-decoded")
CASES = [(s, v) for s in STORES for v in VIEWS]
IDS = [f"{s}-{v}" for s, v in CASES]

# tensorstore's zarr driver (driver/zarr/schema.yml): `filters` must be null; these compressors.
TS_COMPRESSORS = {"blosc", "zlib", "gzip", "bz2", "zstd"}
# numpy kinds tensorstore has no data type for.
TS_NO_KINDS = {"M": "datetime64", "m": "timedelta64", "O": "object", "U": "fixed-length unicode"}
# zarrita 0.7 (util.js coerceDtype) on node 20 (no Float16Array): the v2 dtypes it reads.
ZARRITA_DTYPES = re.compile(r"^(\|b1|[<>|][iu][1248]|[<>]f[48]|[<>|][SU]\d+|\|O)$")
LEFT_OUT_LINE = re.compile(r'array left out of the v2 view\s+array="(?P<path>[^"]*)"\s+reason=(?P<reason>.*)$')


# --------------------------------------------------------------------------- stores and mounts


@pytest.fixture(scope="module")
def real_store(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    root = tmp_path_factory.mktemp("real-data")
    return root, zm_real_data.write_store(root)


@pytest.fixture(scope="module")
def originals(fixtures_dir, real_store) -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    """Each store's root and its arrays as zarr-python 3 reads them natively."""
    fixtures = {p: zp_read(fixtures_dir, p) for p in fixture_array_paths()}
    return {"fixtures": (fixtures_dir, fixtures), "real": real_store}


@pytest.fixture(scope="module")
def mounts(originals, tmp_path_factory, zarr_mount_bin):
    """mounts(store, view): that store mounted read-only with that view, once per module."""
    started: dict[tuple[str, str], Mount] = {}

    def get(store: str, view: str) -> Mount:
        if (store, view) not in started:
            m = Mount(originals[store][0], tmp_path_factory.mktemp(f"mnt-{store}-{view}"), view=view,
                      read_only=True)
            started[(store, view)] = m.start()
        return started[(store, view)]

    yield get
    for m in started.values():
        m.stop_checked()


def shown_arrays(m: Mount, arrays: dict[str, np.ndarray], store: str, view: str, note) -> dict[str, dict]:
    """The .zarray of every array the view shows. Arrays it leaves out need the daemon's log
    line; they are counted, with the reasons, in the run's notes."""
    shown = {p: json.loads((m.path / p / ".zarray").read_text()) for p in arrays if (m.path / p / ".zarray").exists()}
    reasons = {}
    for line in m.log_text(tail=None).splitlines():
        hit = LEFT_OUT_LINE.search(line)
        if hit:
            reasons[hit["path"].strip("/")] = hit["reason"]
    left_out = sorted(set(arrays) - set(shown))
    assert not [p for p in left_out if p not in reasons], f"left out without a log line: {left_out}"
    if (store, view) not in NOTED:
        NOTED.add((store, view))
        note(f"{view} view of the {store} store: {len(shown)} of {len(arrays)} arrays shown, "
             f"{len(left_out)} left out" + "".join(f"\n    {p}: {reasons[p]}" for p in left_out))
    return shown


NOTED: set[tuple[str, str]] = set()


def fixed_bytes(zarray: dict) -> str | None:
    """tensorstore and zarrita fail on the fixed-length bytes arrays zarr-python 3 writes as v2
    itself (tensorstore: a fill value shorter than the item size, b"zz" for |S3 is "eno=";
    zarrita 0.7.5: RangeError): not the view's doing."""
    if np.dtype(zarray["dtype"]).kind == "S":
        return "fixed-length bytes (fails on zarr-python 3's own v2 arrays too)"
    return None


def report(reader: str, store: str, view: str, read: list[str], skipped: dict[str, str], note) -> None:
    by_reason = Counter(skipped.values())
    note(f"{reader} on the {view} view of the {store} store: {len(read)} arrays read equal, "
         f"{len(skipped)} outside its documented limits"
         + "".join(f"\n    {n} x {why}" for why, n in sorted(by_reason.items())))


# --------------------------------------------------------------------------- tensorstore


def ts_limit(zarray: dict) -> str | None:
    """Why tensorstore's zarr driver cannot read an array of this .zarray, by its documentation."""
    if zarray["filters"]:
        return "filters (the driver supports none)"
    if zarray["compressor"] and zarray["compressor"]["id"] not in TS_COMPRESSORS:
        return f"compressor {zarray['compressor']['id']}"
    kind = np.dtype(zarray["dtype"]).kind
    if kind in TS_NO_KINDS:
        return f"{TS_NO_KINDS[kind]} data type"
    return fixed_bytes(zarray)


def ts_read_v2(d: Path) -> np.ndarray:
    spec = {"driver": "zarr", "kvstore": {"driver": "file", "path": f"{d}/"}, "open": True}
    return ts.open(spec, read=True).result().read().result()


@pytest.mark.mount
@pytest.mark.parametrize("store,view", CASES, ids=IDS)
def test_tensorstore_reads_every_array(store, view, originals, mounts, note):
    arrays = originals[store][1]
    m = mounts(store, view)
    read, skipped, problems = [], {}, []
    for p, zarray in shown_arrays(m, arrays, store, view, note).items():
        why = ts_limit(zarray)
        if why:
            skipped[p] = why
            continue
        try:
            compare(ts_read_v2(m.path / p), arrays[p])
            read.append(p)
        except Exception as e:  # noqa: BLE001 - every array's problem is listed
            problems.append(f"{p}: {type(e).__name__}: {e}")
    report("tensorstore", store, view, read, skipped, note)
    assert not problems, f"{len(problems)} arrays:\n" + "\n".join(problems)
    assert read, "tensorstore read no array"


# --------------------------------------------------------------------------- zarr-python 2.18.2


@pytest.mark.mount
@pytest.mark.parametrize("store,view", CASES, ids=IDS)
def test_old_zarr2_reads_every_array(store, view, originals, mounts, note, zarr2_old_python, tmp_path):
    arrays = originals[store][1]
    m = mounts(store, view)
    shown = shown_arrays(m, arrays, store, view, note)
    want = zm_real_data.zarr2_expected(arrays) if store == "real" else arrays
    npy = zm_zarr2.save_expected({p: want[p] for p in shown}, tmp_path / "npy")
    jobs = [{"id": p, "kind": "array", "path": str(m.path / p), "expected": npy[p]} for p in shown]
    results = zm_zarr2.run(zarr2_old_python, jobs, tmp_path / "run")
    bad = [f"{p}: {zm_zarr2.describe_failure(r)}" for p, r in sorted(results.items()) if not r["ok"]]
    report("zarr-python 2.18.2 / numcodecs 0.12", store, view, [p for p in shown if results[p]["ok"]], {}, note)
    assert not bad, f"{len(bad)} arrays:\n" + "\n".join(bad)


# --------------------------------------------------------------------------- zarrita


def zarrita_codecs(zarrita) -> set[str]:
    res = subprocess.run([*zarrita, "--codecs"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return set(json.loads(res.stdout))


def zarrita_limit(zarray: dict, codecs: set[str]) -> str | None:
    """Why zarrita cannot read an array of this .zarray: a v2 codec id X is its codec
    numcodecs.X (fixedscaleoffset is translated); the dtypes of ZARRITA_DTYPES; JSON numbers
    are doubles in JavaScript, so an integer fill value past 2**53 is lost."""
    ids = [f["id"] for f in zarray["filters"] or []] + ([zarray["compressor"]["id"]] if zarray["compressor"] else [])
    unknown = [i for i in ids if f"numcodecs.{i}" not in codecs and i != "fixedscaleoffset"]
    if unknown:
        return f"codec {', '.join(unknown)} (not in its registry)"
    if not ZARRITA_DTYPES.match(zarray["dtype"]):
        return f"data type {np.dtype(zarray['dtype']).name}"
    fill = zarray["fill_value"]
    if isinstance(fill, int) and not isinstance(fill, bool) and abs(fill) > 2**53:
        return "integer fill value past 2**53"
    return fixed_bytes(zarray)


def from_zarrita(result: dict, want: np.ndarray) -> np.ndarray:
    """zarrita's JSON values as an array of the expected type (JSON carries no dtype)."""
    values = result["values"]
    if want.dtype.kind in "OTSU":
        got = np.empty(len(values), dtype=object)
        got[:] = [bytes(v) if isinstance(v, list) else v for v in values]
        if want.dtype.kind in "SU":
            got = got.astype(want.dtype)
    else:
        got = np.array(values, dtype=object).astype(want.dtype)
    return got.reshape(result["shape"])


@pytest.mark.mount
@pytest.mark.parametrize("store,view", CASES, ids=IDS)
def test_zarrita_reads_every_array(store, view, originals, mounts, note, zarrita):
    arrays = originals[store][1]
    m = mounts(store, view)
    codecs = zarrita_codecs(zarrita)
    shown = shown_arrays(m, arrays, store, view, note)
    skipped = {p: why for p, z in shown.items() if (why := zarrita_limit(z, codecs))}
    paths = [p for p in shown if p not in skipped]
    res = subprocess.run([*zarrita, str(m.path), "v2", *paths], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    results = json.loads(res.stdout)["results"]
    read, problems = [], []
    for p in paths:
        r = results[p]
        want = arrays[p].astype(object) if arrays[p].dtype.kind == "T" else arrays[p]
        try:
            assert r["ok"], r.get("error")
            compare(from_zarrita(r, want), want)
            read.append(p)
        except Exception as e:  # noqa: BLE001 - every array's problem is listed
            problems.append(f"{p} ({r.get('dtype')}): {type(e).__name__}: {e}")
    report("zarrita", store, view, read, skipped, note)
    assert not problems, f"{len(problems)} arrays:\n" + "\n".join(problems)
