"""Fixtures for the zarr-mount interop suite.

Nothing here builds the binary: it is found at $ZARR_MOUNT_BIN, default
<repo>/target/debug/zarr-mount (scripts/test.sh builds it first). Tests that need it are
skipped with a message when it is missing, unless ZM_REQUIRE_BINARY=1 (set by
scripts/test.sh), which turns that into a failure.

Binary contract used here:
    zarr-mount SOURCE MOUNTPOINT --foreground [--view raw|unsharded] [--read-only] [-v]
runs until SIGTERM/SIGINT (then unmounts and exits 0). The mount is live once MOUNTPOINT
appears in /proc/self/mounts.

Environment knobs:
    ZARR_MOUNT_BIN       path of the binary
    ZM_REQUIRE_BINARY=1  fail instead of skip when the binary is missing
    ZM_DAEMON_ARGS       extra daemon arguments (default "-v"), split on whitespace
    ZM_MOUNT_TIMEOUT     seconds to wait for the mount to go live (default 20)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from zm_harness import (  # noqa: E402
    run_generator,
    ACTIVE_MOUNTS,
    BIN,
    REPO,
    REQUIRE_BINARY,
    Mount,
)


# --------------------------------------------------------------------------- pytest hooks


def pytest_report_header(config):
    present = BIN.is_file() and os.access(BIN, os.X_OK)
    state = "found" if present else ("MISSING: mount tests will fail" if REQUIRE_BINARY
                                     else "MISSING: mount tests will be skipped")
    return [f"zarr-mount binary: {BIN} ({state})"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for m in list(ACTIVE_MOUNTS):
            rep.sections.append((f"zarr-mount log ({m.path})", m.log_text()))


def pytest_sessionfinish(session, exitstatus):
    # Last line of defence: never leave a mount or a daemon behind.
    for m in list(ACTIVE_MOUNTS):
        m.stop()


# --------------------------------------------------------------------------- fixtures


def binary_or_skip() -> Path:
    if BIN.is_file() and os.access(BIN, os.X_OK):
        if not os.path.exists("/dev/fuse"):
            pytest.fail("/dev/fuse is missing: FUSE mounts cannot work on this machine")
        return BIN
    msg = (f"zarr-mount binary not found at {BIN} (build it with `cargo build` or set ZARR_MOUNT_BIN; "
           f"scripts/test.sh does both)")
    if REQUIRE_BINARY:
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="session")
def zarr_mount_bin() -> Path:
    return binary_or_skip()


@pytest.fixture
def moto(tmp_path):
    """A moto S3 server of this test's own (zm_s3.MotoServer), stopped when it ends."""
    from zm_s3 import MotoServer

    server = MotoServer(tmp_path / "moto").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def fixtures_dir(tmp_path_factory) -> Path:
    """Fixture store generated once per session by scripts/gen_fixtures.py."""
    return run_generator("gen_fixtures.py", tmp_path_factory.mktemp("fixtures"))


@pytest.fixture(scope="session")
def manifest(fixtures_dir) -> dict:
    return json.loads((fixtures_dir / "manifest.json").read_text())


@pytest.fixture
def mount_factory(tmp_path_factory, zarr_mount_bin):
    """Start mounts for one test; all of them are stopped (checked) at teardown."""
    mounts: list[Mount] = []

    def start(source: Path, view: str | None = "unsharded", read_only: bool = False, **kw) -> Mount:
        mnt = tmp_path_factory.mktemp("mnt")
        m = Mount(source, mnt, view=view, read_only=read_only, **kw)
        mounts.append(m)
        return m.start()

    yield start
    errors = []
    for m in mounts:
        problems = m.stop()
        if problems:
            errors.append(f"{m.path}: {'; '.join(problems)}\n--- log ---\n{m.log_text()}")
    if errors:
        pytest.fail("zarr-mount teardown problems:\n" + "\n".join(errors))


def _session_mount(tmp_path_factory, source: Path, view: str):
    mnt = tmp_path_factory.mktemp(f"mnt-{view}")
    m = Mount(source, mnt, view=view, read_only=True)
    m.start()
    return m


@pytest.fixture(scope="session")
def _unsharded_session_mount(tmp_path_factory, zarr_mount_bin, fixtures_dir):
    m = _session_mount(tmp_path_factory, fixtures_dir, "unsharded")
    yield m
    m.stop_checked()


@pytest.fixture(scope="session")
def _raw_session_mount(tmp_path_factory, zarr_mount_bin, fixtures_dir):
    m = _session_mount(tmp_path_factory, fixtures_dir, "raw")
    yield m
    m.stop_checked()


@pytest.fixture
def unsharded_mount(_unsharded_session_mount) -> Mount:
    """The fixture store mounted read-only with the default (unsharded) view."""
    _unsharded_session_mount.check_alive()
    yield _unsharded_session_mount
    _unsharded_session_mount.check_alive()


