"""Scale benchmarks (see scripts/bench.sh), each with a baseline or a limit measured in the same run:

  4. listing: `ls -l` and `find` over one directory of 100,000 keys, through a fresh mount of a
     local directory and of an S3 bucket (moto on 127.0.0.1). Prints seconds, the FUSE
     requests the daemon answered (its --stats-interval counters) and, for S3, the HTTP requests
     the server received, next to the same command on the directory itself / a plain paginated
     listing with boto3.
  11. walk (only with --only walk): `find` and `ls -lR` of 1,000,000 keys in a local tree, twice;
     the daemon's RSS after each walk and the inodes it holds. walk-s3 (only with --only walk-s3):
     the same over 200,000 keys in a moto bucket.
  4b. listing-s3s (only with --only listing-s3s): time to the first entry, `ls -l` and `find` of
     100,000 keys on s3s-fs (objects are files: the keys are made in its data directory).
  4c. listing-garage (only with --only listing-garage): the same on Garage, whose listings are
     indexed, at 0 and 20 ms of added latency (builds Garage once, ~30 min on 2 cores).
  5. memory: peak RSS (VmHWM) of the daemon while reading 4 GiB through the mount, local and
     S3, against the limit --cache-size + a small constant.

The S3 server is moto's own ThreadedMotoServer, started inside this process: the same server
as scripts/s3-server.sh runs, but keys can be put into it directly (100,000 PUTs over HTTP
take moto several minutes), and its request log can be counted.
"""

import argparse
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from bench import S3_ENV, Mounted, drop_caches, free_port, read_tree  # same directory: shared helpers

MiB = 1 << 20
# What a daemon may use beyond its object cache: binary, threads, read-ahead buffers, FUSE
# buffers, the metadata cache of the files read. Chosen once; the benchmark prints the figure.
RSS_ALLOWANCE = 160 * MiB


# ---- the S3 server ----

# The key scripts/s3-server.sh imports into Garage (its key ids are "GK" and 24 hex digits).
GARAGE_KEY_ID = "GK0123456789abcdef01234567"
GARAGE_SECRET = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

class S3Server:
    """moto on 127.0.0.1 in a thread of this process; counts the requests it answers."""

    LINE = re.compile(r'(GET|PUT|HEAD|POST|DELETE) (/\S*) HTTP')

    def __init__(self):
        from moto.server import ThreadedMotoServer

        self.counts = Counter()
        self.lock = threading.Lock()
        server = self

        class Count(logging.Handler):
            def emit(self, record):
                m = S3Server.LINE.search(record.getMessage())
                if m:
                    method, target = m.groups()
                    kind = "LIST" if method == "GET" and ("list-type=" in target or "delimiter=" in target) else method
                    with server.lock:
                        server.counts[kind] += 1

        log = logging.getLogger("werkzeug")
        log.setLevel(logging.INFO)
        log.propagate = False
        log.handlers = [Count()]
        self.port = free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_REGION="us-east-1")
        self.env.pop("AWS_CA_BUNDLE", None)
        self.client = self._client()
        self.client.create_bucket(Bucket="bench")
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.s3.models import s3_backends

        self.backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]

    def _client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.url, aws_access_key_id="test",
                            aws_secret_access_key="test", region_name="us-east-1")

    def put(self, key, data):
        """Straight into moto's backend: no HTTP request."""
        self.backend.put_object("bench", key, data)

    def take_counts(self):
        with self.lock:
            c = dict(self.counts)
            self.counts.clear()
        return c

    def stop(self):
        self.server.stop()


# ---- measuring a daemon ----

def fuse_counts(log_path):
    """The daemon's last stats line (written at unmount): total and per-op FUSE requests."""
    last = None
    for line in Path(log_path).read_text(errors="replace").splitlines():
        if " stats " in line and "requests=" in line:
            last = line
    if last is None:
        return None, ""
    total = int(re.search(r"requests=(\d+)", last).group(1))
    ops = re.search(r'ops="([^"]*)"', last)
    return total, ops.group(1) if ops else ""


