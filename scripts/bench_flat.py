#!/usr/bin/env python3
"""Benchmark of `--view flat` (issue 41): one array read whole, in order, in 1 MiB reads, as
`NAME.npy` and as `NAME.tif` (one tile per chunk) through the flat view, against the same array's chunk files read whole through
`--view decoded` (in listing order, as `cat` of every file would), on a local directory and on
S3 (moto) behind scripts/latency_proxy.py at 20 ms. Each contender on a fresh mount with the
page cache dropped (when root), alternated over rounds, best of them. Also the daemon's peak
RSS (VmHWM) of the flat read.

    .venv/bin/python scripts/bench_flat.py [--binary target/release/zarr-mount] [--rounds 3]
        [--shape 8192] [--chunk 512] [--cache-size 256M] [--local-only]

Ratios: decoded time / flat file time (above 1.0 the flat file is faster); the goal is >= 0.8.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import S3_ENV, Mounted, MotoServer, drop_caches  # noqa: E402 (same directory)
from bench_cloud import Proxy, peak_rss_mib  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
READ = 1 << 20


def read_file(path: Path) -> int:
    n = 0
    with open(path, "rb", buffering=0) as f:
        while b := f.read(READ):
            n += len(b)
    return n


def read_chunk_files(root: Path) -> int:
    n = 0
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            if name != "zarr.json":
                n += read_file(Path(dirpath) / name)
    return n


def write_array(dest, shape, chunk):
    a = zarr.create_array(dest, shape=(shape, shape), chunks=(chunk, chunk), dtype="uint16",
                          compressors=zarr.codecs.ZstdCodec(level=1))
    rng = np.random.default_rng(41)
    step = max(1, (32 << 20) // (shape * 2))  # 32 MiB of rows at a time
    for r in range(0, shape, step):
        # Compressible but not constant: a gradient with noise.
        rows = np.arange(r, min(r + step, shape), dtype="uint32")[:, None] + np.arange(shape, dtype="uint32")
        a[r:r + len(rows)] = (rows + rng.integers(0, 64, rows.shape)).astype("uint16")
    return a


# contender -> (view, the file read whole; None: every chunk file)
CONTENDERS = {"decoded": ("decoded", None), "npy": ("flat", "array.npy"),
              "tif": ("flat", "array.tif")}


def run(binary, source, env, extra, work, rounds, label):
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    times = {name: [] for name in CONTENDERS}
    rss = {name: [] for name in CONTENDERS}
    nbytes = {}
    for _ in range(rounds):
        for name, (view, file) in CONTENDERS.items():
            drop_caches()
            with Mounted(binary, source, mnt, "--view", view, *extra, env=env) as m:
                t = time.perf_counter()
                nbytes[name] = read_file(mnt / file) if file else read_chunk_files(mnt)
                times[name].append(time.perf_counter() - t)
                rss[name].append(peak_rss_mib(m))
    best = {name: min(t) for name, t in times.items()}
    dec = best["decoded"]
    line = f"{label:10s} decoded chunk files {nbytes['decoded'] / dec / 1e6:8.1f} MB/s ({dec:6.2f} s)"
    for name in ("npy", "tif"):
        line += (f"   .{name} {nbytes[name] / best[name] / 1e6:8.1f} MB/s ({best[name]:6.2f} s, "
                 f"ratio {dec / best[name]:5.2f}, peak RSS {max(rss[name]):7.1f} MiB)")
    print(line + "   (goal: ratio >= 0.80)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default=str(REPO / "target" / "release" / "zarr-mount"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--shape", type=int, default=8192)
    p.add_argument("--chunk", type=int, default=512)
    p.add_argument("--cache-size", default="256M")
    p.add_argument("--delay-ms", type=float, default=20.0)
    p.add_argument("--local-only", action="store_true", help="skip S3 (e.g. for the memory figure of a large array)")
    args = p.parse_args()
    extra = ["--cache-size", args.cache_size]
    print(f"uint16 {args.shape} x {args.shape} ({args.shape ** 2 * 2 / 2 ** 20:.0f} MiB), chunks "
          f"{args.chunk} x {args.chunk}, zstd; {READ >> 20} MiB reads; best of {args.rounds}; "
          f"{args.binary}; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="bench-flat-") as tmp:
        work = Path(tmp)
        local = work / "arr.zarr"
        write_array(str(local), args.shape, args.chunk)
        run(args.binary, local, None, ["--read-only", *extra], work, args.rounds, "local")
        if args.local_only:
            return
        with MotoServer(work, "bench") as s3:
            from obstore.store import S3Store

            store = S3Store("bench", prefix="arr.zarr", endpoint=s3.url, access_key_id="test",
                            secret_access_key="test", region="us-east-1",
                            virtual_hosted_style_request=False, client_options={"allow_http": True})
            write_array(zarr.storage.ObjectStore(store), args.shape, args.chunk)
            with Proxy(s3.port, args.delay_ms) as proxy:
                s3_extra = ["--read-only", "--endpoint-url", proxy.url, *extra]
                run(args.binary, "s3://bench/arr.zarr", S3_ENV, s3_extra, work, args.rounds,
                    f"s3 {args.delay_ms:.0f} ms")


if __name__ == "__main__":
    main()
