#!/usr/bin/env python3
"""Chaos soak: two zarr-mount daemons on one S3 bucket, under writers, readers and outages.

    soak.py [--minutes N] [--servers moto,s3s-fs] [--workdir DIR] [--rss-limit-mb MB]
            [--cut-connections auto|always|never] [--contention [--readers-at-writer N]]

Run through scripts/soak.sh (which picks the suite venv). The time is split between the
servers, one after the other. In each phase:
- a daemon with the unsharded view and one with the raw view mount the same bucket prefix,
  both through scripts/latency_proxy.py (latency spikes; connections cut now and then in
  front of servers with atomic conditional PUTs, see ATOMIC_CAS), each with its own small disk
  cache (--cache-max-size 2M, so blocks are evicted all the time);
- writers rewrite the inner chunk files of a sharded array (through the unsharded view) and
  plain files (through the raw view), one writer per file; readers read both kinds through
  both daemons;
- the S3 server goes away every few minutes (scaled to N) for a few seconds: s3s-fs is killed
  (SIGKILL) and restarted on its data; moto keeps its objects only in memory, so for moto the
  proxy in front of it is killed and restarted instead (the daemons see the same refused and
  cut connections).
With --contention the same two daemons race on a few plain files instead: 3 of them, each
rewritten without pause through the raw daemon and read by 8 threads through the unsharded
daemon (the one that did not write them) and 2 through the raw one, with a 0.2 s metadata TTL
and no outages, so that another daemon's rewrite lands between a reader's lookup and its open,
or between a reader's open and another reader's lookup, many times a second.
Every file's bytes are derived from (path, version) and start with "path@version\\n", so any
read is checked against the versions ever written to that path (zeros: a chunk never
written). Checked all the time: a write acknowledged (its close returned 0) reads back
exactly through its daemon, no read returns bytes that were never written (a read through the
daemon that rewrites the file in place may mix, page by page, the versions written meanwhile,
as on a local disk, but none older than the one acknowledged when the read began), each
daemon's RSS stays under --rss-limit-mb, no daemon dies. Errors (EIO during an outage is expected) are
counted, by whether they fell within an outage (or the 30 s after it). Prints the figures at
the end; exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
os.environ.setdefault("ZM_DAEMON_ARGS", "")  # no -v: a long run's log stays small

import pytest  # noqa: E402 (zm_s3 reports a missing server through pytest's outcomes)
from zm_harness import Mount  # noqa: E402
from zm_s3 import BUCKET, DAEMON_ENV, S3_SERVERS, free_port  # noqa: E402

PROXY = REPO / "scripts" / "latency_proxy.py"
PREFIX = "soak"
INNER, SHARD, SIDE = 64, 256, 512  # uint8: 4 KiB inner chunks, 16 per shard, 4 shards
GRID = SIDE // INNER
CHUNK_BYTES = INNER * INNER
RAW_FILES = 24
RAW_MAX = 300_000
PAGE = 4096  # the unit in which the kernel's page cache mixes a file rewritten while read
RUNS_PER_PAGE = 3  # a page caught while a write() copied into it: two versions, maybe three
OUTAGE_SECS = 5.0
GRACE_SECS = 30.0  # the documented bound: an outage surfaces as EIO within 30 s
STUCK_SECS = 120.0
# Servers whose conditional PUTs are atomic (moto as the soak runs it, serially). A connection
# cut under a PUT can leave that PUT running at the server while the client's retry succeeds
# and the daemon moves on; on s3s-fs, whose If-Match is checked before the write without a
# lock, that PUT could then land over the next rewrite of the shard: a loss the server causes,
# which a client cannot prevent. So connections are cut only in front of these.
ATOMIC_CAS = {"moto"}
# Servers whose GET answers with the version of the bytes it sends (s3s-fs does not: see
# Ledger.inconsistent_gets, for what is counted instead of failed on the others).
CONSISTENT_GETS = {"moto"}
ARRAY_META = {
    "zarr_format": 3, "node_type": "array", "shape": [SIDE, SIDE], "data_type": "uint8",
    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [SHARD, SHARD]}},
    "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
    "fill_value": 0,
    "codecs": [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [INNER, INNER], "codecs": [{"name": "bytes"}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "end"}}],
    "attributes": {},
}
CHUNK_PATHS = [f"u.zarr/c/{y}/{x}" for y in range(GRID) for x in range(GRID)]
RAW_PATHS = [f"files/f{i:02d}" for i in range(RAW_FILES)]


# ---------------------------------------------------------------- recognisable content

def size_of(path: str, version: int) -> int:
    if path.startswith("u.zarr/"):
        return CHUNK_BYTES
    h = hashlib.blake2b(f"{path}@{version}".encode(), digest_size=8).digest()
    return 64 + int.from_bytes(h, "little") % RAW_MAX


def content(path: str, version: int) -> bytes:
    """The bytes of `path` at `version`: a header naming both, then a keyed stream."""
    size = size_of(path, version)
    head = f"{path}@{version}\n".encode()
    out = bytearray(head)
    seed = hashlib.blake2b(head, digest_size=32).digest()
    i = 0
    while len(out) < size:
        out += hashlib.blake2b(i.to_bytes(8, "little"), key=seed, digest_size=64).digest()
        i += 1
    return bytes(out[:size])


def version_in(path: str, data: bytes) -> int | None:
    """The version `data` claims to be of `path` (0 for a never-written chunk), or None."""
    if path.startswith("u.zarr/") and data == bytes(CHUNK_BYTES):
        return 0
    head = data.split(b"\n", 1)[0]
    name, _, v = head.decode("latin-1").rpartition("@")
    return int(v) if name == path and v.isdigit() else None


# ---------------------------------------------------------------- bookkeeping

class Ledger:
    """Versions ever written (attempted) per path, the last acknowledged one, and counters."""

    def __init__(self):
        self.lock = threading.Lock()
        self.written: dict[str, set[int]] = {}
        self.acked: dict[str, int] = {}
        # Per path: rewrites begun (open) and ended (close returned), for telling which reads
        # overlapped a rewrite through the mount that writes the path.
        self.begun: Counter = Counter()
        self.ended: Counter = Counter()
        self.counts = Counter()
        self.errors = Counter()
        self.failures: list[str] = []
        self.examples: list[str] = []  # the first few errors of each kind, with their path
        self.outages: list[tuple[float, float]] = []  # (start, end); end inf while under way
        # A server whose GET overlapping a PUT can pair bytes with another version (s3s-fs;
        # docs/SEMANTICS.md): the other daemon's rewrite can be read torn there, which no
        # client can tell (counted, not failed). A daemon's own writes are exact there too.
        self.inconsistent_gets = False

    def attempt(self, path: str, v: int):
        with self.lock:
            self.written.setdefault(path, set()).add(v)

    def ack(self, path: str, v: int):
        with self.lock:
            self.acked[path] = v

    def rewrite_begins(self, path: str):
        with self.lock:
            self.begun[path] += 1

    def rewrite_ends(self, path: str):
        with self.lock:
            self.ended[path] += 1

    def read_begins(self, path: str) -> tuple[int, int | None]:
        """What a read of `path` starts from: the rewrites begun by then and (when none is
        under way) the number of rewrites begun, else -1; and the version acknowledged."""
        with self.lock:
            quiet = self.begun[path] == self.ended[path]
            return (self.begun[path] if quiet else -1), self.acked.get(path)

    def rewritten_since(self, path: str, start: int) -> bool:
        """Whether a rewrite of `path` was under way when a read that began at `start` began
        (-1), or began since."""
        with self.lock:
            return start < 0 or self.begun[path] != start

    def count(self, what: str, n: int = 1):
        with self.lock:
            self.counts[what] += n

    def fail(self, msg: str):
        msg = f"{time.strftime('%H:%M:%S', time.gmtime())} {msg}"  # to find it in the daemon logs
        with self.lock:
            self.failures.append(msg)
        print(f"soak: FAILED: {msg}", file=sys.stderr, flush=True)

    def acked_version(self, path: str) -> int | None:
        with self.lock:
            return self.acked.get(path)

    def absent(self, path: str, where: str, client, acked: int | None):
        """ENOENT: right for a chunk never written (the unsharded view lists only stored
        chunks), wrong once a version of `path` was acknowledged before the read began
        (`acked`; also during an outage, which must surface as EIO). A read that overlapped
        the first write of a chunk may find it absent."""
        if acked is None:
            self.count("reads of a chunk never written (ENOENT)")
        else:
            self.stale_or_lost(path, f"{where}: {path}: ENOENT, after version {acked} was "
                               "acknowledged", acked, client)

    def stale_or_lost(self, path: str, what: str, acked: int, client):
        """A read that missed the acknowledged version `acked`: a failure, naming the version
        the server holds (a write lost at the server, or a stale read in the daemon)."""
        held = stored_version(client, path)
        self.fail(f"{what}; the server holds "
                  + {None: "(could not ask)", -1: "no such chunk"}.get(held, f"version {held}"))

    def prefix_of_written(self, path: str, data: bytes) -> bool:
        """Whether `data` is empty or the start of the version its header names (written)."""
        if not data:
            return True
        v = version_in(path, data)
        with self.lock:
            known = v in self.written.get(path, ())
        return known and content(path, v).startswith(data)

    def error(self, op: str, e: OSError, at: float):
        near = any(s <= at <= e_ + GRACE_SECS for s, e_ in self.outages)
        name = errno.errorcode.get(e.errno or 0, str(e.errno))
        key = f"{op} {name} {'during an outage' if near else 'outside outages'}"
        with self.lock:
            self.errors[key] += 1
            if self.errors[key] <= 3:
                self.examples.append(f"{key}: {e.filename}")

    def mixed_from(self, path: str, data: bytes, oldest: int) -> list[int] | None:
        """The versions (>= `oldest`) that `data` is made of, run by run: a read overlapping
        in-place rewrites (open with O_TRUNC, write) through its own mount, where the kernel's
        page cache holds the bytes each write() copies in, a page at a time, while readers
        read it without a lock (a local disk does the same). A page may be caught half
        copied: at most RUNS_PER_PAGE runs in a page. None if some bytes were never written
        at their offset by any of those versions."""
        with self.lock:
            versions = sorted(v for v in self.written.get(path, ()) if v >= oldest)
        bodies = [(v, content(path, v)) for v in versions]
        made_of = []
        for at in range(0, len(data), PAGE):
            runs = page_runs(data, at, min(at + PAGE, len(data)), bodies)
            if runs is None or len(runs) > RUNS_PER_PAGE:
                return None
            made_of += runs
        return made_of

    def check(self, path: str, data: bytes, where: str, writing: bool = False,
              overlapped: bool = False, acked: int | None = None) -> int | None:
        """Whether `data` is a version ever written to `path`; records a failure if not.
        `writing`: read through the mount that writes `path`, where POSIX lets a read between
        a writer's open(O_TRUNC) and its last write see a prefix of the version written, and
        a read that `overlapped` rewrites see their pages mixed (none older than `acked`, the
        version acknowledged when the read began)."""
        v = version_in(path, data)
        if writing and (v is None or data != content(path, v)) and self.prefix_of_written(path, data):
            self.count("reads of a write under way")
            return v
        if writing and overlapped and (v is None or data != content(path, v)):
            made_of = self.mixed_from(path, data, acked or 0)
            if made_of is not None and len(set(made_of)) > 1:
                self.count("reads mixed by a rewrite through the same mount")
                return None
        fill = path.startswith("u.zarr/") and v == 0
        with self.lock:
            known = fill or v in self.written.get(path, ())
        whole = known and data == (bytes(CHUNK_BYTES) if fill else content(path, v))
        if not whole and known and not writing and self.inconsistent_gets:
            self.count("torn reads")
            return None
        if not whole:
            self.fail(f"{where}: {path}: {len(data)} bytes that were never written "
                      f"(they claim version {v}; versions written: {len(self.written.get(path, ()))}; "
                      f"a rewrite overlapped the read: {overlapped}; acknowledged when it began: "
                      f"{acked}; pages: {self.describe_pages(path, data)})")
            return None
        if writing and acked is not None and v < acked:
            self.fail(f"{where}: {path}: version {v}, older than version {acked} acknowledged "
                      "before the read began")
            return None
        return v

    def describe_pages(self, path: str, data: bytes) -> str:
        """Pages by the versions they match at their offset, runs of equal pages together
        (a page of several versions as v1+v2; ? for bytes of none)."""
        with self.lock:
            versions = sorted(self.written.get(path, ()))
        bodies = [(v, content(path, v)) for v in versions]
        runs: list[list] = []
        for at in range(0, len(data), PAGE):
            parts = page_runs(data, at, min(at + PAGE, len(data)), bodies)
            name = "?" if parts is None else "+".join(f"v{v}" for v in parts)
            if runs and runs[-1][0] == name:
                runs[-1][1] += 1
            else:
                runs.append([name, 1])
        return " ".join(f"{name}x{n}" for name, n in runs)


# ---------------------------------------------------------------- workers

def writer(ledger: Ledger, mnt: Path, paths: list[str], stop: threading.Event, busy: dict, client):
    version = {p: 0 for p in paths}
    rng = random.Random(str(paths))
    while not stop.is_set():
        path = rng.choice(paths)
        version[path] += 1
        v = version[path]
        data = content(path, v)
        ledger.attempt(path, v)
        busy[threading.get_ident()] = time.monotonic()
        ledger.rewrite_begins(path)
        try:
            with open(mnt / path, "wb") as f:
                f.write(data)
        except OSError as e:
            ledger.error("write", e, time.time())
            continue
        finally:
            ledger.rewrite_ends(path)
            busy.pop(threading.get_ident(), None)
        ledger.ack(path, v)
        ledger.count("writes")
        ledger.count("bytes written", len(data))
        try:
            back = (mnt / path).read_bytes()
        except FileNotFoundError as e:
            ledger.absent(path, f"read-back through {mnt.name} ({lasting(mnt / path)})", client, v)
            continue
        except OSError as e:
            ledger.error("read-back", e, time.time())
            continue
        if back != data:
            ledger.stale_or_lost(path, f"{mnt.name}: {path} version {v} was acknowledged but "
                                 f"reads back as version {version_in(path, back)} "
                                 f"({len(back)} bytes)", v, client)


def page_runs(data: bytes, at: int, end: int, bodies: list) -> list[int] | None:
    """data[at:end] as runs, each the bytes at that offset of one of `bodies` ((version,
    bytes), longest run first); None when some byte matches none of them."""
    runs = []
    while at < end:
        best, best_len = None, 0
        for v, b in bodies:
            n = 0
            while at + n < end and at + n < len(b) and b[at + n] == data[at + n]:
                n += 1
            if n > best_len:
                best, best_len = v, n
        if best is None:
            return None
        runs.append(best)
        at += best_len
    return runs


def lasting(path: Path) -> str:
    """For a failure message: whether an ENOENT lasts (the mount or the kernel holds it) or
    was one answer (read again at once, three times)."""
    seen = []
    for _ in range(3):
        try:
            path.read_bytes()
            seen.append("found")
        except OSError as e:
            seen.append(errno.errorcode.get(e.errno or 0, str(e)))
    return "read again: " + ", ".join(seen)


def stored_version(client, path: str) -> int | None:
    """The version the server itself holds for `path`, read around the mount (-1: none; None:
    the server could not be asked), to tell a write lost at the server from a stale read."""
    try:
        if not path.startswith("u.zarr/"):
            data = client.get_object(Bucket=BUCKET, Key=f"{PREFIX}/{path}")["Body"].read()
            return version_in(path, data)
        y, x = map(int, path.split("/")[-2:])
        per = SHARD // INNER
        key = f"{PREFIX}/u.zarr/c/{y // per}/{x // per}"
        shard = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        # The index at the end: (offset, nbytes) little-endian u64 per inner chunk, then crc32c.
        at = len(shard) - 4 - 16 * per * per + 16 * ((y % per) * per + x % per)
        offset, nbytes = (int.from_bytes(shard[at + i:at + i + 8], "little") for i in (0, 8))
        if offset == nbytes == (1 << 64) - 1:
            return -1
        return version_in(path, shard[offset:offset + nbytes])
    except Exception:  # noqa: BLE001 (down, or gone: only for classifying a failure)
        return None


def reader(ledger: Ledger, mnt: Path, paths: list[str], stop: threading.Event, busy: dict,
           writing: bool, client):
    rng = random.Random(str(mnt) + str(paths[:1]))
    while not stop.is_set():
        path = rng.choice(paths)
        busy[threading.get_ident()] = time.monotonic()
        start, acked = ledger.read_begins(path)
        try:
            data = (mnt / path).read_bytes()
        except FileNotFoundError as e:
            ledger.absent(path, f"read through {mnt.name} ({lasting(mnt / path)})", client, acked)
            continue
        except OSError as e:
            ledger.error(f"read through {mnt.name}", e, time.time())
            continue
        finally:
            busy.pop(threading.get_ident(), None)
        ledger.count("reads")
        ledger.count("bytes read", len(data))
        ledger.check(path, data, f"read through {mnt.name}", writing,
                     ledger.rewritten_since(path, start), acked if writing else None)


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# ---------------------------------------------------------------- one phase

class Proxy:
    """scripts/latency_proxy.py on a fixed port, with the soak's chaos options."""

    def __init__(self, target: int, scale: float, cuts: bool):
        self.target, self.port = target, free_port()
        self.args = ["--delay-ms", "5", "--spike-every", f"{20 * scale:.0f}", "--spike-secs", "2",
                     "--spike-ms", "800"]
        if cuts:
            self.args += ["--drop-every", f"{15 * scale:.0f}"]
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen([sys.executable, str(PROXY), "--target", str(self.target),
                                      "--listen", str(self.port), *self.args],
                                     stdout=subprocess.PIPE, text=True)
        self.proc.stdout.readline()  # "listening PORT": ready

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Contention:
    """The --contention setting: few files, many readers of another daemon's writes."""
    on = False
    FILES = 3
    TTL = "0.2"
    READERS_ELSEWHERE = 8  # through the unsharded daemon, which does not write the files
    READERS_AT_WRITER = 2
    WRITERS = 3


