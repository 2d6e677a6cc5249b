#!/usr/bin/env python3
"""A TCP proxy on 127.0.0.1 that adds latency, for cloud-like benchmarks against local servers.

    latency_proxy.py --target PORT [--listen PORT] [--delay-ms 20] [--conn-mbps MB/s]
                     [--spike-every S --spike-secs S --spike-ms MS] [--drop-every S]

Bytes are forwarded both ways unchanged; the first bytes of each answer (the first data from the
server after the client has sent something) are held back for --delay-ms, so every request on a
connection (HTTP keep-alive included) pays one round trip, as it would against a real store.
New connections pay it too (on their first answer). --conn-mbps caps what each connection
carries towards the client (MB/s, 0: no cap), as a real link's per-connection throughput (TCP
window over the round trip) is capped: that is what parallel ranged GETs overcome and what a
loopback set-up otherwise lacks. Prints "listening PORT" once ready; stops on SIGTERM or SIGINT.
--log FILE writes one line per request: the connection, the request's first line and its Range
header (if it is within the first 4 KiB), and when the request went up and its answer came back
(seconds since the proxy started; the start time is the first line), to see which requests
wait on which.

Chaos, for soak tests: --spike-every S adds --spike-ms to every answer's delay during the first
--spike-secs of every S seconds (a latency spike); --drop-every S cuts every open connection
(both sides, in the middle of whatever it carries) every S seconds, as a flaky network would.

Every connection has two threads of its own (one per direction), and the bytes move with
splice(2) through a pipe, never through Python: connections do not wait for each other (the
delays of concurrent requests overlap, as they would on a network), and the proxy costs little
CPU beside the servers and the client it sits between.
"""

import argparse
import os
import signal
import socket
import struct
import sys
import threading
import time

CHUNK = 1 << 20
# With a cap, data goes out in slices this small, so that the rate holds within a request.
PACED_CHUNK = 64 << 10
START = time.time()


class Spikes:
    """Extra delay during the first `secs` of every `every` seconds (none when `every` is 0)."""

    def __init__(self, every: float, secs: float, extra: float):
        self.every, self.secs, self.extra = every, secs, extra

    def now(self) -> float:
        if not self.every:
            return 0.0
        return self.extra if (time.time() - START) % self.every < self.secs else 0.0


NO_SPIKES = Spikes(0, 0, 0)