def hwm_bytes(pid):
    """Peak resident set size of a process (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def run(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def fmt_counts(c):
    return " ".join(f"{k}={v}" for k, v in sorted(c.items())) or "none"


# ---- 4. listing ----

LIST_COMMANDS = {"ls -l": ["ls", "-l", "--color=never"], "find": ["find"]}

# Time from opendir to the first name, in a fresh process (what `ls | head -1` waits for).
FIRST_ENTRY = """
import os, sys, time
t = time.perf_counter()
with os.scandir(sys.argv[1]) as it:
    next(it)
print(time.perf_counter() - t)
"""


def first_entry(path):
    out = subprocess.run([sys.executable, "-c", FIRST_ENTRY, str(path)], check=True,
                         capture_output=True, text=True).stdout
    return float(out)


def bench_listing_local(binary, work, count):
    src = work / "list-local"
    flat = src / "flat"
    flat.mkdir(parents=True)
    for i in range(count):
        (flat / str(i)).write_bytes(b"0123456789abcdef")
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    log = work / "daemon.log"
    for name, cmd in LIST_COMMANDS.items():
        # Best of 3 on both sides, as the baseline always was: each mount run on a fresh mount
        # (the kernel's dentries and attributes gone), all three shown.
        base = min(run([*cmd, str(flat)]) for _ in range(3))
        runs = []
        for _ in range(3):
            with Mounted(binary, src, mnt, "--view", "raw", "--read-only", "--stats-interval", "3600", log=log):
                runs.append(run([*cmd, str(mnt / "flat")]))
        took = min(runs)
        total, ops = fuse_counts(log)
        each = "/".join(f"{t:.2f}" for t in runs)
        print(f"{name + ' over ' + format(count, ',') + ' keys, local':40s} mount {took:6.2f} s   directly {base:6.2f} s"
              f"   ratio {base / took:5.2f}   mount runs {each} s   FUSE requests {total} ({ops})", flush=True)
    base = min(first_entry(flat) for _ in range(3))
    with Mounted(binary, src, mnt, "--view", "raw", "--read-only", log=log):
        took = first_entry(mnt / "flat")
    print(f"{'first entry of ' + format(count, ',') + ' keys, local':40s} mount {took * 1000:6.1f} ms  directly {base * 1000:6.1f} ms",
          flush=True)
    subprocess.run(["rm", "-rf", str(src)])


def bench_listing_s3(binary, work, s3, count):
    for i in range(count):
        s3.put(f"list/flat/{i}", b"0123456789abcdef")
    s3.take_counts()
    t = time.perf_counter()
    pages = s3.client.get_paginator("list_objects_v2").paginate(Bucket="bench", Prefix="list/flat/", Delimiter="/")
    n = sum(len(p.get("Contents", [])) for p in pages)
    base = time.perf_counter() - t
    assert n == count, (n, count)
    base_counts = s3.take_counts()
    print(f"{'boto3 paginated listing, ' + format(count, ',') + ' keys':40s} {base:6.2f} s   S3 requests {fmt_counts(base_counts)}",
          flush=True)
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    log = work / "daemon.log"
    # What one page costs the server: the floor for the first entry through the mount.
    t = time.perf_counter()
    page = s3.client.list_objects_v2(Bucket="bench", Prefix="list/flat/", Delimiter="/", MaxKeys=1000)
    one_page = time.perf_counter() - t
    assert len(page["Contents"]) == 1000
    s3.take_counts()
    with Mounted(binary, "s3://bench/list", mnt, "--view", "raw", "--read-only", "--endpoint-url", s3.url,
                 log=log, env=s3.env):
        s3.take_counts()
        took = first_entry(mnt / "flat")
        sent = s3.take_counts()
    print(f"{'first entry of ' + format(count, ',') + ' keys, S3':40s} mount {took * 1000:6.1f} ms  boto3, one page of 1,000"
          f" {one_page * 1000:6.1f} ms   S3 requests {fmt_counts(sent)}", flush=True)
    if os.environ.get("BENCH_SCALE_FIRST_ONLY"):
        return
    for name, cmd in LIST_COMMANDS.items():
        with Mounted(binary, "s3://bench/list", mnt, "--view", "raw", "--read-only", "--stats-interval", "3600",
                     "--endpoint-url", s3.url, log=log, env=s3.env):
            s3.take_counts()  # the mount's own start-up requests are not part of the command
            took = run([*cmd, str(mnt / "flat")])
            sent = s3.take_counts()
        total, ops = fuse_counts(log)
        print(f"{name + ' over ' + format(count, ',') + ' keys, S3':40s} mount {took:6.2f} s   boto3 listing {base:6.2f} s"
              f"   ratio {base / took:5.2f}   S3 requests {fmt_counts(sent)}   FUSE requests {total} ({ops})",
              flush=True)


def bench_listing_s3s(binary, work, count):
    """Time to the first entry on S3 with `count` keys in one prefix, on s3s-fs (objects are
    files, so the keys are made directly in its data directory; moto answers every LIST page
    of a large bucket in time proportional to the bucket, see BENCHMARKS.md "Listing 100,000 keys")."""
    import boto3

    root = Path(__file__).resolve().parent.parent
    script = root / "scripts" / "s3-server.sh"
    sdir = work / "s3s"
    flat = sdir / "data" / "bench" / "list" / "flat"
    flat.mkdir(parents=True)
    for i in range(count):
        (flat / str(i)).write_bytes(b"0123456789abcdef")
    port = free_port()
    env = dict(os.environ, S3S_LOG="s3s=warn")
    subprocess.run([str(script), "start", str(sdir), str(port), "s3s-fs"], check=True, env=env)
    try:
        url = f"http://127.0.0.1:{port}"
        client = boto3.client("s3", endpoint_url=url, aws_access_key_id="test",
                              aws_secret_access_key="test", region_name="us-east-1")
        t = time.perf_counter()
        page = client.list_objects_v2(Bucket="bench", Prefix="list/flat/", Delimiter="/", MaxKeys=1000)
        one_page = time.perf_counter() - t
        assert len(page["Contents"]) == 1000, len(page["Contents"])
        mnt = work / "mnt"
        mnt.mkdir(exist_ok=True)
        log = work / "daemon.log"
        for run_no in range(3):
            with Mounted(binary, "s3://bench/list", mnt, "--view", "raw", "--read-only", "--endpoint-url", url,
                         log=log, env=S3_ENV):
                took = first_entry(mnt / "flat")
            print(f"{'first entry of ' + format(count, ',') + ' keys, s3s-fs':40s} mount {took * 1000:6.1f} ms  boto3, one page of 1,000"
                  f" {one_page * 1000:6.1f} ms", flush=True)
        if os.environ.get("BENCH_SCALE_FIRST_ONLY"):
            return
        for name, cmd in LIST_COMMANDS.items():
            with Mounted(binary, "s3://bench/list", mnt, "--view", "raw", "--read-only", "--stats-interval", "3600",
                         "--endpoint-url", url, log=log, env=S3_ENV):
                took = run([*cmd, str(mnt / "flat")])
            total, ops = fuse_counts(log)
            print(f"{name + ' over ' + format(count, ',') + ' keys, s3s-fs':40s} mount {took:6.2f} s"
                  f"   FUSE requests {total} ({ops})", flush=True)
    finally:
        subprocess.run([str(script), "stop", str(sdir)], check=False)
        subprocess.run(["rm", "-rf", str(sdir)])


def bench_listing_garage(binary, work, count):
    """Time to the first entry, `ls -l` and `find` of `count` keys in one prefix on Garage
    (scripts/s3-server.sh, kind garage): an S3 server whose listings are indexed, so a page
    costs about the same whatever the bucket holds, as on AWS. moto, s3s-fs and s3rver scan
    the whole prefix for every page (seconds per page at 100,000 keys), which hides what the
    mount itself adds. Measured at 0 and 20 ms of added latency (scripts/latency_proxy.py),
    each mount fresh, best of 3 on both sides."""
    import boto3
    from concurrent.futures import ThreadPoolExecutor

    from bench_cloud import Proxy

    script = Path(__file__).resolve().parent / "s3-server.sh"
    sdir = work / "garage"
    port = free_port()
    subprocess.run([str(script), "start", str(sdir), str(port), "garage"], check=True)
    try:
        env = dict(os.environ, AWS_ACCESS_KEY_ID=GARAGE_KEY_ID, AWS_SECRET_ACCESS_KEY=GARAGE_SECRET,
                   AWS_REGION="us-east-1")
        env.pop("AWS_CA_BUNDLE", None)

        def client(url):
            return boto3.client("s3", endpoint_url=url, aws_access_key_id=GARAGE_KEY_ID,
                                aws_secret_access_key=GARAGE_SECRET, region_name="us-east-1")

        direct = client(f"http://127.0.0.1:{port}")
        t = time.perf_counter()
        body = b"0123456789abcdef"
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: direct.put_object(Bucket="bench", Key=f"list/flat/{i}", Body=body),
                          range(count)))
        print(f"garage: {count:,} keys put in {time.perf_counter() - t:.0f} s", flush=True)
        mnt = work / "mnt"
        mnt.mkdir(exist_ok=True)
        log = work / "daemon.log"
        what = format(count, ",") + " keys, garage"
        for delay in (0, 20):
            with Proxy(port, delay) as proxy:
                c = client(proxy.url)
                c.list_objects_v2(Bucket="bench", Prefix="list/", Delimiter="/", MaxKeys=1)  # connect
                pages = []
                for _ in range(3):
                    t = time.perf_counter()
                    page = c.list_objects_v2(Bucket="bench", Prefix="list/flat/", Delimiter="/", MaxKeys=1000)
                    pages.append(time.perf_counter() - t)
                    assert len(page["Contents"]) == 1000, len(page["Contents"])
                runs = []
                for _ in range(3):
                    with Mounted(binary, "s3://bench/list", mnt, "--view", "raw", "--read-only",
                                 "--endpoint-url", proxy.url, log=log, env=env):
                        runs.append(first_entry(mnt / "flat"))
                each = "/".join(f"{r * 1000:.1f}" for r in runs)
                print(f"{'first entry of ' + what + f', {delay} ms':40s} mount {min(runs) * 1000:6.1f} ms"
                      f"  boto3, one page of 1,000 {min(pages) * 1000:6.1f} ms   mount runs {each} ms", flush=True)
                if os.environ.get("BENCH_SCALE_FIRST_ONLY"):
                    continue
                t = time.perf_counter()
                listed = c.get_paginator("list_objects_v2").paginate(Bucket="bench", Prefix="list/flat/", Delimiter="/")
                assert sum(len(p.get("Contents", [])) for p in listed) == count
                base = time.perf_counter() - t
                for name, cmd in LIST_COMMANDS.items():
                    with Mounted(binary, "s3://bench/list", mnt, "--view", "raw", "--read-only",
                                 "--stats-interval", "3600", "--endpoint-url", proxy.url, log=log, env=env):
                        took = run([*cmd, str(mnt / "flat")])
                    total, ops = fuse_counts(log)
                    print(f"{name + ' over ' + what + f', {delay} ms':40s} mount {took:6.2f} s"
                          f"   boto3 paginated listing {base:6.2f} s   ratio {base / took:5.2f}"
                          f"   FUSE requests {total} ({ops})", flush=True)
    finally:
        subprocess.run([str(script), "stop", str(sdir)], check=False)
        subprocess.run(["rm", "-rf", str(sdir)])


# ---- 11. walking many keys ----

def rss_bytes(pid):
    """Resident set size of a process now (VmRSS), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def known_inodes(port):
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    m = re.search(r"^zarr_mount_known_inodes (\S+)$", text, re.M)
    return int(float(m.group(1)))