def phase(kind: str, secs: float, work: Path, ledger: Ledger, rss_limit_kib: int, cuts: bool) -> dict:
    work.mkdir(parents=True)
    with contextlib.ExitStack() as cleanup:  # also on Ctrl-C / SIGTERM: nothing left behind
        # moto serves one request at a time, so that its conditional PUTs are atomic as S3's
        # are (threaded moto checks If-Match, then writes: the shard rewrites' compare-and-swap
        # would lose chunks through the server's fault). s3s-fs has no such mode.
        server = S3_SERVERS[kind](work / "server", **({"atomic_conditions": True} if kind == "moto" else {}))
        cleanup.callback(server.stop)
        server.start()
        client = server.client()
        client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/u.zarr/zarr.json",
                          Body=json.dumps(ARRAY_META).encode())
        for path in RAW_PATHS:
            ledger.attempt(path, 0)
            ledger.ack(path, 0)
            client.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{path}", Body=content(path, 0))
        scale = max(0.25, min(1.0, secs / 900))  # chaos intervals shrink for short runs
        proxy = Proxy(server.port, scale, cuts)
        cleanup.callback(proxy.kill)
        proxy.start()
        ttl = Contention.TTL if Contention.on else "2"
        common = ["--endpoint-url", f"http://127.0.0.1:{proxy.port}", "--metadata-ttl", ttl,
                  "--cache-max-size", "2M"]
        mounts = {}
        for view in ("unsharded", "raw"):
            m = Mount(server.url(PREFIX), work / f"mnt-{view}", view=view, env=DAEMON_ENV,
                      extra_args=common + ["--cache-dir", str(work / f"cache-{view}")])
            cleanup.callback(m.stop)
            mounts[view] = m.start()
        figures = soak(kind, secs, mounts, server, proxy, ledger, rss_limit_kib)
        for view, m in mounts.items():
            problems = m.stop()
            if problems:
                ledger.fail(f"{kind}: the {view} daemon: {'; '.join(problems)}")
    return figures


