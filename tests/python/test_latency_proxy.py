"""scripts/latency_proxy.py, which the cloud benchmarks (scripts/bench_cloud.py) put between the
mount and a local S3 server: bytes pass unchanged, every answer is held back by the delay,
concurrent connections are delayed side by side (not one after another), and --conn-mbps caps
each connection (not the sum); its chaos options add latency spikes and cut connections. No
binary needed."""

from __future__ import annotations

import http.client
import http.server
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

PROXY = Path(__file__).resolve().parents[2] / "scripts" / "latency_proxy.py"
PAYLOAD = bytes(range(256)) * (16 << 10)  # 4 MiB, not all one byte


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: several requests on one connection

    def do_GET(self):  # noqa: N802 (http.server's name)
        n = int(self.path.strip("/") or len(PAYLOAD))
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.end_headers()
        self.wfile.write(PAYLOAD[:n])

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def origin():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def proxy(origin):
    procs = []

    def start(delay_ms: float, mbps: float = 0.0, *chaos: str) -> str:
        p = subprocess.Popen([sys.executable, str(PROXY), "--target", str(origin), "--delay-ms", str(delay_ms),
                              "--conn-mbps", str(mbps), *chaos], stdout=subprocess.PIPE, text=True)
        procs.append(p)
        port = int(p.stdout.readline().split()[1])
        return f"http://127.0.0.1:{port}"

    yield start
    for p in procs:
        p.terminate()
        p.wait(10)


def get(url: str, n: int | None = None) -> tuple[bytes, float]:
    t = time.monotonic()
    with urllib.request.urlopen(f"{url}/{n or ''}", timeout=30) as r:
        body = r.read()
    return body, time.monotonic() - t


def test_bytes_pass_unchanged_and_every_answer_is_delayed(proxy):
    url = proxy(100)
    body, took = get(url)
    assert body == PAYLOAD
    assert took >= 0.1
    # Keep-alive: the second request on the same connection pays the delay again.
    import http.client
    c = http.client.HTTPConnection(url.removeprefix("http://"), timeout=30)
    for _ in range(2):
        t = time.monotonic()
        c.request("GET", "/1000")
        assert c.getresponse().read() == PAYLOAD[:1000]
        assert time.monotonic() - t >= 0.1
    c.close()


def test_concurrent_connections_are_delayed_side_by_side(proxy):
    url = proxy(1000)
    t = time.monotonic()
    with ThreadPoolExecutor(8) as ex:
        bodies = list(ex.map(lambda _: get(url, 100_000)[0], range(8)))
    took = time.monotonic() - t
    assert all(b == PAYLOAD[:100_000] for b in bodies)
    # Side by side they take about 1 s; one after another, 8 s. The bound between the two is
    # one that a loaded machine cannot miss (it would need every request 6 times slower).
    assert 1.0 <= took < 6.0, took


def test_the_cap_is_per_connection(proxy):
    # Slow enough that the proxy's pacing, not the machine's load, sets every duration.
    url = proxy(0, mbps=4)
    body, one = get(url)  # 4.2 MB at 4 MB/s: at least 1.05 s
    assert body == PAYLOAD
    assert one >= 1.0, one
    t = time.monotonic()
    with ThreadPoolExecutor(4) as ex:
        assert all(b == PAYLOAD for b, _ in ex.map(lambda _: get(url), range(4)))
    four = time.monotonic() - t
    # Four connections carry four times as much in about the time of one (not four times it).
    assert four < 2.5 * one, (one, four)


def test_a_spike_adds_its_delay(proxy):
    # One spike as long as the test: every answer pays the spike's 300 ms on top of none.
    url = proxy(0, 0, "--spike-every", "3600", "--spike-secs", "3600", "--spike-ms", "300")
    body, took = get(url, 1000)
    assert body == PAYLOAD[:1000]
    assert took >= 0.3, took


def test_drop_every_cuts_connections_in_the_middle(proxy):
    # 4 MiB at 1 MB/s takes at least 4 s; the proxy cuts every connection each 0.2 s.
    url = proxy(0, 1, "--drop-every", "0.2")
    with pytest.raises((ConnectionError, http.client.IncompleteRead, urllib.error.URLError)):
        get(url)
