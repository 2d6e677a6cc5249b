#!/usr/bin/env python3
"""Benchmark of `zarr-mount serve` (issue 53): chunk requests under load against the
`unsharded` view of a local sharded store, and nginx serving a local unsharded copy of the
same array (the same chunks, as plain files) as the baseline.

    .venv/bin/python scripts/bench_serve.py [--binary target/release/zarr-mount]
        [--requests 10000] [--connections 256] [--nginx-connections 16] [--shape 2048]
        [--chunk 64] [--shard 512] [--rounds 5] [--compare BINARY] [--nginx-access-log]
    .venv/bin/python scripts/bench_serve.py --s3 [--s3-server s3s-fs] [--delay-ms 20]
        [--in-flight 16] [--rounds 5] [--reader python|compiled|both]

The load generator is oha (crates.io), built once into .tools/ (scripts/lib/cargo-tool.sh).
Each run asks for chunks picked at random over the whole array. `--rounds` rounds (5), each
running every contender once, in an order that rotates from round to round; reported are
medians: errors (any answer but 200, any failed connection; must be 0), requests per second,
p50/p99 latency, the server's CPU time per request (all its threads; nginx: master and
workers), and the server's peak RSS (VmHWM) over the whole benchmark. Throughput ratio
serve/nginx at the same number of requests in flight (`--nginx-connections`), and serve at
`--connections` against nginx at `--nginx-connections`, each the median of the rounds' ratios
(a round's serve against the same round's nginx); the goal is >= 0.8. nginx runs without an
access log unless `--nginx-access-log` (serve writes one by default). `--compare BINARY`
adds another build of zarr-mount (say, of main) as a contender, at both numbers in flight.

`--s3` measures the S3 part instead: the same arrays in a bucket of a local S3 server
(`--s3-server s3s-fs` or `moto`, scripts/s3-server.sh) behind scripts/latency_proxy.py
(`--delay-ms`, 20 by default). A reader takes the array's `zarr.json` and then every chunk
file once, `--in-flight` (16) at a time, in a shuffled order, and checks each against the local
unsharded copy. Two readers (`--reader`, both by default): Python threads (each with its own
keep-alive `http.client` connection, or `open`/`read`), and examples/read_chunks.rs, compiled
(reqwest, or `std::fs::read` on tokio's blocking pool), whose own cost per file is small: on
two shared cores, the Python reader's HTTP parsing costs more than the server. Through `serve`
(`--view unsharded` of the sharded array), through `rclone serve http` of the bucket (the
unsharded copy) and through a FUSE mount (`--view unsharded`) of the sharded array. Each
contender is a fresh process (nothing cached), alternated over `--rounds` rounds, medians.
Ratios, for each reader: serve/rclone (goal >= 3) and serve/mount (goal >= 1.0) of the chunks
per second. Also the CPU time a chunk file costs the server process (all its threads) and the
reader (its HTTP client, or its open/read/close), medians.

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
import random
import signal
import socket
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
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


def nginx_conf(d: Path, port: int, root: Path, access_log: bool = False) -> Path:
    """nginx serving `root` on `port`; its access log off, or (`access_log`) on as its default
    configuration has it (the combined format, a write per request), like serve's."""
    (d / "tmp").mkdir(parents=True, exist_ok=True)
    log = f"access_log {d}/access.log combined;" if access_log else "access_log off;"
    conf = d / "nginx.conf"
    conf.write_text(f"""daemon off;
user {os.environ.get("USER", "root")};
worker_processes auto;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
    default_type application/octet-stream;
    {log}
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


class Reader:
    """`in_flight` threads taking paths from one list; `get(path) -> bytes` is the contender's
    way of reading a file (each thread keeps its own HTTP connection)."""

    def __init__(self, get, in_flight: int):
        self.get, self.in_flight = get, in_flight

    def run(self, first: str, paths: list[str], want: dict[str, bytes]) -> dict:
        """Time `first` then every path of `paths`; count the answers that are not `want`'s."""
        wrong = []
        t0, cpu0 = time.perf_counter(), time.process_time()
        self.get(first)

        def one(p):
            data = self.get(p)
            if data != want[p]:
                wrong.append(p)
            return len(data)

        with ThreadPoolExecutor(self.in_flight) as pool:
            nbytes = sum(pool.map(one, paths))
        return {"s": time.perf_counter() - t0, "bytes": nbytes, "wrong": len(wrong),
                "reader_cpu_s": time.process_time() - cpu0}


def http_getter(base: str):
    """GET base + path on a keep-alive connection of the calling thread; non-200 raises."""
    import http.client
    from urllib.parse import urlsplit

    u = urlsplit(base)
    local = threading.local()

    def get(path: str) -> bytes:
        for attempt in (0, 1):
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
            try:
                conn.request("GET", u.path.rstrip("/") + "/" + path)
                r = conn.getresponse()
                data = r.read()
            except (http.client.HTTPException, OSError):
                conn.close()
                local.conn = None
                if attempt:
                    raise
                continue  # the server closed an idle keep-alive connection: once more
            if r.status != 200:
                raise RuntimeError(f"GET {path}: {r.status} {data[:200]!r}")
            return data

    return get


def reader_binary() -> str:
    """examples/read_chunks.rs, built (release) on first use: the compiled reader."""
    subprocess.run(["cargo", "build", "--release", "--quiet", "--example", "read_chunks"],
                   cwd=REPO, check=True)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return str(target / "release" / "examples" / "read_chunks")


def file_getter(root: Path):
    def get(path: str) -> bytes:
        with open(root / path, "rb", buffering=0) as f:
            return f.read()

    return get


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{proc.args[0]} did not listen on {port}")
        time.sleep(0.05)


def bucket_of(kind: str, work: Path, arrays: Path):
    """A local S3 server holding bucket `bench` with `sharded.zarr` and `plain` (the unsharded
    copy)."""
    from bench import MotoServer
    from bench_cloud import S3sFsServer, put_objects

    if kind == "s3s-fs":
        server = S3sFsServer(work, "bench")
        shutil.copytree(arrays / "sharded.zarr", server.dir / "data" / "bench" / "sharded.zarr")
        shutil.copytree(arrays / "nginx", server.dir / "data" / "bench" / "plain")
        return server
    server = MotoServer(work, "bench")
    objects = []
    for name, prefix in (("sharded.zarr", "sharded.zarr"), ("nginx", "plain")):
        for f in sorted((arrays / name).rglob("*")):
            if f.is_file():
                objects.append((f"{prefix}/{f.relative_to(arrays / name)}", f.read_bytes()))
    put_objects(server.url, "bench", objects)
    return server


def s3_contenders(binary: str, proxy_url: str, work: Path):
    """name -> a context manager giving (`get`, pid, the array's URL or directory), each fresh."""
    from contextlib import contextmanager

    from bench import S3_ENV, Mounted
    from zm_serve import Server

    creds = {k: S3_ENV[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION")}
    source = "s3://bench/sharded.zarr"

    @contextmanager
    def serve():
        server = Server(source, work / "serve-s3.log", env=creds,
                        args=["--view", "unsharded", "--endpoint-url", proxy_url]).start()
        base = f"{server.url}unsharded/a"
        try:
            yield http_getter(base), server.proc.pid, base
        finally:
            server.stop()

    @contextmanager
    def rclone():
        port = free_port()
        remote = (f':s3,provider=Other,endpoint="{proxy_url}",access_key_id=test,'
                  f'secret_access_key=test,force_path_style=true:bench')
        proc = subprocess.Popen(["rclone", "serve", "http", remote, "--addr", f"127.0.0.1:{port}",
                                 "--read-only"], env=S3_ENV, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=open(work / "rclone.log", "ab"))
        try:
            wait_port(port, proc)
            base = f"http://127.0.0.1:{port}/plain/a"
            yield http_getter(base), proc.pid, base
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)

    @contextmanager
    def mount():
        mnt = work / "mnt"
        mnt.mkdir(exist_ok=True)
        with Mounted(binary, source, mnt, "--read-only", "--view", "unsharded", "--endpoint-url",
                     proxy_url, env=S3_ENV) as m:
            yield file_getter(mnt / "a"), m.proc.pid, str(mnt / "a")

    return {"serve (unsharded view)": serve, "rclone serve http (unsharded copy)": rclone,
            "FUSE mount (unsharded view)": mount}


def bench_s3(args, tmp: Path) -> bool:
    """The S3 part (see the module's doc); returns whether it failed."""
    from bench_cloud import Proxy

    if shutil.which("rclone") is None:
        print("bench_serve.py: rclone is not installed (apt-get install rclone; scripts/bench.sh --peers installs it)", file=sys.stderr)
        return True
    plain = tmp / "nginx" / "a"
    want = {str(f.relative_to(plain)): f.read_bytes() for f in sorted((plain / "c").rglob("*")) if f.is_file()}
    paths = sorted(want)
    random.Random(53).shuffle(paths)
    nbytes = sum(len(b) for b in want.values())
    with bucket_of(args.s3_server, tmp, tmp) as store, Proxy(store.port, args.delay_ms) as proxy:
        contenders = s3_contenders(args.binary, proxy.url, tmp)
        print(f"# S3 ({args.s3_server}) behind a {args.delay_ms:g} ms proxy: zarr.json, then "
              f"{len(paths)} chunk files ({nbytes / 1e6:.1f} MB) of a {args.shape}^2 uint16 array "
              f"(chunks {args.chunk}^2, zstd; shards {args.shard}^2 for serve and the mount), "
              f"{args.in_flight} in flight, each contender a fresh process; {args.rounds} rounds, "
              f"median; {os.cpu_count()} cores", flush=True)
        readers = ["python", "compiled"] if args.reader == "both" else [args.reader]
        if "compiled" in readers:
            compiled = reader_binary()
            listed = tmp / "paths.txt"
            listed.write_text("\n".join(["zarr.json", *paths]) + "\n")
        runs = {(name, reader): [] for reader in readers for name in contenders}
        failed = False
        names = list(contenders)
        for r in range(args.rounds):
            for reader in readers:
                for name in names[r % len(names):] + names[:r % len(names)]:  # alternate who goes first
                    try:
                        with contenders[name]() as (get, pid, source):
                            before = cpu_seconds([pid])
                            if reader == "python":
                                res = Reader(get, args.in_flight).run("zarr.json", paths, want)
                            else:
                                out = subprocess.run([compiled, source, str(plain), str(listed),
                                                      str(args.in_flight)], capture_output=True,
                                                     text=True, timeout=600)
                                if out.returncode != 0:
                                    raise RuntimeError(out.stderr.strip()[-500:])
                                res = json.loads(out.stdout)
                            res["server_cpu_s"] = cpu_seconds([pid]) - before
                            res["rss"] = peak_rss_mib(pid)
                    except Exception as e:  # noqa: BLE001 - a contender's failure is a result
                        print(f"{name}, {reader} reader: failed: {e}", flush=True)
                        failed = True
                        continue
                    failed |= res["wrong"] > 0
                    runs[(name, reader)].append(res)
        med = {}
        for (name, reader), rs in runs.items():
            if not rs:
                continue
            s = statistics.median(x["s"] for x in rs)
            med[(name, reader)] = len(paths) / s
            print(f"{name + ', ' + reader + ' reader':52s} {s:6.2f} s  {len(paths) / s:7.0f} chunks/s  {nbytes / s / 1e6:6.2f} MB/s"
                  f"  wrong {sum(x['wrong'] for x in rs)}  peak RSS {max(x['rss'] for x in rs):5.1f} MiB"
                  f"  CPU a file: server {statistics.median(x['server_cpu_s'] for x in rs) / len(paths) * 1e6:4.0f} us,"
                  f" reader {statistics.median(x['reader_cpu_s'] for x in rs) / len(paths) * 1e6:4.0f} us"
                  f"  (rounds: {', '.join('%.2f' % x['s'] for x in rs)} s)", flush=True)
        for reader in readers:
            s3_serve = med.get(("serve (unsharded view)", reader))
            for other, goal in (("rclone serve http (unsharded copy)", 3.0), ("FUSE mount (unsharded view)", 1.0)):
                if s3_serve and (other, reader) in med:
                    ratio = s3_serve / med[(other, reader)]
                    print(f"ratio serve/{other.split(' (')[0]}, {reader} reader: {ratio:.2f} (goal >= {goal:.1f}: "
                          f"{'met' if ratio >= goal else 'NOT met'})", flush=True)
        print(json.dumps({"s3": {f"{name}, {reader} reader": rs for (name, reader), rs in runs.items()}}))
    return failed


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
    ap.add_argument("--nginx-access-log", action="store_true",
                    help="nginx writes its access log, as serve does (off by default)")
    ap.add_argument("--memory", action="store_true",
                    help="instead: many clients reading different large .npy files of the flat view")
    ap.add_argument("--clients", type=int, default=64, help="--memory: clients, one file each")
    ap.add_argument("--file-mib", type=int, default=256, help="--memory: each file's size")
    ap.add_argument("--max-rss-mib", type=float, default=286, help="--memory: exit 1 at or above (286 MiB: 300 MB)")
    ap.add_argument("--cache-size", help="--memory: serve's --cache-size (default: its own)")
    ap.add_argument("--s3", action="store_true", help="the S3 part instead (see above)")
    ap.add_argument("--s3-server", choices=["s3s-fs", "moto"], default="s3s-fs")
    ap.add_argument("--delay-ms", type=float, default=20)
    ap.add_argument("--in-flight", type=int, default=16)
    ap.add_argument("--reader", choices=["python", "compiled", "both"], default="both",
                    help="--s3: the reader(s): Python threads, or examples/read_chunks.rs")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of every contender")
    ap.add_argument("--compare", metavar="BINARY",
                    help="also serve with this zarr-mount binary (e.g. a build of main), alternated")
    args = ap.parse_args()
    if args.s3:
        os.environ["ZARR_MOUNT_BIN"] = args.binary  # read by zm_harness at import
        with tempfile.TemporaryDirectory(prefix="bench-serve-s3-") as tmp:
            write_arrays(Path(tmp), args.shape, args.chunk, args.shard)
            return 1 if bench_s3(args, Path(tmp)) else 0
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
        serve_args = ["--view", "unsharded"]
        servers = {"serve": Server(tmp / "sharded.zarr", tmp / "serve.log", args=serve_args).start()}
        if args.compare:
            class Other(Server):
                @property
                def argv(self):
                    return [args.compare, *super().argv[1:]]

            servers["compare"] = Other(tmp / "sharded.zarr", tmp / "compare.log", args=serve_args).start()
        port = free_port()
        nginx = subprocess.Popen(["nginx", "-c", str(nginx_conf(tmp / "ng", port, tmp / "nginx",
                                                            args.nginx_access_log)),
                                  "-p", str(tmp / "ng")], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        failed = False
        try:
            bases = {name: f"{srv.url}unsharded/a" for name, srv in servers.items()}
            bases["nginx"] = f"http://127.0.0.1:{port}/a"
            for base in bases.values():
                wait_answers(f"{base}/zarr.json")
            pids = {name: (lambda p=srv.proc.pid: [p]) for name, srv in servers.items()}
            pids["nginx"] = lambda: [nginx.pid, *children(nginx.pid)]
            n16 = args.nginx_connections
            print(f"# {args.requests} random chunk GETs of a {args.shape}^2 uint16 array, chunks "
                  f"{args.chunk}^2 (zstd), {grid * grid} chunks, per contender and round; serve: "
                  f"shards {args.shard}^2, --view unsharded; nginx: the unsharded copy; "
                  f"{args.rounds} rounds, contenders alternated, medians; {os.cpu_count()} cores",
                  flush=True)
            # Warm all (page cache, the server's shard indexes), then measure.
            for base in bases.values():
                load(oha, base, grid, min(args.requests, 2000), 16)
            # Every build of serve also at --connections, so before and after compare there too.
            runs = ([("nginx", n16)] + [(name, n16) for name in servers]
                    + [(name, args.connections) for name in servers])
            results = {run: [] for run in runs}
            for r in range(args.rounds):
                for name, conns in runs[r % len(runs):] + runs[:r % len(runs)]:
                    results[(name, conns)].append(measured(oha, bases[name], grid, args.requests, conns,
                                                           pids[name]))
            labels = {"nginx": "nginx (unsharded copy)", "serve": "serve",
                      "compare": f"serve ({args.compare})"}
            for (name, conns), rs in results.items():
                print(f"{labels[name] + f', {conns} in flight':44s} {med(rs, 'rps'):8.0f} req/s  "
                      f"p50 {med(rs, 'p50_ms'):6.2f} ms  p99 {med(rs, 'p99_ms'):7.2f} ms  "
                      f"CPU {med(rs, 'cpu_us'):5.0f} us/request  errors {sum(x['errors'] for x in rs)}",
                      flush=True)
            rss = peak_rss_mib(servers["serve"].proc.pid)
            print(f"serve peak RSS (VmHWM): {rss:.1f} MiB", flush=True)
            ng = results[("nginx", n16)]
            for name, conns in runs[1:]:
                # Each round's ratio against the nginx run of the same round.
                ratios = [x["rps"] / n["rps"] for x, n in zip(results[(name, conns)], ng)]
                ratio = statistics.median(ratios)
                goal = f" (goal >= 0.80: {'met' if ratio >= 0.8 else 'NOT met'})" if name == "serve" else ""
                print(f"ratio {name}/nginx throughput, {conns} vs {n16} in flight: {ratio:.2f}{goal}"
                      f"  (rounds: {', '.join('%.2f' % q for q in ratios)})", flush=True)
            errors = sum(x["errors"] for rs in results.values() for x in rs)
            failed = errors > args.max_errors or any(s.proc.poll() is not None for s in servers.values())
            print(f"errors: {errors}", flush=True)
            print(json.dumps({f"{name}@{conns}": rs for (name, conns), rs in results.items()}
                             | {"peak_rss_mib": rss}))
        finally:
            for srv in servers.values():
                srv.stop()
            nginx.terminate()
            nginx.wait(timeout=10)
    return 1 if failed else 0


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (nginx's workers)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time of these processes (all their threads)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def measured(oha: str, base: str, grid: int, requests: int, connections: int, pids) -> dict:
    """`load`, with the server's CPU time per answered request."""
    before = cpu_seconds(pids())
    r = load(oha, base, grid, requests, connections)
    r["cpu_us"] = (cpu_seconds(pids()) - before) / max(r["ok"], 1) * 1e6
    return r


def med(rs: list[dict], key: str) -> float:
    return statistics.median(x[key] for x in rs)


if __name__ == "__main__":
    sys.exit(main())