def soak(kind: str, secs: float, mounts: dict, server, proxy: "Proxy", ledger: Ledger,
         rss_limit_kib: int) -> dict:
    """The workload and the chaos for `secs`, watching the daemons; then the final check."""
    restart_every = max(10.0, min(180.0, secs / 5))
    client = server.client()  # straight to the server, for failure messages
    u, r = mounts["unsharded"].path, mounts["raw"].path
    stop, busy = threading.Event(), {}
    if Contention.on:
        restart_every = float("inf")  # interleavings, not outages
        few = RAW_PATHS[:Contention.FILES]
        jobs = ([(writer, r, [p], client) for p in few[:Contention.WRITERS]]
                + [(reader, u, few, False, client)] * Contention.READERS_ELSEWHERE
                + [(reader, r, few, True, client)] * Contention.READERS_AT_WRITER)
    else:
        jobs = [
            (writer, u, CHUNK_PATHS[0::2], client), (writer, u, CHUNK_PATHS[1::2], client),
            (writer, r, RAW_PATHS[0::2], client), (writer, r, RAW_PATHS[1::2], client),
            (reader, u, CHUNK_PATHS, True, client), (reader, u, RAW_PATHS, False, client),
            (reader, r, RAW_PATHS, True, client), (reader, r, RAW_PATHS, True, client),
        ]
    threads = [threading.Thread(target=fn, args=(ledger, mnt, paths, stop, busy, *more), daemon=True)
               for fn, mnt, paths, *more in jobs]
    for t in threads:
        t.start()
    try:
        figures = watch(kind, secs, restart_every, mounts, server, proxy, ledger, rss_limit_kib, busy)
    finally:
        stop.set()
    for t in threads:
        t.join(STUCK_SECS)
        if t.is_alive():
            ledger.fail(f"{kind}: a worker did not finish within {STUCK_SECS:.0f} s of the end")
    final_check(ledger, u, r, client)
    return figures


