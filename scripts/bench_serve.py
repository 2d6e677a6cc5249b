#!/usr/bin/env python3
"""Benchmark of `zarr-mount serve` (issue 53): chunk requests under load against the
`unsharded` view of a local sharded store, and nginx serving a local unsharded copy of the
same array (the same chunks, as plain files) as the baseline.

    .venv/bin/python scripts/bench_serve.py [--binary target/release/zarr-mount]
        [--requests 10000] [--connections 256] [--nginx-connections 16] [--shape 2048]
        [--chunk 64] [--shard 512]

The load generator is oha (crates.io), built once into .tools/ (scripts/lib/cargo-tool.sh).
Each run asks for chunks picked at random over the whole array. Reported: errors (any
answer but 200, any failed connection; must be 0), requests per second, p50/p99 latency, and
the server's peak RSS (VmHWM) over the whole benchmark. Throughput ratio serve/nginx at the
same number of requests in flight (`--nginx-connections`), and serve at `--connections`
against nginx at `--nginx-connections`; the goal is >= 0.8.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "python"))
OHA_VERSION = "1.16.0"


def oha_binary() -> str:
    tools = REPO / ".tools"
    bin_ = tools / f"oha-{OHA_VERSION}" / "bin" / "oha"
    if not bin_.exists():
        subprocess.run(["bash", "-c", 'source "$1/scripts/lib/cargo-tool.sh" && cargo_install oha "$2" "$3" 6',
                        "_", str(REPO), OHA_VERSION, str(bin_)],
                       env=dict(os.environ, TOOLS=str(tools), SCRIPT="bench_serve.py"), check=True)
    return str(bin_)


def write_arrays(root: Path, shape: int, chunk: int, shard: int) -> None:
    rng = np.random.default_rng(53)
    data = (np.arange(shape, dtype="uint32")[:, None] + np.arange(shape, dtype="uint32")
            + rng.integers(0, 64, (shape, shape))).astype("uint16")
    zstd = zarr.codecs.ZstdCodec(level=1)
    sharded = zarr.create_array(root / "sharded.zarr" / "a", shape=data.shape, chunks=(chunk, chunk),
                                shards=(shard, shard), dtype="uint16", compressors=zstd)
    sharded[...] = data
    plain = zarr.create_array(root / "nginx" / "a", shape=data.shape, chunks=(chunk, chunk),
                              dtype="uint16", compressors=zstd)
    plain[...] = data


def nginx_conf(d: Path, port: int, root: Path) -> Path:
    (d / "tmp").mkdir(parents=True, exist_ok=True)
    conf = d / "nginx.conf"
    conf.write_text(f"""daemon off;
