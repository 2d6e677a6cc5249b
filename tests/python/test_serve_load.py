"""`zarr-mount serve` under load (issue 53), in CI with the debug build: wrk (Debian) holds 256
connections open and sends 10,000 GETs of chunks picked at random over a sharded array,
through the `unsharded` view (each answer cut from a shard). Every answer must be a 200 with
the chunk's bytes length, no connection may fail, and the server's peak RSS (VmHWM) must stay
below the bound docs/SERVING.md states. Marked `load` (`-m "not load"` leaves it out).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr

from zm_harness import require_tool
from zm_serve import Server

CONNECTIONS = 256
REQUESTS = 10_000
THREADS = 2
# docs/SERVING.md, Operations: the bound on the server's memory under this load.
RSS_BOUND_MIB = 100
SHAPE, CHUNK, SHARD = 1024, 32, 256
GRID = SHAPE // CHUNK

# Each thread sends GETs of random chunk keys and stops after its share of answers; the last
# thread to stop (each appends a line to a file) interrupts wrk (SIGINT), which ends the run
# (wrk itself only ends at its duration) and calls `done`: it prints the totals as one JSON
# line. wrk counts an answer other than 2xx/3xx in errors.status.
SCRIPT = """
local grid = %(grid)d
local share = %(share)d
local base = "%(base)s"
local finished = "%(finished)s"
local threads = {}
seen, bad = 0, 0

function setup(thread)
    table.insert(threads, thread)
    thread:set("id", #threads)
end

function init(args)
    math.randomseed(os.time() * 100 + id)
end

function request()
    return wrk.format("GET", base .. "/c/" .. math.random(0, grid - 1) .. "/" .. math.random(0, grid - 1))
end

function response(status, headers, body)
    seen = seen + 1
    if status ~= 200 or tonumber(headers["Content-Length"] or headers["content-length"]) ~= #body then
        bad = bad + 1
    end
    if seen == share then
        wrk.thread:stop()
        local f = io.open(finished, "a")
        f:write("done\\n")
        f:close()
        local n = 0
        for _ in io.lines(finished) do n = n + 1 end
        if n == %(threads)d then
            local pid = io.open("/proc/self/stat"):read("*n")
            -- (not os.execute: system(3) ignores SIGINT in wrk while kill runs)
            io.popen("kill -INT " .. pid):close()
        end
    end
end

function done(summary, latency, requests)
    local e = summary.errors
    local answers, wrong = 0, 0
    for _, t in ipairs(threads) do
        answers = answers + t:get("seen")
        wrong = wrong + t:get("bad")
    end
    io.write(string.format('ZM {"requests": %%d, "answers": %%d, "wrong": %%d, "connect": %%d, ' ..
        '"read": %%d, "write": %%d, "status": %%d, "timeout": %%d, "p99_ms": %%.2f, "rps": %%.0f}\\n',
        summary.requests, answers, wrong, e.connect, e.read, e.write, e.status, e.timeout,
        latency:percentile(99) / 1000, summary.requests / (summary.duration / 1e6)))
end
"""


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM for {pid}")


@pytest.mark.load
def test_256_connections_10000_chunk_requests(tmp_path, zarr_mount_bin):
    wrk = require_tool("wrk")
    rng = np.random.default_rng(53)
    data = rng.integers(0, 4096, (SHAPE, SHAPE), dtype="uint16")
    a = zarr.create_array(tmp_path / "store.zarr" / "a", shape=data.shape, chunks=(CHUNK, CHUNK),
                          shards=(SHARD, SHARD), dtype="uint16",
                          compressors=zarr.codecs.ZstdCodec(level=1))
    a[...] = data

    server = Server(tmp_path / "store.zarr", tmp_path / "serve.log",
                    args=["--view", "unsharded", "--max-connections", str(CONNECTIONS)]).start()
    try:
        base = f"{server.url}unsharded/a"
        script = tmp_path / "chunks.lua"
        script.write_text(SCRIPT % {"grid": GRID, "share": REQUESTS // THREADS, "threads": THREADS,
                                    "base": "/unsharded/a", "finished": tmp_path / "finished"})
        # the run ends when every thread has its share; the duration only bounds a hung one
        res = subprocess.run([wrk, "-t", str(THREADS), "-c", str(CONNECTIONS), "-d", "120s",
                              "--timeout", "30s", "-s", str(script), base],
                             capture_output=True, text=True, timeout=180)
        assert res.returncode == 0, res.stderr
        [line] = [ln for ln in res.stdout.splitlines() if ln.startswith("ZM ")]
        got = json.loads(line[3:])
        print(res.stdout)
        assert server.proc.poll() is None, server.log_text()
        rss = peak_rss_mib(server.proc.pid)
    finally:
        server.stop()
    assert got["answers"] >= REQUESTS, got
    errors = {k: got[k] for k in ("wrong", "connect", "read", "write", "status", "timeout")}
    assert not any(errors.values()), got
    assert rss < RSS_BOUND_MIB, f"peak RSS {rss:.1f} MiB >= {RSS_BOUND_MIB} MiB"
    print(f"peak RSS {rss:.1f} MiB, {got}")