def watch(kind: str, secs: float, restart_every: float, mounts: dict, server, proxy: "Proxy",
          ledger: Ledger, rss_limit_kib: int, busy: dict) -> dict:
    """Sample the daemons (alive, RSS) and the operations under way (`busy`: thread -> since
    when) every second; an outage every `restart_every` seconds."""
    peak = {view: 0 for view in mounts}
    dead, over, stuck = set(), set(), []  # each reported once
    restarts, started = 0, time.monotonic()
    next_outage = started + restart_every
    every = "no outages" if restart_every == float("inf") else f"an outage every {restart_every:.0f} s"
    print(f"soak: {kind}: {secs:.0f} s, {every}", flush=True)
    while time.monotonic() - started < secs:
        for view, m in mounts.items():
            if not m.alive() and view not in dead:
                dead.add(view)
                ledger.fail(f"{kind}: the {view} daemon died (exit status {m.proc.poll()}):\n"
                            f"{m.log_text(40)}")
            kib = rss_kib(m.proc.pid)
            peak[view] = max(peak[view], kib)
            if kib > rss_limit_kib and view not in over:
                over.add(view)
                ledger.fail(f"{kind}: the {view} daemon's RSS is {kib >> 10} MiB, over the limit")
        now = time.monotonic()
        for since in list(busy.values()):
            if now - since > STUCK_SECS and not stuck:
                stuck.append(since)
                ledger.fail(f"{kind}: an operation has not returned for {now - since:.0f} s")
        if now >= next_outage and now - started + OUTAGE_SECS < secs:
            outage(kind, server, proxy, ledger)
            restarts += 1
            next_outage = time.monotonic() + restart_every
        time.sleep(1)  # the monitor's sampling interval
    return {"restarts": restarts, "peak_rss_mib": {v: k >> 10 for v, k in peak.items()}}