user {os.environ.get("USER", "root")};
worker_processes auto;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
    default_type application/octet-stream;
    access_log off;
    client_body_temp_path {d}/tmp;
    proxy_temp_path {d}/tmp;
    fastcgi_temp_path {d}/tmp;
    uwsgi_temp_path {d}/tmp;
    scgi_temp_path {d}/tmp;
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
}}
""")
    return conf


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_answers(url: str, timeout: float = 20) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                r.read()
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def load(oha: str, base: str, grid: int, requests: int, connections: int) -> dict:
    """oha over random chunk keys c/I/J of the array at base (I, J < grid)."""
    digits = "|".join(str(i) for i in range(grid))
    url = f"{base}/c/({digits})/({digits})"
    res = subprocess.run([oha, "-n", str(requests), "-c", str(connections), "--no-tui",
                          "--output-format", "json", "--rand-regex-url", url],
                         capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        raise RuntimeError(f"oha failed: {res.stderr[-2000:]}")
    out = json.loads(res.stdout)
    status = out.get("statusCodeDistribution", {})
    errors = sum(out.get("errorDistribution", {}).values()) + sum(n for s, n in status.items() if s != "200")
    pct = out["latencyPercentiles"]
    return {"rps": out["summary"]["requestsPerSec"], "errors": errors, "ok": status.get("200", 0),
            "p50_ms": pct["p50"] * 1000, "p99_ms": pct["p99"] * 1000,
            "mb_s": out["summary"].get("sizePerSec", 0) / 1e6}


def peak_rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def line(name: str, r: dict) -> None:
    print(f"{name:44s} {r['rps']:8.0f} req/s  {r['mb_s']:7.1f} MB/s  p50 {r['p50_ms']:6.2f} ms"
          f"  p99 {r['p99_ms']:7.2f} ms  errors {r['errors']}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=str(REPO / "target" / "release" / "zarr-mount"))
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--connections", type=int, default=256)
    ap.add_argument("--nginx-connections", type=int, default=16)
    ap.add_argument("--shape", type=int, default=2048)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--shard", type=int, default=512)
    ap.add_argument("--max-errors", type=int, default=0, help="exit 1 above this many errors")
    args = ap.parse_args()
    if shutil.which("nginx") is None:
        print("bench_serve.py: nginx is not installed (apt-get install nginx-light)", file=sys.stderr)
        return 2
    oha = oha_binary()
    grid = args.shape // args.chunk
    os.environ["ZARR_MOUNT_BIN"] = args.binary  # read by zm_harness at import
    from zm_serve import Server

    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        tmp = Path(tmp)
        write_arrays(tmp, args.shape, args.chunk, args.shard)
        server = Server(tmp / "sharded.zarr", tmp / "serve.log", args=["--view", "unsharded"]).start()
        port = free_port()
        nginx = subprocess.Popen(["nginx", "-c", str(nginx_conf(tmp / "ng", port, tmp / "nginx")),
                                  "-p", str(tmp / "ng")], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        failed = False
        try:
            serve_base = f"{server.url}unsharded/a"
            nginx_base = f"http://127.0.0.1:{port}/a"
            wait_answers(f"{serve_base}/zarr.json")
            wait_answers(f"{nginx_base}/zarr.json")
            print(f"# {args.requests} random chunk GETs of a {args.shape}^2 uint16 array, chunks "
                  f"{args.chunk}^2 (zstd), {grid * grid} chunks; serve: shards {args.shard}^2, "
                  f"--view unsharded; nginx: the unsharded copy; {os.cpu_count()} cores", flush=True)
            # Warm both (page cache, the server's shard indexes), then measure.
            load(oha, serve_base, grid, min(args.requests, 2000), 16)
            load(oha, nginx_base, grid, min(args.requests, 2000), 16)
            ng = load(oha, nginx_base, grid, args.requests, args.nginx_connections)
            line(f"nginx, {args.nginx_connections} in flight", ng)
            s16 = load(oha, serve_base, grid, args.requests, args.nginx_connections)
            line(f"serve, {args.nginx_connections} in flight", s16)
            s = load(oha, serve_base, grid, args.requests, args.connections)
            line(f"serve, {args.connections} in flight", s)
            rss = peak_rss_mib(server.proc.pid)
            print(f"serve peak RSS (VmHWM): {rss:.1f} MiB", flush=True)
            for name, r in [(f"{args.nginx_connections} vs {args.nginx_connections}", s16),
                            (f"{args.connections} vs {args.nginx_connections}", s)]:
                ratio = r["rps"] / ng["rps"]
                print(f"ratio serve/nginx throughput, {name} in flight: {ratio:.2f} "
                      f"(goal >= 0.80: {'met' if ratio >= 0.8 else 'NOT met'})", flush=True)
            errors = ng["errors"] + s16["errors"] + s["errors"]
            failed = errors > args.max_errors or server.proc.poll() is not None
            print(f"errors: {errors}", flush=True)
            print(json.dumps({"nginx": ng, "serve_same": s16, "serve": s, "peak_rss_mib": rss}))
        finally:
            server.stop()
            nginx.terminate()
            nginx.wait(timeout=10)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