def bench_walk(binary, work, keys, extra):
    """`find`, then `ls -lR`, over a local tree of `keys` empty files (1,000 per directory),
    twice, as tests/it/scale.rs does at CI size: the daemon's RSS after each walk, its peak,
    the inodes it holds and, once the kernel dropped its dentries, the inodes left."""
    src = work / "walk"
    made = None
    for d, k in walk_keys(keys):
        if d != made:
            (src / d).mkdir(parents=True)
            made = d
        (src / d / k).touch()
    try:
        walk_twice(binary, work, keys, extra, src)
    finally:
        subprocess.run(["rm", "-rf", str(src)])


def bench_walk_s3(binary, work, s3, keys, extra):
    """The walk of `bench_walk` over an S3 bucket (moto): the same tree of keys, put straight
    into moto's backend, mounted read-only."""
    for d, k in walk_keys(keys):
        s3.put(f"walk/{d}/{k}", b"")
    walk_twice(binary, work, keys, ["--read-only", "--endpoint-url", s3.url, *extra], "s3://bench/walk", env=s3.env)


def walk_keys(keys):
    """The walk's tree: (directory, file name) for `keys` files, 1,000 per directory."""
    per_dir = 1000
    for i in range(keys):
        yield f"d{i // per_dir}", f"key{i % per_dir}"


