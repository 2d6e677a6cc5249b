"""--metrics-addr: both exposition formats parse with the reference parsers of the Python
Prometheus client (the text format; OpenMetrics, which is strict: `# EOF`, counter naming,
histogram buckets), and they carry the same values. promtool's check of the text format is in
tests/it/metrics.rs."""

from __future__ import annotations

import os
import socket
import subprocess
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from zm_harness import BIN

pytestmark = pytest.mark.mount


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, accept: str | None = None) -> tuple[str, str]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
    if accept:
        req.add_header("Accept", accept)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers["Content-Type"], r.read().decode()


def _samples(families) -> dict:
    """(name, sorted labels) -> value; bucket bounds as numbers (`1` and `1.0` are one bound)."""
    def labels(s):
        return tuple(sorted((k, float(v) if k == "le" else v) for k, v in s.labels.items()))
    return {(s.name, labels(s)): s.value for f in families for s in f.samples}


def test_text_and_openmetrics_parse_and_agree(mount_factory, fixtures_dir):
    port = _free_port()
    m = mount_factory(fixtures_dir, view="unsharded", read_only=True,
                      extra_args=["--metrics-addr", f"127.0.0.1:{port}"])
    files = 0
    for dirpath, _, names in os.walk(m.path):
        for n in names[:20]:  # a sample of every directory keeps the test short
            with open(os.path.join(dirpath, n), "rb") as f:
                f.read()
            files += 1
    assert files > 0
    assert not os.path.exists(m.path / "no-such-name")

    ctype, text = _get(port)
    assert ctype.startswith("text/plain; version=0.0.4"), ctype
    om_type, om = _get(port, "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;q=0.3")
    assert om_type.startswith("application/openmetrics-text; version=1.0.0"), om_type
    assert om.rstrip().endswith("# EOF")

    plain = _samples(parse_text(text))
    strict = _samples(parse_openmetrics(om))
    reads = plain[("zarr_mount_fuse_requests_total", (("op", "read"),))]
    assert reads > 0
    # The FUSE and backend series do not move between the two scrapes (nothing reads the
    # mount meanwhile); the process gauges (uptime, memory) may.
    moving = ("zarr_mount_uptime_seconds", "zarr_mount_process_resident_memory_bytes")
    stable = {k: v for k, v in plain.items() if k[0] not in moving}
    assert len(stable) > 100
    for key, value in stable.items():
        assert strict.get(key) == value, (key, value, strict.get(key))
    assert plain[("zarr_mount_fuse_request_errors_total", (("errno", "ENOENT"), ("op", "lookup")))] >= 1
    info = [k for k in plain if k[0] == "zarr_mount_build_info"]
    assert info and dict(info[0][1])["view"] == "unsharded" and dict(info[0][1])["backend"] == "local"


def test_a_taken_port_fails_the_start(fixtures_dir, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        r = subprocess.run([str(BIN), str(fixtures_dir), str(mnt), "--foreground",
                            "--metrics-addr", str(port)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 1, r
        assert "--metrics-addr" in r.stderr and "cannot listen" in r.stderr, r.stderr
    bad = subprocess.run([str(BIN), str(fixtures_dir), str(mnt), "--metrics-addr", "nowhere"],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "--metrics-addr" in bad.stderr, bad
