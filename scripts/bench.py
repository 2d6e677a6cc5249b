"""Benchmarks with baselines measured in the same run (see scripts/bench.sh).

  1. chunk files of a local store: read every file directly vs. through the mount (--view raw),
     cold (page cache dropped before each side) and warm (second read).
  2. zarr-python reading a whole sharded array through the unsharded view vs. natively.
  3. the same over S3 (moto on 127.0.0.1, its own process): zarr-python through a mount of
     s3://bucket/array vs. zarr-python with its own S3 store (obstore), each from a fresh
     start; the array is written by zarr-python through obstore.

Prints one line per measurement and a ratio (mount throughput / baseline throughput:
higher is better, 1.0 = as fast as the baseline).
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import zarr


def drop_caches():
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def read_tree(root: Path):
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(dirpath, f), "rb", buffering=0) as fh:
                while True:
                    b = fh.read(1 << 20)
                    if not b:
                        break
                    total += len(b)
    return total


class Mounted:
    """A foreground zarr-mount, stopped with SIGTERM on exit. With `log`, its stderr (where the
    final `--stats-interval` counters go) is written to that file."""

    def __init__(self, binary, source, mnt, *args, log=None, env=None):
        self.mnt = mnt
        self.log = open(log, "wb") if log else subprocess.DEVNULL
        self.proc = subprocess.Popen([binary, str(source), str(mnt), "--foreground", *args],
                                     stdout=subprocess.DEVNULL, stderr=self.log, env=env)
        deadline = time.time() + 20
        while not any(l.split()[1] == str(mnt) for l in open("/proc/self/mounts")):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("mount did not come up")
            time.sleep(0.02)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)])
        if self.log is not subprocess.DEVNULL:
            self.log.close()


def timed(fn, repeat=1):
    best = None
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        best = dt if best is None else min(best, dt)
    return best


def report(name, base_s, mount_s, nbytes, target=None):
    ratio = base_s / mount_s
    verdict = "" if target is None else ("  (target >= %.2f: %s)" % (target, "met" if ratio >= target else "NOT met"))
    print(f"{name:48s} baseline {nbytes / base_s / 1e6:9.1f} MB/s  mount {nbytes / mount_s / 1e6:9.1f} MB/s"
          f"  ratio {ratio:5.2f}{verdict}", flush=True)


def make_files(root: Path, count: int, size: int):
    rng = np.random.default_rng(0)
    for i in range(count):
        d = root / "c" / str(i // 100)
        d.mkdir(parents=True, exist_ok=True)
        (d / str(i % 100)).write_bytes(rng.bytes(size))


EXTRA = []  # --mount-args: extra zarr-mount flags for every mount (e.g. "--fuse-threads 4")


def bench_files(binary, work: Path, count, size, label):
    src = work / f"files-{label}"
    make_files(src, count, size)
    nbytes = count * size
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    with Mounted(binary, src, mnt, "--view", "raw", "--read-only", "--metadata-ttl", "60", *EXTRA):
        can_drop = drop_caches()
        base_cold = timed(lambda: read_tree(src))
        drop_caches()
        mount_cold = timed(lambda: read_tree(mnt))
        if can_drop:
            report(f"read {count} x {label} files, cold", base_cold, mount_cold, nbytes, 0.5)
        else:
            print("cannot drop the page cache (not root?): cold numbers skipped")
        base_warm = timed(lambda: read_tree(src), 3)
        mount_warm = timed(lambda: read_tree(mnt), 3)
        report(f"read {count} x {label} files, warm", base_warm, mount_warm, nbytes, 0.9)
    shutil.rmtree(src)


def bench_zarr(binary, work: Path, shape, chunks, shards):
    src = work / "sharded.zarr"
    a = zarr.create_array(str(src), shape=shape, chunks=chunks, shards=shards, dtype="float32",
                          compressors=zarr.codecs.ZstdCodec(level=1))
    ref = np.random.default_rng(1).standard_normal(shape, dtype="float32")
    a[:] = ref
    nbytes = a.nbytes
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    with Mounted(binary, src, mnt, "--read-only", "--metadata-ttl", "60", *EXTRA):
        assert np.array_equal(zarr.open_array(str(mnt), mode="r")[:], ref)
        drop_caches()
        base_cold = timed(lambda: zarr.open_array(str(src), mode="r")[:])
        drop_caches()
        mount_cold = timed(lambda: zarr.open_array(str(mnt), mode="r")[:])
        label = f"zarr-python whole array {shape} chunks {chunks} shards {shards}"
        report(label + ", cold", base_cold, mount_cold, nbytes)
        base = timed(lambda: zarr.open_array(str(src), mode="r")[:], 3)
        mount = timed(lambda: zarr.open_array(str(mnt), mode="r")[:], 3)
        report(label + ", warm", base, mount, nbytes, 0.8)
    # What any unsharded view can reach at best: zarr-python reading the same chunks stored as
    # plain unsharded files on the local disk (one file per chunk, no FUSE at all).
    plain = work / "unsharded.zarr"
    b = zarr.create_array(str(plain), shape=shape, chunks=chunks, dtype="float32",
                          compressors=zarr.codecs.ZstdCodec(level=1))
    b[:] = ref
    ceiling = timed(lambda: zarr.open_array(str(plain), mode="r")[:], 3)
    report(label + ", ceiling: unsharded copy on disk vs native", base, ceiling, nbytes)
    report(label + ", mount vs unsharded copy on disk", ceiling, mount, nbytes)
    shutil.rmtree(src)
    shutil.rmtree(plain)


REPO = Path(__file__).resolve().parent.parent
S3_ENV = dict(os.environ, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_REGION="us-east-1")
S3_ENV.pop("AWS_CA_BUNDLE", None)


class MotoServer:
    """moto (scripts/s3-server.sh) on 127.0.0.1 in a process of its own, stopped on exit, with
    `bucket` created."""

    def __init__(self, work: Path, bucket: str):
        self.port = free_port()
        self.dir = work / f"moto-{self.port}"
        self.dir.mkdir()
        self.url = f"http://127.0.0.1:{self.port}"
        subprocess.run([str(REPO / "scripts" / "s3-server.sh"), "start", str(self.dir), str(self.port)],
                       check=True, stdout=subprocess.DEVNULL)
        # moto accepts an unsigned bucket creation.
        urllib.request.urlopen(urllib.request.Request(f"{self.url}/{bucket}", method="PUT")).read()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        subprocess.run([str(REPO / "scripts" / "s3-server.sh"), "stop", str(self.dir)], stdout=subprocess.DEVNULL)


def bench_zarr_s3(binary, work: Path, shape, chunks, shards, repeat=3):
    from obstore.store import S3Store

    with MotoServer(work, "bench") as s3:
        def native_store(read_only):
            s = S3Store("bench", prefix="arr.zarr", endpoint=s3.url, access_key_id="test",
                        secret_access_key="test", region="us-east-1", virtual_hosted_style_request=False,
                        client_options={"allow_http": True})
            return zarr.storage.ObjectStore(s, read_only=read_only)

        a = zarr.create_array(native_store(False), shape=shape, chunks=chunks, shards=shards, dtype="float32",
                              compressors=zarr.codecs.ZstdCodec(level=1))
        ref = np.random.default_rng(3).standard_normal(shape, dtype="float32")
        a[:] = ref
        mnt = work / "mnt"
        mnt.mkdir(exist_ok=True)

        def read_checked(store):
            # Both sides pay for the same comparison.
            assert np.array_equal(zarr.open_array(store, mode="r")[:], ref)

        def through_fresh_mount():
            # A fresh daemon each time: nothing cached in it or in the kernel. Only the read is
            # timed; start-up (which sends no request: the first lookup does) is shown apart.
            t = time.perf_counter()
            with Mounted(binary, "s3://bench/arr.zarr", mnt, "--read-only", "--endpoint-url", s3.url,
                         *EXTRA, env=S3_ENV):
                startup.append(time.perf_counter() - t)
                took.append(timed(lambda: read_checked(str(mnt))))

        startup, took = [], []
        base = timed(lambda: read_checked(native_store(True)), repeat)
        for _ in range(repeat):
            through_fresh_mount()
        label = f"zarr-python S3 {shape} chunks {chunks} shards {shards}"
        report(label + ", fresh", base, min(took), ref.nbytes, 1.0)
        print(f"{'':48s} (mount start-up, not in the ratio: {min(startup) * 1000:.0f} ms)")
        with Mounted(binary, "s3://bench/arr.zarr", mnt, "--read-only", "--endpoint-url", s3.url,
                     "--metadata-ttl", "60", *EXTRA, env=S3_ENV):
            read_checked(str(mnt))
            warm = timed(lambda: read_checked(str(mnt)), repeat)
        report(label + ", mount warm (2nd read) vs native", base, warm, ref.nbytes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--quick", action="store_true", help="smaller data, for a smoke run")
    ap.add_argument("--mount-args", default="", help="extra zarr-mount flags, e.g. '--fuse-threads 4'")
    ap.add_argument("--only", default="files,zarr,zarr-s3", help="comma-separated parts: files, zarr, zarr-s3")
    args = ap.parse_args()
    EXTRA.extend(args.mount_args.split())
    parts = set(args.only.split(","))
    scale = 4 if args.quick else 1
    with tempfile.TemporaryDirectory(prefix="zarr-mount-bench.") as tmp:
        work = Path(tmp)
        if "files" in parts:
            bench_files(args.bin, work, 256 // scale, 1 << 20, "1MiB")
            bench_files(args.bin, work, 10000 // scale, 4096, "4KiB")
        if "zarr" in parts:
            bench_zarr(args.bin, work, (4096 // scale, 4096), (256, 256), (1024, 1024))
            bench_zarr(args.bin, work, (2048 // scale, 2048), (64, 64), (512, 512))
        if "zarr-s3" in parts:
            bench_zarr_s3(args.bin, work, (4096 // scale, 4096), (256, 256), (1024, 1024))
            bench_zarr_s3(args.bin, work, (2048 // scale, 2048), (64, 64), (512, 512))


if __name__ == "__main__":
    sys.exit(main())