def walk_twice(binary, work, keys, extra, source, env=None):
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    port = free_port()
    with Mounted(binary, source, mnt, "--view", "raw", "--metrics-addr", f"127.0.0.1:{port}", *extra, env=env) as m:
        pid = m.proc.pid
        print(f"walk of {keys:,} keys in {source}, options {' '.join(extra) or '(defaults)'}: idle RSS"
              f" {rss_bytes(pid) / MiB:.0f} MiB", flush=True)
        for round in (1, 2):
            t = time.perf_counter()
            out = subprocess.run(["find", str(mnt), "-type", "f"], check=True, capture_output=True).stdout
            assert out.count(b"\n") == keys, out.count(b"\n")
            find_s = time.perf_counter() - t
            run(["ls", "-lR", str(mnt)])
            took = time.perf_counter() - t
            rss, held = rss_bytes(pid), known_inodes(port)
            # Dentries and inodes only (as tests/it/scale.rs): the kernel sends its FORGETs.
            Path("/proc/sys/vm/drop_caches").write_text("2\n")
            deadline = time.time() + 30
            after = known_inodes(port)
            while after >= keys // 100 and time.time() < deadline:
                time.sleep(0.2)
                after = known_inodes(port)
            print(f"  walk {round}: {took:6.1f} s (find {find_s:5.1f} s)   RSS {rss / MiB:5.0f} MiB"
                  f" (peak {hwm_bytes(pid) / MiB:.0f} MiB)   inodes {held:,}, after the kernel dropped"
                  f" its caches {after:,} (RSS then {rss_bytes(pid) / MiB:.0f} MiB)", flush=True)


