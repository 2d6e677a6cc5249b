"""Cloud-like benchmarks (see scripts/bench.sh --cloud): a local moto S3 server behind
scripts/latency_proxy.py, which holds back the first bytes of every answer for DELAY ms (0 and
20 by default: loopback, and about what a VM sees from S3 in its own region). Every figure is
measured at each delay, in one run, against a baseline measured the same way:

  1. files: N x 1 MiB objects. Local disk read of the same files (the baseline of the warm
     cache); a fresh mount without a disk cache; a fresh mount with an empty --cache-dir
     (first mount, cold cache: should be no slower than without); a second fresh mount on the
     now warm --cache-dir. Page cache dropped before each; three rounds of all four, best of
     3 for each.
  2. zarr-python whole-array read of a sharded array: zarr-python's own obstore S3 store
     (through the same proxy) vs. a second fresh mount on a warm --cache-dir, raw and default
     view, with zarr-python on a local copy as the ceiling (see bench_zarr).
  3. one large object read sequentially (`cat`-like 1 MiB reads) through a fresh mount without
     a cache vs. a single-stream GET of it through the same proxy. --big-server s3s-fs serves it
     from s3s-fs instead of moto: s3s-fs reads each range from a file, where moto answers every
     ranged GET from one in-memory copy of the whole object (which penalises many part GETs).
  4. peak RSS (VmHWM) of the daemon with and without the disk cache in 1. and 3.
  6. (part `chunks`) an unsharded array of 64 chunks (SHAPE x SHAPE float32, 256 x 256 chunks)
     read whole, no disk cache, each contender on a fresh mount, alternated over rounds
     (medians): zarr-python 3 through the raw and default views and zarr-python 2 (v2 array,
     raw view, from .venv-zarr2 when present), each with --array-prefetch 0 and its default,
     against zarr-python 3's obstore store (see bench_chunks).
  7. (part `goals`) the four goals of issue #40 on one sharded 4096 x 4096 float32 array, each
     contender on a fresh mount, alternated over rounds (medians): zarr-python 2 through the
     v2 view against it on a local unsharded v2 copy; zarr-python 3 through the default view
     against a local unsharded copy, through the raw view against obstore and `rclone mount`,
     and on a warm --cache-dir remount past the metadata TTL against a local copy, with the
     object bytes that remount received (see bench_goals).
  5. `rclone mount` of the same S3 prefix through the same proxy (its defaults: no VFS cache,
     chunked ranged reads), a fresh mount and a cold page cache, in 1. and 3., when `rclone` is
     on PATH (scripts/bench.sh --cloud installs it); ratios vs rclone are printed in the same run.

Ratios: baseline time / mount time (above 1.0 the mount is faster).
"""

import argparse
import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import zarr

from bench import S3_ENV, Mounted, MotoServer, drop_caches, free_port, read_tree, timed  # same directory
from bench_peers import Proc  # same directory

REPO = Path(__file__).resolve().parent.parent


