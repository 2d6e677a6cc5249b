"""The wheel (maturin, bindings = "bin"): installed into a fresh venv, its `zarr_mount.mount()`
mounts the bundled sample store, zarr-python reads it through the mount, and the mount is gone
after the `with` block, also when the block raised; a bad argument raises MountError with the
daemon's one-line reason.

The wheel is built once by scripts/packages.sh (scripts/test.sh's "packages" stage), which
passes it as $ZM_WHEEL; without it these tests are skipped (ZM_REQUIRE_WHEEL=1 fails them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from zm_harness import REPO, is_mounted

WHEEL = os.environ.get("ZM_WHEEL")
SAMPLE = REPO / "examples" / "sample.zarr"

if not WHEEL:
    if os.environ.get("ZM_REQUIRE_WHEEL") == "1":
        pytest.fail("ZM_WHEEL is not set (scripts/packages.sh builds the wheel)", pytrace=False)
    pytest.skip("ZM_WHEEL is not set: scripts/packages.sh builds the wheel and runs these tests",
                allow_module_level=True)

# Run by the fresh venv's interpreter: mounts, hands the path to this suite's interpreter
# (which has zarr-python) to read, then reports what it saw as JSON.
DRIVER = r"""
import json, os, subprocess, sys
import zarr_mount
source, reader, read_code, mode = sys.argv[1:5]
report = {"binary": zarr_mount.binary()}
try:
    with zarr_mount.mount(source, view="v2" if mode == "v2" else "unsharded", read_only=True) as path:
        report["path"] = str(path)
        report["mounted"] = os.path.ismount(path)
        report["read"] = subprocess.run([reader, "-c", read_code, str(path)], check=True,
                                        capture_output=True, text=True).stdout.strip()
        if mode == "raise":
            raise KeyError("inside the block")
except KeyError as e:
    report["raised"] = str(e)
except zarr_mount.MountError as e:
    report["error"] = str(e)
    report["returncode"] = e.returncode
report["mounted_after"] = bool(report.get("path")) and os.path.ismount(report["path"])
report["dir_after"] = bool(report.get("path")) and os.path.exists(report["path"])
print(json.dumps(report))
"""

# zarr-python (this suite's venv) reads every array of the mounted sample store.
READ = r"""
import sys, zarr
g = zarr.open_group(sys.argv[1], mode="r")
print(sorted(f"{n}:{a[...].sum()}" for n, a in g.arrays()) + sorted(g.group_keys()))
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv (no system site-packages) with the wheel and nothing else."""
    root = tmp_path_factory.mktemp("wheel") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    subprocess.run([str(root / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
                    "--disable-pip-version-check", WHEEL], check=True)
    return root


def drive(venv: Path, source: Path | str, mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "ZARR_MOUNT_BIN"}
    out = subprocess.run([str(venv / "bin" / "python"), "-c", DRIVER, str(source), sys.executable,
                          READ, mode], check=True, capture_output=True, text=True, env=env,
                         timeout=120)
    return json.loads(out.stdout)


def test_wheel_puts_the_binary_on_the_venv_path(venv):
    out = subprocess.run([str(venv / "bin" / "zarr-mount"), "--version"], check=True,
                         capture_output=True, text=True)
    assert out.stdout.startswith("zarr-mount "), out.stdout
    assert "commit " in out.stdout


@pytest.mark.parametrize("mode", ["unsharded", "v2"])
def test_mount_reads_the_sample_store_and_unmounts(venv, mode):
    report = drive(venv, SAMPLE, mode)
    assert report["binary"] == str(venv / "bin" / "zarr-mount"), report
    assert report["mounted"], report
    # the reader saw the sample's arrays and groups (the same as read from the store itself)
    direct = subprocess.run([sys.executable, "-c", READ, str(SAMPLE)], check=True,
                            capture_output=True, text=True).stdout.strip()
    assert report["read"] == direct, report
    assert not report["mounted_after"] and not report["dir_after"], report


def test_mount_is_gone_after_an_exception_in_the_block(venv):
    report = drive(venv, SAMPLE, "raise")
    assert report["raised"] == "'inside the block'", report
    assert report["read"], report
    assert not report["mounted_after"] and not report["dir_after"], report
    assert not is_mounted(report["path"])


def test_bad_source_raises_the_daemons_one_line_error(venv, tmp_path):
    report = drive(venv, tmp_path / "missing.zarr", "unsharded")
    assert report["returncode"] == 2, report
    assert "missing.zarr" in report["error"] and "\n" not in report["error"], report
    assert "path" not in report