# ---- 5. memory ----

def report_rss(label, pid, idle, nbytes, took, cache):
    peak = hwm_bytes(pid)
    limit = cache + RSS_ALLOWANCE
    verdict = "met" if peak <= limit else "NOT met"
    print(f"{label:40s} read {nbytes / 2**30:5.2f} GiB in {took:6.1f} s   peak RSS {peak / MiB:7.1f} MiB"
          f" (idle {idle / MiB:5.1f} MiB)   limit --cache-size {cache // MiB} MiB + {RSS_ALLOWANCE // MiB} MiB"
          f" = {limit / MiB:.0f} MiB: {verdict}", flush=True)


def bench_rss_local(binary, work, total):
    src = work / "rss-local"
    src.mkdir()
    block = os.urandom(64 * MiB)
    nfiles = 4
    for i in range(nfiles):
        with open(src / f"big{i}", "wb") as f:
            for _ in range(total // nfiles // len(block)):
                f.write(block)
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    drop_caches()
    with Mounted(binary, src, mnt, "--view", "raw", "--read-only") as m:
        idle = hwm_bytes(m.proc.pid)
        t = time.perf_counter()
        n = read_tree(mnt)
        took = time.perf_counter() - t
        report_rss(f"local dir, {nfiles} large files", m.proc.pid, idle, n, took, 0)
    subprocess.run(["rm", "-rf", str(src)])


def bench_rss_s3(binary, work, s3, total, cache):
    # Half in 1 MiB objects (cached whole, up to --cache-size), half in objects too large to
    # cache (ranged reads with read-ahead).
    block = os.urandom(MiB)
    small = total // 2 // MiB
    for i in range(small):
        s3.put(f"rss/small/{i}", i.to_bytes(8, "little") + block[8:])
    big = 256 * MiB if total >= 2 << 30 else 64 * MiB
    blob = os.urandom(big)
    for i in range(total // 2 // big):
        s3.put(f"rss/big/{i}", blob)
    del blob
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    with Mounted(binary, "s3://bench/rss", mnt, "--view", "raw", "--read-only", "--cache-size", f"{cache // MiB}M",
                 "--endpoint-url", s3.url, env=s3.env) as m:
        idle = hwm_bytes(m.proc.pid)
        t = time.perf_counter()
        n = read_tree(mnt)
        took = time.perf_counter() - t
        report_rss(f"S3, {small} x 1 MiB + {total // 2 // big} x {big // MiB} MiB", m.proc.pid, idle, n, took, cache)
    for key in list(s3.backend.get_bucket("bench").keys.keys()):
        if key.startswith("rss/"):
            s3.backend.delete_object("bench", key)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--quick", action="store_true", help="smaller data, for a smoke run")
    ap.add_argument("--only", default="listing,rss",
                    help="comma-separated parts: listing (= listing-local,listing-s3), rss, walk, walk-s3 and "
                         "listing-s3s (these three not in the default)")
    ap.add_argument("--walk-keys", type=int, default=1_000_000, help="keys of the `walk` part")
    ap.add_argument("--walk-s3-keys", type=int, default=200_000, help="keys of the `walk-s3` part (moto)")
    ap.add_argument("--walk-option", action="append", default=[],
                    help="an option for the walk's mount, e.g. --walk-option=--metadata-cache-entries=1000")
    args = ap.parse_args()
    parts = set(args.only.split(","))
    if "listing" in parts:
        parts |= {"listing-local", "listing-s3"}
    keys = 10_000 if args.quick else 100_000
    rss_total = (512 * MiB) if args.quick else (4 << 30)
    cache = (64 * MiB) if args.quick else (256 * MiB)
    with tempfile.TemporaryDirectory(prefix="zarr-mount-bench-scale.") as tmp:
        work = Path(tmp)
        if "walk" in parts:
            bench_walk(args.bin, work, args.walk_keys, args.walk_option)
        if "listing-local" in parts:
            bench_listing_local(args.bin, work, keys)
        if "listing-s3s" in parts:
            bench_listing_s3s(args.bin, work, keys)
        if "listing-garage" in parts:
            bench_listing_garage(args.bin, work, keys)
        if not parts & {"listing-s3", "rss", "walk-s3"}:
            return
        s3 = S3Server()
        try:
            if "listing-s3" in parts:
                bench_listing_s3(args.bin, work, s3, keys)
            if "walk-s3" in parts:
                bench_walk_s3(args.bin, work, s3, args.walk_s3_keys, args.walk_option)
            if "rss" in parts:
                bench_rss_local(args.bin, work, rss_total)
                bench_rss_s3(args.bin, work, s3, rss_total, cache)
        finally:
            s3.stop()


if __name__ == "__main__":
    sys.exit(main())