class Proxy:
    """scripts/latency_proxy.py in front of `target`, stopped on exit."""

    def __init__(self, target: int, delay_ms: float, conn_mbps: float = 0.0):
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "scripts" / "latency_proxy.py"), "--target", str(target),
             "--delay-ms", str(delay_ms), "--conn-mbps", str(conn_mbps)], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        self.port = int(line[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(10)


def peak_rss_mib(m: Mounted) -> float:
    for line in open(f"/proc/{m.proc.pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def ratio_line(name, base_s, mount_s, nbytes, target=None):
    ratio = base_s / mount_s
    verdict = "" if target is None else "  (goal >= %.2f: %s)" % (target, "met" if ratio >= target else "NOT met")
    print(f"{name:58s} baseline {nbytes / base_s / 1e6:8.1f} MB/s  mount {nbytes / mount_s / 1e6:8.1f} MB/s"
          f"  ratio {ratio:5.2f}{verdict}", flush=True)


def put_objects(url, bucket, objects):
    import obstore
    from obstore.store import S3Store
    s = S3Store(bucket, endpoint=url, access_key_id="test", secret_access_key="test", region="us-east-1",
                virtual_hosted_style_request=False, client_options={"allow_http": True})
    for key, data in objects:
        obstore.put(s, key, data)


def single_stream_get(url, bucket, key):
    """One plain GET of the whole object, read to the end (what `curl` does). moto accepts
    unsigned requests."""
    n = 0
    with urllib.request.urlopen(f"{url}/{bucket}/{key}") as r:
        while b := r.read(1 << 20):
            n += len(b)
    return n


class S3sFsServer:
    """s3s-fs (scripts/s3-server.sh) on 127.0.0.1, objects as files under its data directory,
    with `bucket` created; stopped on exit. Requests are logged at warn only (no per-request
    line)."""

    def __init__(self, work: Path, bucket: str):
        self.port = free_port()
        self.dir = work / f"s3s-{self.port}"
        (self.dir / "data" / bucket).mkdir(parents=True)
        self.url = f"http://127.0.0.1:{self.port}"
        subprocess.run([str(REPO / "scripts" / "s3-server.sh"), "install", "s3s-fs"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([str(REPO / "scripts" / "s3-server.sh"), "start", str(self.dir), str(self.port), "s3s-fs"],
                       check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, S3S_LOG="warn"))

    def warm(self):
        """Read every object file into the page cache (see `bench_big`)."""
        read_tree(self.dir / "data")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        subprocess.run([str(REPO / "scripts" / "s3-server.sh"), "stop", str(self.dir)], stdout=subprocess.DEVNULL)


def signed_single_stream_get(url, bucket, key):
    """One signed GET of the whole object, streamed to the end (obstore: s3s-fs checks
    signatures)."""
    import obstore
    from obstore.store import S3Store
    s = S3Store(bucket, endpoint=url, access_key_id="test", secret_access_key="test", region="us-east-1",
                virtual_hosted_style_request=False, client_options={"allow_http": True})
    n = 0
    for chunk in obstore.get(s, key).stream(min_chunk_size=1 << 20):
        n += len(chunk)
    return n


def rclone_time(proxy, prefix, mnt: Path, warm=lambda: None):
    """A whole read of `rclone mount` of bench/`prefix` through `proxy` (an S3 remote given on the
    command line, as bench_peers.py does), fresh mount, cold page cache; None without rclone."""
    if shutil.which("rclone") is None:
        return None
    # The bucket is mounted and `prefix` read below it: given `bench/big`, rclone first HEADs
    # `big` to see whether it names a file, which s3s-fs answers with a 500 that rclone retries
    # for minutes.
    remote = (f':s3,provider=Other,endpoint="{proxy.url}",access_key_id=test,secret_access_key=test,'
              f'force_path_style=true:bench')
    with Proc(["rclone", "mount", remote, str(mnt), "--read-only"], mnt, S3_ENV):
        drop_caches()
        warm()
        return timed(lambda: read_tree(mnt / prefix))


def mount_args(proxy, *extra):
    return ["--read-only", "--endpoint-url", proxy.url, "--metadata-ttl", "60", *extra]


def bench_delay(binary, work: Path, s3: MotoServer, delay, nfiles, big_mib, local_files: Path, ref, parts,
                big_server, conn_mbps=0.0, goals_ref=None, rounds=5, goals=("G1", "G2", "G3", "G4")):
    cap = f", each connection capped at {conn_mbps:g} MB/s" if conn_mbps else ""
    print(f"## added latency {delay:g} ms{cap}", flush=True)
    (work / "mnt").mkdir(exist_ok=True)
    with Proxy(s3.port, delay, conn_mbps) as proxy:
        if "files" in parts:
            bench_files(binary, work, proxy, delay, nfiles, local_files)
        if "zarr" in parts:
            bench_zarr(binary, work, proxy, delay, ref)
        if "chunks" in parts:
            bench_chunks(binary, work, proxy, ref)
        if "goals" in parts:
            bench_goals(binary, work, proxy, goals_ref, rounds, goals)
        if "big" in parts and big_server == "moto":
            bench_big(binary, work, proxy, delay, big_mib, "moto", single_stream_get, lambda: None)
    if "big" in parts and big_server != "moto":
        with Proxy(big_server.port, delay, conn_mbps) as proxy:
            bench_big(binary, work, proxy, delay, big_mib, "s3s-fs", signed_single_stream_get, big_server.warm)


def bench_files(binary, work: Path, proxy, delay, nfiles, local_files: Path):
    mnt = work / "mnt"
    nbytes = nfiles << 20
    # 1. the 1 MiB-file set. Three rounds, each contender once per round (local disk, then
    # fresh mounts: no cache, a cold cache in an emptied directory, the warm cache it left);
    # best of 3 for each, as in bench_zarr: a single read of 128 MiB moved by +-20% from one
    # run to the next on 2 cores shared with moto and the proxy.
    cache = work / f"cache-{delay:g}"
    best, rss = {}, {}
    for _ in range(3):
        drop_caches()
        t = timed(lambda: read_tree(local_files))
        best["local"] = min(best.get("local", t), t)
        shutil.rmtree(cache, ignore_errors=True)
        for name, extra in [("no cache", []), ("cold cache", ["--cache-dir", str(cache)]),
                            ("warm cache", ["--cache-dir", str(cache)])]:
            with Mounted(binary, "s3://bench/files", mnt, *mount_args(proxy, "--view", "raw", *extra),
                         env=S3_ENV) as m:
                drop_caches()
                t = timed(lambda: read_tree(mnt))
                best[name] = min(best.get(name, t), t)
                rss[name] = max(rss.get(name, 0), peak_rss_mib(m))
    local = best["local"]
    runs = {name: (best[name], rss[name]) for name in rss}
    ratio_line(f"{nfiles} x 1 MiB files, 1st mount no cache vs local disk", local, runs["no cache"][0], nbytes)
    ratio_line(f"{nfiles} x 1 MiB files, 1st mount cold cache vs no cache", runs["no cache"][0],
               runs["cold cache"][0], nbytes, 0.9)
    ratio_line(f"{nfiles} x 1 MiB files, 2nd mount warm cache vs local disk", local, runs["warm cache"][0],
               nbytes, 0.8)
    print(f"{'':58s} peak RSS MiB: no cache {runs['no cache'][1]:.0f}, cold cache {runs['cold cache'][1]:.0f},"
          f" warm cache {runs['warm cache'][1]:.0f}", flush=True)
    rclone = rclone_time(proxy, "files", mnt)
    if rclone is not None:
        ratio_line(f"{nfiles} x 1 MiB files, 1st mount no cache vs rclone mount", rclone, runs["no cache"][0],
                   nbytes, 1.5)


def evict(root: Path):
    """Drop the page cache of the files below `root` only. The warm-cache reads start from a cold
    cache directory this way without evicting the code of Python, zarr and the daemon, which
    `drop_caches` would (and which the obstore baseline, run before, does not pay)."""
    for f in root.rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def backend_requests(port):
    """The daemon's backend requests so far, by kind (its --metrics-addr endpoint). A `lookup` is
    a HEAD and a LIST sent together on object stores."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith("zarr_mount_backend_requests_total{"):
            kind = line.split('kind="')[1].split('"')[0]
            n = int(float(line.split()[-1]))
            if n:
                counts[kind] = n
    return counts


def backend_traffic(port):
    """(object bytes received, requests by kind) of the daemon so far (its --metrics-addr
    endpoint): the bodies of GETs, ranged GETs and revalidations; a 304 carries none."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    received = 0
    for line in text.splitlines():
        if line.startswith("zarr_mount_backend_received_bytes_total{"):
            kind = line.split('kind="')[1].split('"')[0]
            if kind in ("get", "range", "revalidate"):
                received += int(float(line.split()[-1]))
    return received, backend_requests(port)

def bench_zarr(binary, work: Path, proxy, delay, ref):
    """2. zarr-python whole-array read: obstore through the proxy (the baseline), zarr-python on a
    local copy (the ceiling: what no cache can beat), and fresh mounts on a cold, then warm
    --cache-dir, in the raw view (zarr-python reads the shards itself) and the default view
    (each inner chunk a file). Best of 3 for each; the data's page cache is evicted before each
    timed read (`evict`)."""
    mnt = work / "mnt"
    from obstore.store import S3Store
    native = zarr.storage.ObjectStore(
        S3Store("bench", prefix="arr.zarr", endpoint=proxy.url, access_key_id="test", secret_access_key="test",
                region="us-east-1", virtual_hosted_style_request=False, client_options={"allow_http": True}),
        read_only=True)
    check = lambda store: np.array_equal(zarr.open_array(store, mode="r")[:], ref) or sys.exit("bad read")
    base = timed(lambda: check(native), repeat=3)
    local = work / "local-arr.zarr"
    if not local.exists():
        zarr.create_array(str(local), shape=ref.shape, chunks=(256, 256), shards=(1024, 1024), dtype="float32",
                          compressors=zarr.codecs.ZstdCodec(level=1))[:] = ref

    def local_read():
        evict(local)
        return timed(lambda: check(str(local)))
    ceiling = min(local_read() for _ in range(3))
    ratio_line(f"zarr-python {ref.shape} local copy (ceiling) vs obstore", base, ceiling, ref.nbytes)
    for view in ["raw", "default"]:
        view_args = ["--view", view] if view == "raw" else []
        # No disk cache: the goal from before #21 (raw view >= 1.0x obstore). Best of 3 like the
        # baseline, each on a fresh mount, so both sides get the same number of tries.
        nocache, nocache_requests = None, None
        for _ in range(3):
            port = free_port()
            with Mounted(binary, "s3://bench/arr.zarr", mnt, *mount_args(proxy, *view_args),
                         "--metrics-addr", f"127.0.0.1:{port}", env=S3_ENV):
                t = timed(lambda: check(str(mnt)))
                nocache = t if nocache is None else min(nocache, t)
                nocache_requests = nocache_requests or backend_requests(port)
        zcache = work / f"zcache-{delay:g}-{view}"
        args = mount_args(proxy, "--cache-dir", str(zcache), *view_args)
        # A cold cache: best of 3, each a fresh mount on an emptied cache directory; the warm
        # mounts then use the cache the last one filled.
        cold = None
        for _ in range(3):
            shutil.rmtree(zcache, ignore_errors=True)
            port = free_port()
            with Mounted(binary, "s3://bench/arr.zarr", mnt, *args, "--metrics-addr", f"127.0.0.1:{port}",
                         env=S3_ENV):
                t = timed(lambda: check(str(mnt)))
                cold = t if cold is None else min(cold, t)
                cold_requests = backend_requests(port)
        warm = None
        for i in range(3):
            port = free_port()
            with Mounted(binary, "s3://bench/arr.zarr", mnt, *args, "--metrics-addr", f"127.0.0.1:{port}",
                         env=S3_ENV):
                evict(zcache)
                t = timed(lambda: check(str(mnt)))
                warm = t if warm is None else min(warm, t)
                if i == 0:
                    warm_requests = backend_requests(port)
        ratio_line(f"zarr-python {ref.shape} {view} view, no disk cache vs obstore", base, nocache, ref.nbytes,
                   1.0 if view == "raw" else None)
        ratio_line(f"zarr-python {ref.shape} {view} view, 1st mount cold cache vs obstore", base, cold, ref.nbytes)
        ratio_line(f"zarr-python {ref.shape} {view} view, 2nd mount warm cache vs obstore", base, warm, ref.nbytes,
                   2.0)
        print(f"{'':58s} backend requests: no cache {nocache_requests}, 1st mount {cold_requests},"
              f" 2nd mount {warm_requests}", flush=True)
        shutil.rmtree(zcache, ignore_errors=True)


ZARR2_PYTHON = REPO / ".venv-zarr2" / "bin" / "python"
# zarr-python 2 in its own venv: open the array at argv[1], read it whole, print milliseconds,
# the sum, and the CPU seconds of the read alone (of every process, then of this one): its own
# start and imports are not the read's.
ZARR2_READ = """
import os, sys, time, zarr
def busy():
    with open("/proc/stat") as f:
        t = [int(x) for x in f.readline().split()[1:9]]
    return (sum(t) - t[3] - t[4]) / os.sysconf("SC_CLK_TCK")
b, c, t = busy(), time.process_time(), time.perf_counter()
a = zarr.open_array(sys.argv[1], mode="r")
# zarr-python 2 reads every chunk of a selection (getitems) before it decodes any: time the
# reading apart from the rest.
reading, getitems = [0.0], a.chunk_store.getitems
def timed_getitems(*args, **kwargs):
    r0 = time.perf_counter()
    try:
        return getitems(*args, **kwargs)
    finally:
        reading[0] += time.perf_counter() - r0
a.chunk_store.getitems = timed_getitems
x = a[:]
t, b, c = time.perf_counter() - t, busy() - b, time.process_time() - c
print(t * 1000, x.sum(dtype="float64"), b, c, reading[0] * 1000)
"""
# The CPU seconds of the last zarr-python 2 read (every process, the reader) and the seconds
# it spent reading chunk files (`reading`), for `bench_goals`.
zarr2_cpu = {}


def bench_chunks(binary, work: Path, proxy, ref, rounds=5):
    """6. The 64-chunk arrays `chunks.zarr` (v3) and `chunks2.zarr` (v2), whole, through fresh
    mounts without a disk cache, with and without --array-prefetch; rounds alternate the
    contenders and the medians are compared (the machine's noise hits all of them alike)."""
    import statistics
    from obstore.store import S3Store
    mnt = work / "mnt"

    def obstore_read():
        store = zarr.storage.ObjectStore(S3Store(
            "bench", prefix="chunks.zarr", endpoint=proxy.url, access_key_id="test", secret_access_key="test",
            region="us-east-1", virtual_hosted_style_request=False, client_options={"allow_http": True}),
            read_only=True)
        return timed(lambda: np.array_equal(zarr.open_array(store, mode="r")[:], ref) or sys.exit("bad read"))

    def zarr3_read(view_args, extra):
        with Mounted(binary, "s3://bench/chunks.zarr", mnt, *mount_args(proxy, *view_args, *extra), env=S3_ENV):
            return timed(lambda: np.array_equal(zarr.open_array(str(mnt), mode="r")[:], ref) or sys.exit("bad read"))

    want = float(ref.sum(dtype="float64"))

    def zarr2_read(extra):
        with Mounted(binary, "s3://bench/chunks2.zarr", mnt, *mount_args(proxy, "--view", "raw", *extra),
                     env=S3_ENV):
            return zarr2_time(mnt, want)

    obstore_read()  # connections up, as a long-running reader has them
    contenders = {"obstore": obstore_read}
    for label, view_args in [("raw", ["--view", "raw"]), ("default", [])]:
        contenders[f"zarr 3, {label} view, no array prefetch"] = (
            lambda v=view_args: zarr3_read(v, ["--array-prefetch", "0"]))
        contenders[f"zarr 3, {label} view, array prefetch"] = lambda v=view_args: zarr3_read(v, [])
    if ZARR2_PYTHON.exists():
        contenders["zarr 2, raw view, no array prefetch"] = lambda: zarr2_read(["--array-prefetch", "0"])
        contenders["zarr 2, raw view, array prefetch"] = lambda: zarr2_read([])
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            times[name].append(run())
    base = statistics.median(times.pop("obstore"))
    for name, ts in times.items():
        ratio_line(f"64 chunks, {name} vs obstore", base, statistics.median(ts), ref.nbytes)


GOALS_ARRAY = "goals.zarr"


def goals_data(s3_url, n):
    """The sharded v3 array of part `goals` on S3 (N x N float32, 256 x 256 chunks in 1024 x 1024
    shards, zstd), and its reference values."""
    from obstore.store import S3Store
    store = zarr.storage.ObjectStore(S3Store(
        "bench", prefix=GOALS_ARRAY, endpoint=s3_url, access_key_id="test", secret_access_key="test",
        region="us-east-1", virtual_hosted_style_request=False, client_options={"allow_http": True}))
    ref = np.random.default_rng(7).standard_normal((n, n), dtype="float32")
    zarr.create_array(store, shape=(n, n), chunks=(256, 256), shards=(1024, 1024), dtype="float32",
                      compressors=zarr.codecs.ZstdCodec(level=1))[:] = ref
    return ref


def zarr2_time(path: Path, want: float) -> float:
    """zarr-python 2 (its own venv, one chunk at a time) reading the array at `path` whole."""
    out = subprocess.run([str(ZARR2_PYTHON), "-c", ZARR2_READ, str(path)], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"zarr-python 2: {out.stderr}")
    ms, total, every, reader, reading_ms = out.stdout.split()
    if abs(float(total) - want) > 1e-3 * abs(want) + 1e-3:
        sys.exit("zarr-python 2: bad read")
    zarr2_cpu.update(all=float(every), reader=float(reader), reading=float(reading_ms) / 1000)
    return float(ms) / 1000


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds used so far by every process on the machine (/proc/stat), and by this
    process with the children it has waited for (a zarr-python 2 reader's subprocess)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]
    me = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
             for f in ("ru_utime", "ru_stime"))
    return busy / os.sysconf("SC_CLK_TCK"), me


def bench_goals(binary, work: Path, proxy, ref, rounds=5, goals=("G1", "G2", "G3", "G4")):
    """7. (part `goals`) The four goals of issue #40 on one sharded array (`goals_data`), each
    contender on a fresh mount (or a cold page cache of its local copy), rounds alternating the
    contenders, medians compared:
      G1 zarr-python 2 through --view v2 >= 0.8x zarr-python 2 on a local unsharded v2 copy;
      G2 zarr-python 3 through the default (unsharded) view >= 1.0x it on a local unsharded copy;
      G3 zarr-python 3 through the raw view >= 1.0x its obstore store, >= 1.5x `rclone mount`;
      G4 zarr-python 3, raw view, a warm --cache-dir remount after the metadata TTL (the test
         clock starts each such mount past it) >= 0.8x it on a local copy, 0 object bytes.
    G1 and G2 also read the same view of the local sharded copy: the floor, what the mount
    costs with no network at all, that a view of the S3 copy can at best reach.
    G1 also fetches the array's objects from S3 with no reader (the server's best delivery):
    zarr-python 2 decodes only after reading every chunk, so its read of S3 data takes at least
    its decoding (timed apart in its local read) plus that delivery.
    The array: 4096 x 4096 float32 (64 MiB, 256 chunks of 256 KiB in 16 shards) is above the
    default --array-prefetch (so no contender is served by fetching the array whole), has
    enough chunks that a per-file cost shows (256 LOOKUP/OPEN/READ), and shards of 4 MiB, a
    size real sharded data uses."""
    import statistics
    from obstore.store import S3Store
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    want = float(ref.sum(dtype="float64"))
    local_v2, local_v3, local_sharded = (work / f"goals-local-{k}.zarr" for k in ("v2", "v3", "sharded"))
    if not local_v2.exists():
        import numcodecs
        zarr.create_array(str(local_v2), shape=ref.shape, chunks=(256, 256), dtype="float32", zarr_format=2,
                          compressors=numcodecs.Zstd(level=1))[:] = ref
        zarr.create_array(str(local_v3), shape=ref.shape, chunks=(256, 256), dtype="float32",
                          compressors=zarr.codecs.ZstdCodec(level=1))[:] = ref
        zarr.create_array(str(local_sharded), shape=ref.shape, chunks=(256, 256), shards=(1024, 1024),
                          dtype="float32", compressors=zarr.codecs.ZstdCodec(level=1))[:] = ref
    check = lambda store: np.array_equal(zarr.open_array(store, mode="r")[:], ref) or sys.exit("bad read")
    # The CPU the last read took: of every process (the reader, the daemon, moto, the proxy
    # share two cores) and of the reader alone.
    cpu = {}

    def measured(read):
        zarr2_cpu.clear()
        all0, me0 = cpu_seconds()
        t = read()
        all1, me1 = cpu_seconds()
        # A zarr-python 2 subprocess measured its read alone.
        cpu.clear()
        cpu.update(zarr2_cpu or dict(all=all1 - all0, reader=me1 - me0))
        return t

    def local3(path):
        evict(path)
        return measured(lambda: timed(lambda: check(str(path))))

    def local2(path):
        evict(path)
        return measured(lambda: zarr2_time(path, want))

    def mounted(reader, *extra, env=S3_ENV, after=None):
        port = free_port()
        with Mounted(binary, f"s3://bench/{GOALS_ARRAY}", mnt, *mount_args(proxy, *extra),
                     "--metrics-addr", f"127.0.0.1:{port}", env=env):
            t = measured(lambda: reader(mnt))
            if after:
                after(port)
            return t

    def local_mounted(reader, *extra):
        """The same view of the local sharded copy: the mount's cost without a network (the
        floor a view of the S3 copy can reach on this machine)."""
        evict(local_sharded)
        with Mounted(binary, local_sharded, mnt, "--read-only", *extra):
            return measured(lambda: reader(mnt))

    def obstore_read():
        store = zarr.storage.ObjectStore(S3Store(
            "bench", prefix=GOALS_ARRAY, endpoint=proxy.url, access_key_id="test", secret_access_key="test",
            region="us-east-1", virtual_hosted_style_request=False, client_options={"allow_http": True}),
            read_only=True)
        return measured(lambda: timed(lambda: check(store)))

    def s3_delivery():
        """The array's objects fetched from S3 (through the proxy) 8 at a time and dropped: the
        fastest this server delivers them, whoever asks."""
        import asyncio
        import obstore
        store = S3Store("bench", endpoint=proxy.url, access_key_id="test", secret_access_key="test",
                        region="us-east-1", virtual_hosted_style_request=False, client_options={"allow_http": True})
        keys = [o["path"] for batch in obstore.list(store, prefix=f"{GOALS_ARRAY}/") for o in batch]

        async def fetch_all():
            slots = asyncio.Semaphore(8)

            async def one(key):
                async with slots:
                    await (await obstore.get_async(store, key)).bytes_async()
            await asyncio.gather(*map(one, keys))
        return measured(lambda: timed(lambda: asyncio.run(fetch_all())))

    def rclone_read():
        remote = (f':s3,provider=Other,endpoint="{proxy.url}",access_key_id=test,secret_access_key=test,'
                  f'force_path_style=true:bench/{GOALS_ARRAY}')
        with Proc(["rclone", "mount", remote, str(mnt), "--read-only"], mnt, S3_ENV):
            return measured(lambda: timed(lambda: check(str(mnt))))

    # G4: the cache filled once; each warm mount starts its clock further past the TTL (60 s)
    # than the one before, so every cached object is past its TTL when read.
    cache = work / "goals-cache"
    shutil.rmtree(cache, ignore_errors=True)
    mounted(lambda m: timed(lambda: check(str(m))), "--view", "raw", "--cache-dir", str(cache))
    warm_runs = []
    warm_traffic = []

    def warm_read():
        warm_runs.append(None)
        env = dict(S3_ENV, ZM_TEST_CLOCK_OFFSET=str(120 * len(warm_runs)))
        evict(cache)
        return mounted(lambda m: timed(lambda: check(str(m))), "--view", "raw", "--cache-dir", str(cache),
                       env=env, after=lambda port: warm_traffic.append(backend_traffic(port)))

    obstore_read()  # connections up, as a long-running reader has them
    contenders = {
        "G1 local v2 copy, zarr 2": lambda: local2(local_v2),
        "G1 v2 view, zarr 2": lambda: mounted(lambda m: zarr2_time(m, want), "--view", "v2"),
        "G2 local unsharded copy, zarr 3": lambda: local3(local_v3),
        "G2 default view, zarr 3": lambda: mounted(lambda m: timed(lambda: check(str(m)))),
        "G1 v2 view of the local sharded copy, zarr 2": lambda: local_mounted(lambda m: zarr2_time(m, want),
                                                                              "--view", "v2"),
        "G1 the array's objects from S3, 8 at a time, no reader": s3_delivery,
        "G2 default view of the local sharded copy, zarr 3": lambda: local_mounted(
            lambda m: timed(lambda: check(str(m)))),
        "G3 obstore, zarr 3": obstore_read,
        "G3 raw view, zarr 3": lambda: mounted(lambda m: timed(lambda: check(str(m))), "--view", "raw"),
        "G4 local sharded copy, zarr 3": lambda: local3(local_sharded),
        "G4 raw view, warm cache past TTL, zarr 3": warm_read,
    }
    if shutil.which("rclone"):
        contenders["G3 rclone mount, zarr 3"] = rclone_read
    contenders = {name: run for name, run in contenders.items() if name[:2] in goals}
    times = {name: [] for name in contenders}
    cpus = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            times[name].append(run())
            cpus[name].append(dict(cpu))
    med = {name: statistics.median(ts) for name, ts in times.items()}
    for name, t in med.items():
        print(f"{name:58s} median {t:6.3f} s  (runs {' '.join(f'{x:.3f}' for x in times[name])})", flush=True)
    # No contender can beat the CPU it needs spread over the cores: a baseline's time
    # below its mount's bound says the goal is out of reach on this machine whatever the
    # mount does, unless the daemon's own CPU shrinks.
    cores = os.cpu_count() or 1
    for name in contenders:
        every = statistics.median(c["all"] for c in cpus[name])
        reader = statistics.median(c["reader"] for c in cpus[name])
        print(f"{name:58s} CPU {every:6.3f} s in all, reader {reader:6.3f} s, others {every - reader:6.3f} s;"
              f" {cores} cores: no faster than {every / cores:6.3f} s", flush=True)
    if "G1" in goals:
        ratio_line("G1 zarr 2, v2 view of sharded S3 vs local v2 copy", med["G1 local v2 copy, zarr 2"],
                   med["G1 v2 view, zarr 2"], ref.nbytes, 0.8)
        ratio_line("G1 floor: v2 view of the local sharded copy vs local v2 copy", med["G1 local v2 copy, zarr 2"],
                   med["G1 v2 view of the local sharded copy, zarr 2"], ref.nbytes)
        # zarr-python 2 decodes nothing until it has read every chunk of the selection, so a
        # read of S3 data takes at least its decoding plus the server's delivery of the bytes,
        # and at least the floor (the mount with no network).
        local = med["G1 local v2 copy, zarr 2"]
        decoding = statistics.median(t - c["reading"] for t, c in
                                     zip(times["G1 local v2 copy, zarr 2"], cpus["G1 local v2 copy, zarr 2"]))
        delivery = med["G1 the array's objects from S3, 8 at a time, no reader"]
        floor = med["G1 v2 view of the local sharded copy, zarr 2"]
        print(f"{'G1 bound: decoding after reading (zarr 2) + S3 delivery':58s} decoding {decoding:6.3f} s"
              f" + delivery {delivery:6.3f} s: ratio at most {local / (decoding + delivery):5.2f};"
              f" with the floor: at most {local / max(floor, decoding + delivery):5.2f}", flush=True)
    if "G2" in goals:
        ratio_line("G2 zarr 3, default view vs local unsharded copy", med["G2 local unsharded copy, zarr 3"],
                   med["G2 default view, zarr 3"], ref.nbytes, 1.0)
        ratio_line("G2 floor: default view of the local sharded copy vs local unsharded copy",
                   med["G2 local unsharded copy, zarr 3"], med["G2 default view of the local sharded copy, zarr 3"],
                   ref.nbytes)
    if "G3" in goals:
        ratio_line("G3 zarr 3, raw view vs obstore", med["G3 obstore, zarr 3"], med["G3 raw view, zarr 3"],
                   ref.nbytes, 1.0)
        if "G3 rclone mount, zarr 3" in med:
            ratio_line("G3 zarr 3, raw view vs rclone mount", med["G3 rclone mount, zarr 3"],
                       med["G3 raw view, zarr 3"], ref.nbytes, 1.5)
        else:
            print("G3 vs rclone mount: skipped (no rclone on PATH)", flush=True)
    if "G4" in goals:
        ratio_line("G4 zarr 3, warm cache past TTL vs local copy", med["G4 local sharded copy, zarr 3"],
                   med["G4 raw view, warm cache past TTL, zarr 3"], ref.nbytes, 0.8)
        received = max(t[0] for t in warm_traffic)
        print(f"{'':58s} G4 object bytes received (most of any run): {received}"
              f"  (goal 0: {'met' if received == 0 else 'NOT met'}); requests {warm_traffic[-1][1]}", flush=True)
    shutil.rmtree(cache, ignore_errors=True)


def bench_big(binary, work: Path, proxy, delay, big_mib, server, get_one, warm):
    """3. one large object, sequential, through `proxy`. `warm` puts the server's copy of it back
    in the page cache after the caches were dropped (a real store's disks are not ours: the
    emulator reading its file from this VM's disk would cap the mount, and not the baseline,
    which runs while the object is still cached from its upload)."""
    mnt = work / "mnt"
    mnt.mkdir(exist_ok=True)
    big = big_mib << 20
    drop_caches()
    warm()
    single = timed(lambda: get_one(proxy.url, "bench", "big/object.bin"))
    with Mounted(binary, "s3://bench/big", mnt, *mount_args(proxy, "--view", "raw"), env=S3_ENV) as m:
        drop_caches()
        warm()
        seq = timed(lambda: read_tree(mnt))
        rss = peak_rss_mib(m)
    with Mounted(binary, "s3://bench/big", mnt,
                 *mount_args(proxy, "--view", "raw", "--cache-dir", str(work / f"bcache-{delay:g}")),
                 env=S3_ENV) as m:
        drop_caches()
        warm()
        seq_cached = timed(lambda: read_tree(mnt))
        rss_cached = peak_rss_mib(m)
    ratio_line(f"{big_mib} MiB object ({server}) sequential, no cache vs 1 GET stream", single, seq, big, 2.0)
    ratio_line(f"{big_mib} MiB object ({server}) sequential, cold cache vs 1 GET stream", single, seq_cached, big)
    print(f"{'':58s} peak RSS MiB: no cache {rss:.0f}, cold cache {rss_cached:.0f}", flush=True)
    rclone = rclone_time(proxy, "big", mnt, warm)
    if rclone is not None:
        ratio_line(f"{big_mib} MiB object ({server}) sequential, rclone mount vs 1 GET stream", single, rclone, big)
        ratio_line(f"{big_mib} MiB object ({server}) sequential, no cache vs rclone mount", rclone, seq, big, 1.5)
    shutil.rmtree(work / f"bcache-{delay:g}", ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--delays", default="0,20", help="added latencies in ms, comma-separated")
    ap.add_argument("--files", type=int, default=128, help="how many 1 MiB objects")
    ap.add_argument("--big-mib", type=int, default=1024, help="size of the large object in MiB")
    ap.add_argument("--shape", type=int, default=2048, help="the array is SHAPE x SHAPE float32")
    ap.add_argument("--parts", default="files,zarr,big",
                    help="which parts to run (files, zarr, big, chunks, goals)")
    ap.add_argument("--goals-shape", type=int, default=4096, help="the array of part goals is SHAPE x SHAPE")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of part goals (medians)")
    ap.add_argument("--goals", default="G1,G2,G3,G4", help="which goals of part goals to run")
    ap.add_argument("--big-server", default="moto", choices=["moto", "s3s-fs"],
                    help="the server of the large object (3.)")
    ap.add_argument("--conn-mbps", type=float, default=0.0,
                    help="cap each proxied connection at this many MB/s (a real link's per-connection limit; 0: none)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="zarr-mount-bench-cloud.") as tmp:
        work = Path(tmp)
        with MotoServer(work, "bench") as s3, contextlib.ExitStack() as stack:
            rng = np.random.default_rng(5)
            parts = set(args.parts.split(","))
            local_files = work / "local-files"
            objects = []
            for i in range(args.files if "files" in parts else 0):
                data = rng.bytes(1 << 20)
                p = local_files / "c" / str(i // 100) / str(i % 100)
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
                objects.append((f"files/c/{i // 100}/{i % 100}", data))
            put_objects(s3.url, "bench", objects)
            del objects
            big_server = "moto"
            if args.big_server == "s3s-fs" and "big" in parts:
                big_server = stack.enter_context(S3sFsServer(work, "bench"))
            if "big" in parts:
                big = rng.bytes(args.big_mib << 20)
                target = s3 if big_server == "moto" else big_server
                put_objects(target.url, "bench", [("big/object.bin", big)])
                del big
            ref = None
            if "zarr" in parts:
                from obstore.store import S3Store
                native = zarr.storage.ObjectStore(S3Store(
                    "bench", prefix="arr.zarr", endpoint=s3.url, access_key_id="test", secret_access_key="test",
                    region="us-east-1", virtual_hosted_style_request=False, client_options={"allow_http": True}))
                n = args.shape
                a = zarr.create_array(native, shape=(n, n), chunks=(256, 256), shards=(1024, 1024),
                                      dtype="float32", compressors=zarr.codecs.ZstdCodec(level=1))
                ref = np.random.default_rng(6).standard_normal((n, n), dtype="float32")
                a[:] = ref
            if "chunks" in parts:
                import numcodecs
                from obstore.store import S3Store
                n = args.shape
                ref = np.random.default_rng(6).standard_normal((n, n), dtype="float32")
                for name, fmt, codec in [("chunks.zarr", 3, zarr.codecs.ZstdCodec(level=1)),
                                         ("chunks2.zarr", 2, numcodecs.Zstd(level=1))]:
                    store = zarr.storage.ObjectStore(S3Store(
                        "bench", prefix=name, endpoint=s3.url, access_key_id="test", secret_access_key="test",
                        region="us-east-1", virtual_hosted_style_request=False, client_options={"allow_http": True}))
                    zarr.create_array(store, shape=(n, n), chunks=(256, 256), dtype="float32", zarr_format=fmt,
                                      compressors=codec)[:] = ref
            goals_ref = goals_data(s3.url, args.goals_shape) if "goals" in parts else None
            for d in [float(x) for x in args.delays.split(",")]:
                bench_delay(args.bin, work, s3, d, args.files, args.big_mib, local_files, ref, parts, big_server,
                            args.conn_mbps, goals_ref, args.rounds, tuple(args.goals.split(",")))


if __name__ == "__main__":
    sys.exit(main())
