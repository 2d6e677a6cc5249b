"""A real browser reads `zarr-mount serve`: headless Chromium (Debian's `chromium`, WebGL on
SwiftShader) runs Neuroglancer (the client the `neuroglancer` PyPI package ships, served by its
Python server from .venv-neuroglancer, see ng_viewer.py) on an OME-Zarr 0.5 image, sharded,
through `serve --cors-origin` (the viewer's origin), over the `raw` view (Neuroglancer's zarr3
driver reads the shards) and the `v2` view (its zarr2 driver reads the chunks the view makes).

The test waits on events, never on time: Neuroglancer takes its screenshot only once every
chunk of the view is loaded and drawn; Chromium's DevTools protocol reports each response the
page and its workers received, and each request that failed (a refused CORS check ends the test
at once). Checked: the screenshot shows the image's pattern (a white square in the top-left
quarter of a dark grey image, on the viewer's lighter grey) where nothing else would draw it,
and every request the viewer sent to the server was answered 200 or 206 (404 only for the
metadata documents it probes for) with `Access-Control-Allow-Origin` for the viewer's origin,
shard or chunk requests among them, each answered whole as serve's access log shows. With the
server allowing another origin, Chromium refuses its answers.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

from zm_harness import REPO, missing, require_tool
from zm_serve import Server

NG_PYTHON = REPO / ".venv-neuroglancer" / "bin" / "python"
NG_VIEWER = Path(__file__).resolve().parent / "ng_viewer.py"
# Chromium's start, Neuroglancer's load and SwiftShader's drawing take ~10 s here; the bound
# only ends a run that hangs.
DEADLINE = float(os.environ.get("ZM_BROWSER_TIMEOUT", "120"))
SIZE = 256  # the image is SIZE x SIZE
SQUARE = (32, 96)  # rows and columns [32, 96): 255; the rest 64
SHOT = (640, 480)
BACKGROUND = 128  # the viewer's, outside the image
# Zarr's metadata documents, which a viewer asks for to learn what a path holds
PROBE = re.compile(r"/(zarr\.json|\.zarray|\.zgroup|\.zattrs|\.zmetadata)$")
# a shard's key in the raw view (c/I/J), a chunk's in the v2 view (I/J: the view keeps the
# store's separator)
CHUNK = {"raw": re.compile(r"/s[01]/c/\d+/\d+$"), "v2": re.compile(r"/s[01]/\d+/\d+$")}


def write_image(path: Path) -> np.ndarray:
    """An OME-Zarr 0.5 image, 2 levels, shards of 4x4 chunks, written by ome-zarr-py."""
    import zarr
    from ome_zarr.format import FormatV05
    from ome_zarr.writer import write_image as ome_write

    data = np.full((SIZE, SIZE), 64, dtype="uint8")
    data[SQUARE[0]:SQUARE[1], SQUARE[0]:SQUARE[1]] = 255
    root = zarr.open_group(path, mode="w", zarr_format=3)
    ome_write(data, root, scale_factors=[2], axes=["y", "x"], fmt=FormatV05(),
              storage_options=[{"chunks": (32, 32), "shards": (128, 128)}] * 2)
    assert "sharding_indexed" in (path / "s0" / "zarr.json").read_text()
    return data


# --------------------------------------------------------------------------- DevTools protocol


class DevTools:
    """Chromium over its DevTools protocol (a websocket, through aiohttp): one page, its
    workers attached as they start, every response they receive recorded."""

    def __init__(self, ws, server: str):
        self.ws = ws
        self.server = server  # the failures that count: of requests to this base URL
        self.next_id = 0
        self.pending: dict[int, asyncio.Future] = {}
        self.responses: list[dict] = []  # Network.responseReceived params
        self.failures: list[dict] = []  # Network.loadingFailed params, with the request's URL
        self.urls: dict[str, str] = {}  # request id -> URL
        self.console: list[str] = []
        self.failed = asyncio.Event()  # set at the first Network.loadingFailed
        self.reader = asyncio.create_task(self._read())

    async def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        fut = asyncio.get_running_loop().create_future()
        self.pending[self.next_id] = fut
        await self.ws.send_str(json.dumps(msg))
        return await fut

    async def _read(self) -> None:
        async for m in self.ws:
            msg = json.loads(m.data)
            if "id" in msg:
                fut = self.pending.pop(msg["id"], None)
                if fut and not fut.done():
                    if "error" in msg:
                        fut.set_exception(RuntimeError(f"DevTools: {msg['error']}"))
                    else:
                        fut.set_result(msg.get("result", {}))
                continue
            method, params = msg.get("method"), msg.get("params", {})
            if method == "Network.responseReceived":
                self.responses.append(params)
            elif method == "Network.requestWillBeSent":
                self.urls[params["requestId"]] = params["request"]["url"]
            elif method == "Network.loadingFailed" and not params.get("canceled"):
                # (a viewer cancels the requests of chunks it no longer needs)
                url = self.urls.get(params["requestId"], "")
                if url.startswith(self.server):
                    self.failures.append(dict(params, url=url))
                    self.failed.set()
            elif method == "Runtime.consoleAPICalled":
                self.console.append(" ".join(str(a.get("value", a.get("description", "")))
                                             for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                self.console.append(str(params.get("exceptionDetails", {}))[:500])
            elif method == "Target.attachedToTarget":
                asyncio.create_task(self._watch(params["sessionId"], params["targetInfo"]["type"]))

    async def _watch(self, session: str, kind: str) -> None:
        """Record a page's or worker's traffic, then let it run (it waits for us)."""
        await self.call("Network.enable", {}, session)
        await self.call("Runtime.enable", {}, session)
        if kind == "page":
            await self.call("Page.enable", {}, session)
        await self.call("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True,
                                                 "flatten": True}, session)
        await self.call("Runtime.runIfWaitingForDebugger", {}, session)


async def start_chromium(tmp: Path):
    """Chromium headless with software WebGL; returns (process, its browser websocket URL)."""
    proc = await asyncio.create_subprocess_exec(
        require_tool("chromium", "chromium-browser"), "--headless=new", "--no-sandbox", "--use-angle=swiftshader",
        "--enable-unsafe-swiftshader", "--use-gl=angle", "--no-first-run",
        "--no-default-browser-check", "--disable-gpu-sandbox", "--disable-dev-shm-usage",
        "--remote-debugging-port=0",
        f"--user-data-dir={tmp / 'chromium-profile'}", f"--window-size={SHOT[0]},{SHOT[1]}",
        "about:blank", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, start_new_session=True)
    log = open(tmp / "chromium.log", "wb")
    try:
        while True:
            line = await proc.stderr.readline()
            if not line:
                raise RuntimeError(f"chromium exited ({await proc.wait()}): "
                                   f"{(tmp / 'chromium.log').read_text()}")
            log.write(line)
            log.flush()
            m = re.search(rb"DevTools listening on (ws://\S+)", line)
            if m:
                break
    except BaseException:
        await stop_process(proc)
        raise

    async def drain():
        while line := await proc.stderr.readline():
            log.write(line)
        log.close()

    asyncio.create_task(drain())
    return proc, m.group(1).decode()


async def stop_process(proc) -> None:
    """Kill the process and all it started (it leads its own session)."""
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    await proc.wait()


# --------------------------------------------------------------------------- the test


async def view_in_neuroglancer(tmp: Path, image: Path, view: str, scheme: str,
                               allow: str | None = None) -> dict:
    """Neuroglancer's screenshot of `image` served through `view`, with the server's answers
    to the browser; the server lets `allow` read (default: the viewer's origin)."""
    import aiohttp

    ng = chrome = server = None
    result: dict = {"stats": []}
    try:
        ng = await asyncio.create_subprocess_exec(
            str(NG_PYTHON), str(NG_VIEWER), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(tmp / "ng_viewer.log", "wb"), start_new_session=True)

        async def from_ng() -> dict:
            line = await ng.stdout.readline()
            if not line:
                raise RuntimeError(f"ng_viewer.py exited: {(tmp / 'ng_viewer.log').read_text()[-3000:]}")
            return json.loads(line)

        hello = await from_ng()
        origin = hello["origin"]
        server = Server(image.parent, tmp / "serve.log",
                        args=["--view", view, "--cors-origin", allow or origin, "-v"]).start()
        source = f"{scheme}://{server.url}{view}/{image.name}/"
        png = tmp / f"{view}.png"
        ng.stdin.write((json.dumps({"source": source, "size": list(SHOT), "png": str(png),
                                   "background": "#%02x%02x%02x" % ((BACKGROUND,) * 3)}) + "\n").encode())
        await ng.stdin.drain()
        assert (await from_ng()) == {"state": "set"}

        chrome, ws_url = await start_chromium(tmp)
        async with aiohttp.ClientSession() as http, http.ws_connect(ws_url, max_msg_size=0) as ws:
            tools = DevTools(ws, server.url)
            result["tools"] = tools
            target = await tools.call("Target.createTarget", {"url": "about:blank"})
            attached = await tools.call("Target.attachToTarget", {"targetId": target["targetId"],
                                                                  "flatten": True})
            page = attached["sessionId"]
            await tools._watch(page, "page")
            await tools.call("Page.navigate", {"url": hello["viewer_url"]}, page)
            # Until the screenshot, or the first request the browser could not complete (a
            # refused CORS check among them): Neuroglancer would wait for it forever.
            failed = asyncio.create_task(tools.failed.wait())
            while True:
                line = asyncio.create_task(from_ng())
                await asyncio.wait([line, failed], return_when=asyncio.FIRST_COMPLETED)
                if not line.done():
                    line.cancel()
                    raise AssertionError(f"the browser could not complete a request: {tools.failures}\n"
                                         f"console: {tools.console}")
                msg = line.result()
                if "stats" in msg:
                    result["stats"].append(msg["stats"])
                    continue
                assert msg.get("screenshot") == str(png), msg
                break
            failed.cancel()
            result["png"] = png
            result["origin"] = origin
            result["base"] = server.url
        return result
    finally:
        await stop_process(chrome)
        await stop_process(ng)
        if server is not None:
            server.stop()
            result["log"] = server.log_path.read_text(errors="replace")


def check_picture(png: Path) -> None:
    """The screenshot shows the image: a square of dark grey (64) the size of the image, on the
    viewer's background (128), with a white (255) square where the data has it."""
    from PIL import Image

    px = np.asarray(Image.open(png).convert("L")).astype(int)
    assert px.shape == (SHOT[1], SHOT[0]), px.shape

    def box(mask):
        rows, cols = np.nonzero(mask)
        assert rows.size, f"no such pixels in the screenshot {png} (values {np.unique(px)})"
        return rows.min(), cols.min(), rows.max() + 1, cols.max() + 1

    img = box(abs(px - BACKGROUND) > 32)
    h, w = img[2] - img[0], img[3] - img[1]
    assert h >= SIZE // 4 and abs(h - w) <= 2, f"the image is not a square: {img}"
    scale = w / SIZE
    lo, hi = SQUARE
    want = (img[0] + lo * scale, img[1] + lo * scale, img[0] + hi * scale, img[1] + hi * scale)
    sq = box(px > 200)
    assert all(abs(g - x) <= max(2, scale) for g, x in zip(sq, want)), f"square at {sq}, want {want}"
    inside = px[img[0]:img[2], img[1]:img[3]]
    white = np.zeros_like(inside, dtype=bool)
    white[sq[0] - img[0]:sq[2] - img[0], sq[1] - img[1]:sq[3] - img[1]] = True
    assert (abs(inside[white] - 255) <= 8).mean() > 0.99
    assert (abs(inside[~white] - 64) <= 8).mean() > 0.99


@pytest.fixture
def image(tmp_path, zarr_mount_bin) -> Path:
    """The image to serve, once Chromium and Neuroglancer are known to be here."""
    require_tool("chromium", "chromium-browser")
    if not NG_PYTHON.exists():
        missing(f"{NG_PYTHON} is missing (scripts/setup.sh installs it)")
    path = tmp_path / "data" / "image.ome.zarr"
    path.parent.mkdir()
    write_image(path)
    return path


@pytest.mark.parametrize("view,scheme", [("raw", "zarr3"), ("v2", "zarr2")])
def test_neuroglancer_in_chromium_shows_the_served_image(tmp_path, image, view, scheme):

    try:
        res = asyncio.run(asyncio.wait_for(view_in_neuroglancer(tmp_path, image, view, scheme), DEADLINE))
    except TimeoutError:
        logs = "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}"
                         for f in sorted(tmp_path.glob("*.log")))
        pytest.fail(f"no screenshot from Neuroglancer in {DEADLINE} s\n{logs}")

    check_picture(res["png"])

    # Every answer from the server, to the page or its workers: 200 (206 for a part of a
    # shard; 404 for the metadata documents the viewer probes for) with CORS for the viewer's
    # origin.
    tools = res["tools"]
    ours = [r for r in tools.responses if r["response"]["url"].startswith(res["base"])]
    assert ours, (tools.responses, tools.console)
    for r in ours:
        h = {k.lower(): v for k, v in r["response"]["headers"].items()}
        ok = (200, 206) if not PROBE.search(r["response"]["url"]) else (200, 206, 404)
        assert r["response"]["status"] in ok, r["response"]
        assert h.get("access-control-allow-origin") == res["origin"], r["response"]
    assert not tools.failures, tools.failures
    chunks = [r for r in ours if CHUNK[view].search(r["response"]["url"])]
    assert chunks, [r["response"]["url"] for r in ours]
    # serve's access log: the same chunks, each answer sent whole (the browser's cache may
    # answer some repeated requests itself)
    access = re.compile(r"serve::access: .* path=(\S+) status=(\d+) .* complete=(\w+)")
    logged = [m.groups() for m in map(access.search, res["log"].splitlines()) if m]
    assert logged and all(done == "true" for _, _, done in logged), logged
    assert all(status in ("200", "206") for path, status, _ in logged if not PROBE.search(path)), logged
    asked = {urlsplit(r["response"]["url"]).path for r in chunks}
    assert asked <= {path for path, _, _ in logged}, (asked, logged)


def test_a_viewer_of_another_origin_is_refused(tmp_path, image):
    """The same viewer, the server allowing another origin: Chromium refuses the answers (no
    `Access-Control-Allow-Origin`), so what the test above sees is CORS at work."""
    run = view_in_neuroglancer(tmp_path, image, "raw", "zarr3", allow="https://viewer.example")
    with pytest.raises(AssertionError, match="MissingAllowOriginHeader"):
        asyncio.run(asyncio.wait_for(run, DEADLINE))
