"""`zarr-mount serve`'s memory under many readers of large files (issue 53), in CI: 64 clients
(curl) each read a different .npy of the `flat` view whole, all at once, through
`scripts/bench_serve.py --memory` (which checks every answer's status and size and ranges of
each file's bytes). CI reads 64 MiB files with the debug build (~20 s); the benchmark's own
256 MiB files take over a minute there (BENCHMARKS.md has that run). The server streams each
body in 1 MiB pieces, so its peak RSS must not depend on the files' size: below 300 MB with
the default `--cache-size` (up to an eighth of RAM for the object cache and as much again for
the decoded-chunk cache): each client reads its file in order, so the decoded-chunk cache lets
each chunk go once the client has read its last byte (drop-behind) and holds about one chunk
(1 MiB) a client, not a cache full. Marked `load`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from zm_harness import BIN, REPO, require_tool

CLIENTS = 64
FILE_MIB = int(os.environ.get("ZM_MEMORY_FILE_MIB", "64"))
RSS_BOUND_MIB = 286  # 300 MB


@pytest.mark.load
def test_64_clients_reading_different_flat_npy_files(zarr_mount_bin, tmp_path):
    require_tool("curl")
    res = subprocess.run([sys.executable, str(REPO / "scripts" / "bench_serve.py"), "--memory",
                          "--binary", str(BIN), "--clients", str(CLIENTS), "--file-mib", str(FILE_MIB),
                          "--max-rss-mib", str(RSS_BOUND_MIB)],
                         capture_output=True, text=True, timeout=170, env=dict(os.environ, TMPDIR=str(tmp_path)))
    print(res.stdout, res.stderr)
    got = json.loads(res.stdout.splitlines()[-1])
    assert got["clients"] == CLIENTS and got["file_bytes"] > FILE_MIB * 2**20, got
    assert got["alive"] and not got["bad"] and not got["wrong"], got
    assert got["peak_rss_mib"] < RSS_BOUND_MIB, got
    assert res.returncode == 0, res.stderr