def outage(kind: str, server, proxy: Proxy, ledger: Ledger):
    """The server (s3s-fs) or the way to it (moto: its data lives only in its memory) goes away
    for OUTAGE_SECS and comes back."""
    with ledger.lock:
        ledger.outages.append((time.time(), float("inf")))
    if kind == "moto":
        proxy.kill()
    else:
        pid = int((server.dir / f"{kind}.pid").read_text())
        os.kill(pid, signal.SIGKILL)
        server.stop()
    time.sleep(OUTAGE_SECS)  # the outage itself
    if kind == "moto":
        proxy.start()
    else:
        server.start()
    with ledger.lock:
        ledger.outages[-1] = (ledger.outages[-1][0], time.time())


def final_check(ledger: Ledger, u: Path, r: Path, client):
    """Every path reads back, through its writer's daemon, as its last acknowledged version
    or a later attempt (one whose close failed may still have been stored)."""
    for path, acked in sorted(ledger.acked.items()):
        mnt = u if path.startswith("u.zarr/") else r
        try:
            data = (mnt / path).read_bytes()
        except OSError as e:
            ledger.fail(f"final read of {path}: {e}")
            continue
        v = ledger.check(path, data, "final read")
        if v is not None and v < acked:
            ledger.stale_or_lost(path, f"final read of {path}: version {v}, older than the "
                                 f"acknowledged {acked}", acked, client)


