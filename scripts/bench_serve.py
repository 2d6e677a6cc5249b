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

    .venv/bin/python scripts/bench_serve.py --memory [--clients 64] [--file-mib 256]
        [--max-rss-mib 286] [--cache-size SIZE]

`--memory` instead: as many clients (curl) as `--clients`, each reading a different
`--file-mib` MiB `.npy` of the `flat` view whole, all at once. The store is small on disk: each
array is one value (its index + 1) in chunks of one row block as wide as the array, zstd; one
chunk file is written and hard-linked under every other chunk key, and the flat view decodes
them as the clients read. Reported: the seconds, the bytes each client got (must be the file's
size, status 200), a few ranges of each file checked against the value, and the server's peak
RSS (VmHWM), which must stay below `--max-rss-mib` (exit status 1 otherwise). The last line is
the result as JSON.
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


def write_flat_store(root: Path, arrays: int, file_mib: int) -> tuple[int, int]:
    """`arrays` uint8 arrays a00, a01... of `file_mib` MiB each under the group `root`, array i
    all i + 1, each one shard file of 1 MiB chunks (one row block as wide as the array, zstd).
    zarr-python writes the metadata; the shard is put together here from one encoded chunk
    (zarr-python would encode every chunk of it: a second per array). Returns (rows, columns)."""
    import crc32c
    import numcodecs

    cols = 16384
    rows = file_mib * 2**20 // cols
    block = 64  # rows a chunk: 1 MiB, what the server reads a body's piece with
    n = rows // block
    zarr.open_group(root, mode="w", zarr_format=3)
    for i in range(arrays):
        a = zarr.create_array(root / f"a{i:02d}", shape=(rows, cols), chunks=(block, cols),
                              shards=(rows, cols), dtype="uint8", fill_value=0,
                              compressors=zarr.codecs.ZstdCodec(level=3))
        chunk = numcodecs.Zstd(level=3).encode(np.full((block, cols), i + 1, dtype="uint8"))
        index = np.array([(k * len(chunk), len(chunk)) for k in range(n)], dtype="<u8").tobytes()
        shard = root / f"a{i:02d}" / "c" / "0" / "0"
        shard.parent.mkdir(parents=True)
        shard.write_bytes(chunk * n + index + crc32c.crc32c(index).to_bytes(4, "little"))
        if i == 0:  # what zarr-python reads there
            assert (a[::block, :: cols - 1] == 1).all()
    return rows, cols


def flat_memory(args) -> int:
    """--memory: many clients, each reading a different large .npy of the flat view at once."""
    import urllib.request

    from zm_serve import Server

    curl = shutil.which("curl")
    if curl is None:
        print("bench_serve.py: curl is not installed", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-serve-memory-") as tmp:
        tmp = Path(tmp)
        t0 = time.monotonic()
        rows, cols = write_flat_store(tmp / "flat.zarr", args.clients, args.file_mib)
        made = time.monotonic() - t0
        serve_args = ["--view", "flat"] + (["--cache-size", args.cache_size] if args.cache_size else [])
        server = Server(tmp / "flat.zarr", tmp / "serve.log", args=serve_args).start()
        try:
            names = [f"a{i:02d}.npy" for i in range(args.clients)]
            with urllib.request.urlopen(f"{server.url}flat/{names[0]}") as r:
                size = int(r.headers["Content-Length"])
            print(f"# {args.clients} clients (curl), each reading a different {size / 2**20:.0f} MiB "
                  f".npy of the flat view ({rows}x{cols} uint8, chunks 64x{cols}, zstd) at once; "
                  f"store made in {made:.1f} s; serve {' '.join(serve_args)}; {os.cpu_count()} cores",
                  flush=True)
            t0 = time.monotonic()
            clients = [subprocess.Popen([curl, "-sS", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                                         f"{server.url}flat/{n}"], stdout=subprocess.PIPE, text=True)
                       for n in names]
            got = [c.communicate(timeout=1800)[0].split() for c in clients]
            secs = time.monotonic() - t0
            rss = peak_rss_mib(server.proc.pid)
            alive = server.proc.poll() is None
            bad = [(n, g) for n, g in zip(names, got) if g != ["200", str(size)]]
            # the bytes: the header parses, and ranges of the data hold the array's value
            t1 = time.monotonic()
            wrong = []
            for i, n in enumerate(names):
                for start in (0, size // 2, size - 4096):
                    req = urllib.request.Request(f"{server.url}flat/{n}",
                                                 headers={"Range": f"bytes={start}-{start + 4095}"})
                    with urllib.request.urlopen(req) as r:
                        body = r.read()
                    if start == 0:
                        hlen = 10 + int.from_bytes(body[8:10], "little")
                        ok = body[:6] == b"\x93NUMPY" and set(body[hlen:]) == {i + 1}
                    else:
                        ok = len(body) == 4096 and set(body) == {i + 1}
                    if not ok:
                        wrong.append((n, start))
            checked = time.monotonic() - t1
        finally:
            t1 = time.monotonic()
            server.stop()
            stopped = time.monotonic() - t1
    total = args.clients * size
    print(f"read {total / 2**30:.1f} GiB in {secs:.1f} s ({total / secs / 2**30:.2f} GiB/s); "
          f"answers not 200 or short: {len(bad)}; ranges with other bytes: {len(wrong)}", flush=True)
    print(f"ranges checked in {checked:.1f} s, server stopped in {stopped:.1f} s", flush=True)
    print(f"serve peak RSS (VmHWM): {rss:.1f} MiB (bound {args.max_rss_mib} MiB: "
          f"{'met' if rss < args.max_rss_mib else 'NOT met'})", flush=True)
    print(json.dumps({"clients": args.clients, "file_bytes": size, "seconds": round(secs, 2),
                      "peak_rss_mib": round(rss, 1), "bad": bad, "wrong": wrong, "alive": alive}))
    return 0 if not bad and not wrong and alive and rss < args.max_rss_mib else 1


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
    ap.add_argument("--memory", action="store_true",
                    help="instead: many clients reading different large .npy files of the flat view")
    ap.add_argument("--clients", type=int, default=64, help="--memory: clients, one file each")
    ap.add_argument("--file-mib", type=int, default=256, help="--memory: each file's size")
    ap.add_argument("--max-rss-mib", type=float, default=286, help="--memory: exit 1 at or above (286 MiB: 300 MB)")
    ap.add_argument("--cache-size", help="--memory: serve's --cache-size (default: its own)")
    args = ap.parse_args()
    if args.memory:
        os.environ["ZARR_MOUNT_BIN"] = args.binary  # read by zm_harness at import
        return flat_memory(args)
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
