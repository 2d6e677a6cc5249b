#!/usr/bin/env python3
"""A TCP proxy on 127.0.0.1 that adds latency, for cloud-like benchmarks against local servers.

    latency_proxy.py --target PORT [--listen PORT] [--delay-ms 20]

Bytes are forwarded both ways unchanged; the first bytes of each answer (the first data from the
server after the client has sent something) are held back for --delay-ms, so every request on a
connection (HTTP keep-alive included) pays one round trip, as it would against a real store.
New connections pay it too (on their first answer). Prints "listening PORT" once ready; stops on
SIGTERM or SIGINT.
"""

import argparse
import asyncio
import signal
import sys


async def pump_requests(reader, writer, state):
    try:
        while data := await reader.read(1 << 16):
            state["awaiting"] = True
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            pass


async def pump_answers(reader, writer, state, delay):
    try:
        while data := await reader.read(1 << 16):
            if state["awaiting"]:
                state["awaiting"] = False
                await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def handle(client_r, client_w, target, delay):
    try:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", target)
    except OSError:
        client_w.close()
        return
    state = {"awaiting": False}
    up = asyncio.create_task(pump_requests(client_r, server_w, state))
    down = asyncio.create_task(pump_answers(server_r, client_w, state, delay))
    await asyncio.wait([up, down], return_when=asyncio.FIRST_COMPLETED)
    await asyncio.sleep(0)
    for t in (up, down):
        if not t.done():
            # The other side is finished: let the rest drain, then stop.
            try:
                await asyncio.wait_for(t, 30)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                t.cancel()
    for w in (server_w, client_w):
        w.close()


async def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=int, required=True, help="port of the server on 127.0.0.1")
    ap.add_argument("--listen", type=int, default=0, help="port to listen on (0: any free one)")
    ap.add_argument("--delay-ms", type=float, default=20.0)
    args = ap.parse_args()
    delay = args.delay_ms / 1000.0
    server = await asyncio.start_server(
        lambda r, w: handle(r, w, args.target, delay), "127.0.0.1", args.listen, backlog=512
    )
    print(f"listening {server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(s, stop.set)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