class Link:
    """One client connection and its connection to the server."""

    def __init__(self, client: socket.socket, server: socket.socket, delay: float, rate: float, log=None,
                 conn=0, spikes: Spikes = NO_SPIKES):
        self.client, self.server = client, server
        self.log, self.conn = log, conn
        self.sent_at, self.request = 0.0, ""
        self.delay, self.rate, self.spikes = delay, rate, spikes
        self.awaiting = False  # a request went up and its answer has not started
        self.lock = threading.Lock()
        self.left = 2  # directions still running

    def requests(self):
        self._pump(self.client, self.server, upward=True)

    def answers(self):
        self._pump(self.server, self.client, upward=False)

    def _peek_request(self, src: socket.socket):
        """Wait for the client's next bytes; if no request is awaiting its answer they start
        one: note its first line. Peeked before the splice takes them: they still go through
        unchanged. (Waiting here, not in the splice, is what lets a keep-alive connection's
        later requests be named: the answer has started by the time they arrive.)"""
        try:
            head = src.recv(4096, socket.MSG_PEEK)
        except OSError:
            head = b""
        if not self.awaiting:
            lines = head.split(b"\r\n")
            ranges = [x for x in lines[1:] if x.lower().startswith(b"range:")]
            self.request = b" ".join(lines[:1] + ranges[:1]).decode("latin-1")
            self.sent_at = time.time() - START

    def _answer_started(self):
        self.log(f"{self.conn} {self.sent_at:.4f} {time.time() - START:.4f} {self.request}")

    def _pump(self, src: socket.socket, dst: socket.socket, upward: bool):
        pipe_r, pipe_w = os.pipe()
        try:
            try:
                import fcntl
                fcntl.fcntl(pipe_w, fcntl.F_SETPIPE_SZ, CHUNK)
            except (OSError, AttributeError):
                pass
            chunk = PACED_CHUNK if (self.rate and not upward) else CHUNK
            ready_at = 0.0  # pacing: when the next slice may go out
            while True:
                if upward and self.log:
                    self._peek_request(src)
                n = os.splice(src.fileno(), pipe_w, chunk)
                if n == 0:
                    break
                if upward:
                    self.awaiting = True
                else:
                    if self.awaiting:
                        self.awaiting = False
                        time.sleep(self.delay + self.spikes.now())
                        if self.log:
                            self._answer_started()
                    if self.rate:
                        now = time.monotonic()
                        ready_at = max(ready_at, now) + n / self.rate
                        if ready_at > now:
                            time.sleep(ready_at - now)
                while n:
                    n -= os.splice(pipe_r, dst.fileno(), n)
        except OSError:
            pass
        finally:
            os.close(pipe_r)
            os.close(pipe_w)
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            with self.lock:
                self.left -= 1
                last = self.left == 0
            if last:
                LINKS.discard(self)
                self.client.close()
                self.server.close()
            elif not upward:
                # The server is done: the client gets nothing more, stop reading from it too.
                try:
                    self.client.shutdown(socket.SHUT_RD)
                except OSError:
                    pass


    def reset(self):
        """Cut both connections now; their final close is abortive (RST). Both pumps then end."""
        for s in (self.client, self.server):
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


LINKS: set = set()  # the open links, for --drop-every


def drop_every(secs: float):
    while True:
        time.sleep(secs)
        for link in list(LINKS):
            link.reset()


def serve(listener: socket.socket, target: int, delay: float, rate: float, log, spikes: Spikes):
    conns = 0
    while True:
        client, _ = listener.accept()
        try:
            server = socket.create_connection(("127.0.0.1", target))
        except OSError:
            client.close()
            continue
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conns += 1
        link = Link(client, server, delay, rate, log, conns, spikes)
        LINKS.add(link)
        for fn in (link.requests, link.answers):
            threading.Thread(target=fn, daemon=True).start()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=int, required=True, help="port of the server on 127.0.0.1")
    ap.add_argument("--listen", type=int, default=0, help="port to listen on (0: any free one)")
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--conn-mbps", type=float, default=0.0,
                    help="cap on each connection's answers in MB/s (0: none)")
    ap.add_argument("--log", help="write each request's timing here (see above)")
    ap.add_argument("--spike-every", type=float, default=0.0, help="seconds between latency spikes")
    ap.add_argument("--spike-secs", type=float, default=1.0, help="how long each spike lasts")
    ap.add_argument("--spike-ms", type=float, default=500.0, help="delay a spike adds to each answer")
    ap.add_argument("--drop-every", type=float, default=0.0,
                    help="reset every open connection this often (seconds; 0: never)")
    args = ap.parse_args()
    log = None
    if args.log:
        out = open(args.log, "a", buffering=1)
        out.write(f"start {START:.4f}\n")
        lock = threading.Lock()

        def log(line):
            with lock:
                out.write(line + "\n")
    listener = socket.create_server(("127.0.0.1", args.listen), backlog=512)
    print(f"listening {listener.getsockname()[1]}", flush=True)
    # Threads are daemons: the process ends with the main thread, on a signal.
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: os._exit(0))
    spikes = Spikes(args.spike_every, args.spike_secs, args.spike_ms / 1000.0)
    threading.Thread(
        target=serve,
        args=(listener, args.target, args.delay_ms / 1000.0, args.conn_mbps * 1e6, log, spikes),
        daemon=True).start()
    if args.drop_every:
        threading.Thread(target=drop_every, args=(args.drop_every,), daemon=True).start()
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