@pytest.fixture
def raw_mount(_raw_session_mount) -> Mount:
    """The fixture store mounted read-only with --view raw."""
    _raw_session_mount.check_alive()
    yield _raw_session_mount
    _raw_session_mount.check_alive()


# --------------------------------------------------------------------------- issue 7: decoded and v2 views


@pytest.fixture(scope="session")
def _decoded_session_mount(tmp_path_factory, zarr_mount_bin, fixtures_dir):
    m = _session_mount(tmp_path_factory, fixtures_dir, "decoded")
    yield m
    m.stop_checked()


@pytest.fixture(scope="session")
def _v2_session_mount(tmp_path_factory, zarr_mount_bin, fixtures_dir):
    m = _session_mount(tmp_path_factory, fixtures_dir, "v2")
    yield m
    m.stop_checked()


@pytest.fixture
def decoded_mount(_decoded_session_mount) -> Mount:
    """The fixture store mounted read-only with --view decoded."""
    _decoded_session_mount.check_alive()
    yield _decoded_session_mount
    _decoded_session_mount.check_alive()


@pytest.fixture
def v2_mount(_v2_session_mount) -> Mount:
    """The fixture store mounted read-only with --view v2."""
    _v2_session_mount.check_alive()
    yield _v2_session_mount
    _v2_session_mount.check_alive()


@pytest.fixture
def store_copy(fixtures_dir, tmp_path) -> Path:
    """A private copy of the fixture store, for mounts without --read-only."""
    dst = tmp_path / "store"
    shutil.copytree(fixtures_dir, dst)
    return dst


def reader_python(venv: str, check: str, want: str, py: Path | None = None) -> Path:
    """The interpreter of a reader venv (REPO/VENV, made by scripts/setup.sh from
    tests/python/venvs/NAME.txt), once `check` (Python code printing one line) printed a line
    starting with `want`. Missing or different: a failure under ZM_REQUIRE_BINARY=1 or CI=true,
    else a skip. `py` overrides the venv's interpreter."""
    py = py or REPO / venv / "bin" / "python"
    problem = None
    if not (py.is_file() and os.access(py, os.X_OK)):
        problem = f"{venv}: no interpreter at {py}"
    else:
        res = subprocess.run([str(py), "-c", check], capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            problem = f"{venv}: {res.stderr.strip()[-500:]}"
        elif not res.stdout.strip().startswith(want):
            problem = f"{venv} has {res.stdout.strip()}, want {want}"
    if problem:
        msg = problem + f" (scripts/setup.sh builds it from tests/python/venvs/{venv.removeprefix('.venv-')}.txt)"
        if REQUIRE_BINARY or os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return py


@pytest.fixture(scope="session")
def zarr2_python() -> Path:
    """zarr-python 2 with its default dependencies only: numcodecs must not know crc32c (the
    optional package). $ZM_ZARR2_PYTHON overrides .venv-zarr2."""
    override = os.environ.get("ZM_ZARR2_PYTHON")
    return reader_python(".venv-zarr2", "import zarr, numcodecs; "
                         "assert 'crc32c' not in numcodecs.registry.codec_registry, "
                         "'the optional crc32c package is installed'; print(zarr.__version__)", "2.",
                         Path(override) if override else None)


@pytest.fixture(scope="session")
def zarr2_old_python() -> Path:
    """zarr-python 2.18.2 on numcodecs 0.12 (.venv-zarr2-old): its Zstd takes no `checksum`."""
    return reader_python(".venv-zarr2-old", "import zarr, numcodecs; "
                         "print(zarr.__version__, numcodecs.__version__)", "2.18.2 0.12.")


@pytest.fixture(scope="session")
def icechunk1_python() -> Path:
    """icechunk 1.x (.venv-icechunk1), the writer of format-1 repositories."""
    return reader_python(".venv-icechunk1", "import icechunk; print(icechunk.__version__)", "1.")


@pytest.fixture(scope="session")
def zarrita() -> list[str]:
    """The command that runs tests/js/zarrita_read.mjs (zarrita from npm, installed into
    tests/js/node_modules by scripts/setup.sh)."""
    script = REPO / "tests" / "js" / "zarrita_read.mjs"
    if not (REPO / "tests" / "js" / "node_modules" / "zarrita").is_dir() or not shutil.which("node"):
        msg = "zarrita is not installed in tests/js/node_modules (scripts/setup.sh installs it; needs node)"
        if REQUIRE_BINARY or os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return ["node", str(script)]


# --------------------------------------------------------------------------- notes


NOTES_KEY = pytest.StashKey[list]()


def pytest_configure(config):
    config.stash[NOTES_KEY] = []


@pytest.fixture(scope="session")
def note(pytestconfig):
    """note(line): a line for the end of the run's output (what a test counted or left out)."""
    return pytestconfig.stash[NOTES_KEY].append


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    notes = config.stash.get(NOTES_KEY, [])
    if notes:
        terminalreporter.section("zarr-mount notes")
        for line in notes:
            terminalreporter.write_line(line)
