"""Benchmarks against peer tools, measured in the same run (see scripts/bench.sh --peers):

  1. local chunk files: zarr-mount (--view raw) vs. `rclone mount` of the same directory,
     1 MiB and 4 KiB chunk files;
  2. an S3 store on a local moto server: zarr-mount vs. `rclone mount`, many small chunk files
     and a few large files;
  3. a zarr-python ZipStore archive: zarr-mount vs. `ratarmount`.

Each side reads every file once through a fresh mount, with the page cache dropped before.
The ratio printed is peer time / zarr-mount time: above 1.0 zarr-mount is faster.
"""

import argparse
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
import zarr

from bench import S3_ENV, MotoServer, drop_caches, read_tree as read_all  # same directory: shared helpers

REPO = Path(__file__).resolve().parent.parent


def mounted(mnt):
    return any(l.split()[1] == str(mnt) for l in open("/proc/self/mounts"))


class Proc:
    """A mount process (foreground), unmounted and stopped on exit."""

    def __init__(self, argv, mnt, env=None):
        self.mnt = mnt
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        deadline = time.time() + 60
        while not mounted(mnt):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{argv[0]} exited: {self.proc.stderr.read().decode()[-2000:]}")
            if time.time() > deadline:
                raise RuntimeError(f"{argv[0]} did not mount")
            time.sleep(0.05)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        subprocess.run(["fusermount3", "-u", str(self.mnt)], stderr=subprocess.DEVNULL)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if mounted(self.mnt):
            subprocess.run(["umount", "-l", str(self.mnt)])


def timed_read(make_mount, mnt):
    drop_caches()
    with make_mount():
        t = time.perf_counter()
        n = read_all(mnt)
        return time.perf_counter() - t, n


def compare(label, zm, peer, peer_name, target=None):
    (zt, zn), (pt, pn) = zm, peer
    assert zn == pn, f"{label}: zarr-mount read {zn} bytes, {peer_name} {pn}"
    ratio = pt / zt
    verdict = "" if target is None else "  (target >= %.1fx: %s)" % (target, "met" if ratio >= target else "NOT met")
    print(f"{label:44s} zarr-mount {zt:7.2f} s   {peer_name} {pt:7.2f} s   "
          f"zarr-mount {ratio:5.2f}x faster{verdict}", flush=True)


def make_files(root, count, size):
    rng = np.random.default_rng(0)
    for i in range(count):
        d = root / "c" / str(i // 100)
        d.mkdir(parents=True, exist_ok=True)
        (d / str(i % 100)).write_bytes(rng.bytes(size))


def zm(binary, source, mnt, *args, env=None):
    return lambda: Proc([binary, str(source), str(mnt), "--foreground", "--read-only", *args], mnt, env)


def bench_local_rclone(binary, work):
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    for count, size, label in [(256, 1 << 20, "1 MiB"), (4000, 4096, "4 KiB")]:
        src = work / f"local-{count}"
        make_files(src, count, size)
        a = timed_read(zm(binary, src, mnt, "--view", "raw"), mnt)
        b = timed_read(lambda: Proc(["rclone", "mount", str(src), str(mnt), "--read-only"], mnt), mnt)
        compare(f"local dir, {count} x {label} files", a, b, "rclone", 1.5)
        shutil.rmtree(src)


def bench_s3(binary, work):
    with MotoServer(work, "bench") as s3:
        port = s3.port
        sets = {"small": (1000, 4096), "large": (8, 16 << 20)}
        env = S3_ENV
        # Upload through a writable zarr-mount of the bucket (objects need signed PUTs).
        up = work / "upload"
        up.mkdir()
        with Proc([binary, "s3://bench", str(up), "--foreground", "--view", "raw",
                   "--endpoint-url", f"http://127.0.0.1:{port}"], up, env):
            for name, (count, size) in sets.items():
                src = work / f"s3src-{name}"
                make_files(src, count, size)
                # Plain file copies: the mount refuses chmod (EPERM), which copytree's copystat does.
                for f in sorted(src.rglob("*")):
                    if f.is_file():
                        dst = up / name / f.relative_to(src)
                        dst.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(f, dst)
                shutil.rmtree(src)
        mnt = work / "mnt"
        mnt.mkdir(exist_ok=True)
        for name, (count, size) in sets.items():
            a = timed_read(zm(binary, f"s3://bench/{name}", mnt, "--view", "raw",
                              "--endpoint-url", f"http://127.0.0.1:{port}", env=env), mnt)
            remote = (f':s3,provider=Other,endpoint="http://127.0.0.1:{port}",access_key_id=test,'
                      f'secret_access_key=test,force_path_style=true:bench/{name}')
            b = timed_read(lambda: Proc(["rclone", "mount", remote, str(mnt), "--read-only"], mnt, env), mnt)
            label = f"S3 (moto), {count} x {size // 1024} KiB objects"
            compare(label, a, b, "rclone", 1.5)


def bench_zip(binary, work):
    archive = work / "data.zarr.zip"
    store = zarr.storage.ZipStore(str(archive), mode="w")
    g = zarr.open_group(store, mode="w")
    a = g.create_array("a", shape=(4096, 4096), chunks=(128, 128), dtype="float32", compressors=None)
    a[:] = np.random.default_rng(2).standard_normal((4096, 4096), dtype="float32")
    store.close()
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    ratarmount = shutil.which("ratarmount") or str(Path(sys.executable).parent / "ratarmount")
    x = timed_read(zm(binary, archive, mnt, "--view", "raw"), mnt)
    y = timed_read(lambda: Proc([ratarmount, "-f", str(archive), str(mnt)], mnt), mnt)
    compare("ZipStore zip, 1024 x 64 KiB chunks", x, y, "ratarmount")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--only", default="local,s3,zip", help="comma-separated parts: local, s3, zip")
    args = ap.parse_args()
    parts = set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="zarr-mount-peers.") as tmp:
        work = Path(tmp)
        if "local" in parts:
            bench_local_rclone(args.bin, work)
        if "s3" in parts:
            bench_s3(args.bin, work)
        if "zip" in parts:
            bench_zip(args.bin, work)


if __name__ == "__main__":
    sys.exit(main())