def interrupted(*_):
    raise KeyboardInterrupt  # unwinds through the phase's cleanup


def main() -> int:
    # Also when started in the background, where a shell leaves SIGINT ignored.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupted)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--servers", default="moto,s3s-fs")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--rss-limit-mb", type=int, default=1024)
    ap.add_argument("--cut-connections", choices=["auto", "always", "never"], default="auto",
                    help="auto: only in front of servers whose conditional PUTs are atomic")
    ap.add_argument("--contention", action="store_true",
                    help="few files, many readers of the other daemon's rewrites, short TTL, no outages")
    ap.add_argument("--readers-at-writer", type=int, default=Contention.READERS_AT_WRITER,
                    help="--contention: reader threads through the daemon that rewrites the files")
    args = ap.parse_args()
    Contention.on = args.contention
    Contention.READERS_AT_WRITER = args.readers_at_writer
    kinds = args.servers.split(",")
    for k in kinds:
        if k not in S3_SERVERS:
            ap.error(f"unknown server {k!r} (known: {', '.join(S3_SERVERS)})")
    work = args.workdir or Path(tempfile.mkdtemp(prefix="zarr-mount-soak."))
    results, t0 = {}, time.monotonic()
    for kind in kinds:
        ledger = Ledger()
        ledger.inconsistent_gets = kind not in CONSISTENT_GETS
        try:
            cuts = {"always": True, "never": False}.get(args.cut_connections, kind in ATOMIC_CAS)
            results[kind] = (ledger, phase(kind, args.minutes * 60 / len(kinds), work / kind, ledger,
                                           args.rss_limit_mb << 10, cuts))
        except pytest.skip.Exception as e:
            # A server that cannot be installed, outside CI (zm_s3.server_unavailable; under
            # CI=true or ZM_REQUIRE_SERVERS=1 it is a failure, below).
            print(f"soak: {kind} skipped: {e.msg}", flush=True)
        except (Exception, pytest.fail.Exception) as e:  # a phase that cannot run is a failure
            ledger.fail(f"{kind}: {type(e).__name__}: {e}")
            results[kind] = (ledger, {"restarts": 0, "peak_rss_mib": {}})
    print(f"\nsoak: {time.monotonic() - t0:.0f} s in all; work files in {work}")
    failed = False
    for kind, (ledger, figures) in results.items():
        c = ledger.counts
        print(f"{kind}: {c['writes']} writes acknowledged ({c['bytes written'] / 1e6:.1f} MB), "
              f"{c['reads']} reads checked ({c['bytes read'] / 1e6:.1f} MB; "
              f"{c['reads of a write under way']} of them of a write under way, "
              f"{c['reads mixed by a rewrite through the same mount']} mixed by a rewrite through "
              "their own mount, "
              f"{c['torn reads']} torn by the other daemon's rewrite), "
              f"{c['reads of a chunk never written (ENOENT)']} ENOENT of a chunk never written, "
              f"{figures['restarts']} outages survived, largest RSS "
              + ", ".join(f"{v} {mib} MiB" for v, mib in figures["peak_rss_mib"].items()))
        for what, n in sorted(ledger.errors.items()):
            print(f"  errors: {what}: {n}")
        for ex in ledger.examples:
            print(f"  e.g. {ex}")
        print(f"  checks failed (wrong bytes, lost writes, daemon deaths, RSS): {len(ledger.failures)}")
        for f in ledger.failures[:20]:
            print(f"  FAILED: {f}")
        if len(ledger.failures) > 20:
            print(f"  ... and {len(ledger.failures) - 20} more")
        failed |= bool(ledger.failures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
