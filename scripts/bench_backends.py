"""Requests per backend: zarr-python reading a sharded array through the unsharded view of a
mount of each object-store backend (moto and s3s-fs for s3://, fake-gcs-server for gs://,
Azurite for az://, nginx serving the array's directory for http://), all on 127.0.0.1
(scripts/s3-server.sh).

Every request the daemon sends passes a counting relay; the read is read-only, so requests
carry no bodies and the relay counts request lines exactly. Each read is from a fresh daemon.

    .venv/bin/python scripts/bench_backends.py --bin target/release/zarr-mount [--quick]
"""

import argparse
import asyncio
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Mounted, free_port  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SCRIPT = str(REPO / "scripts" / "s3-server.sh")
METHODS = ("GET", "HEAD", "PUT", "POST", "DELETE", "PROPFIND")
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
GCS_KEY = '{"disable_oauth":true,"client_email":"","private_key":"","private_key_id":""}'


class Relay:
    """127.0.0.1:port -> upstream, counting request lines (method + whether it is a listing)."""

    def __init__(self, upstream: int, port: int):
        self.upstream = upstream
        self.port = port
        self.counts = collections.Counter()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", self.port))
        ready.set()
        self.loop.run_until_complete(server.serve_forever())

    def _count(self, line: bytes):
        parts = line.split(b" ")
        if len(parts) == 3 and parts[0].decode(errors="replace") in METHODS and parts[2].startswith(b"HTTP/"):
            method, target = parts[0].decode(), parts[1].decode(errors="replace")
            listing = "list-type=2" in target or "restype=container" in target or "/o?" in target
            self.counts["LIST" if method == "GET" and listing else method] += 1

    async def _client(self, reader, writer):
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.close()
            return

        async def down():
            while data := await up_r.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        task = asyncio.ensure_future(down())
        buf = b""
        while data := await reader.read(65536):
            buf += data
            *lines, buf = buf.split(b"\r\n")
            for line in lines:
                self._count(line)
            up_w.write(data)
            await up_w.drain()
        up_w.close()
        await task

    def take(self):
        c = dict(self.counts)
        self.counts.clear()
        return c


class Server:
    def __init__(self, kind: str, work: Path, relay_port: int):
        self.kind = kind
        self.port = free_port()
        self.dir = work / f"{kind}-{self.port}"
        env = dict(os.environ, S3S_ACCESS_KEY="test", S3S_SECRET_KEY="test",
                   FAKE_GCS_PUBLIC_HOST=f"127.0.0.1:{relay_port}")
        subprocess.run([SCRIPT, "start", str(self.dir), str(self.port), kind], check=True,
                       stdout=subprocess.DEVNULL, env=env)
        self.url = f"http://127.0.0.1:{self.port}"
        if kind == "moto":
            urllib.request.urlopen(urllib.request.Request(f"{self.url}/bkt", method="PUT")).read()
        elif kind == "s3s-fs":
            (self.dir / "data" / "bkt").mkdir(parents=True, exist_ok=True)
        elif kind == "fake-gcs":
            req = urllib.request.Request(f"{self.url}/storage/v1/b?project=x", method="POST",
                                         data=json.dumps({"name": "bkt"}).encode(),
                                         headers={"Content-Type": "application/json"})
            urllib.request.urlopen(req).read()
        elif kind == "azurite":
            from azure.storage.blob import BlobServiceClient
            conn = (f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={AZ_KEY};"
                    f"BlobEndpoint={self.url}/devstoreaccount1;")
            BlobServiceClient.from_connection_string(conn).create_container("bkt")

    def upload(self, local: Path, binary: str, work: Path):
        files = [p for p in local.rglob("*") if p.is_file()]
        if self.kind == "s3s-fs":  # its buckets are directories
            shutil.copytree(local, self.dir / "data" / "bkt" / "arr", dirs_exist_ok=True)
        elif self.kind == "nginx":  # static files
            shutil.copytree(local, self.dir / "data" / "arr", dirs_exist_ok=True)
        elif self.kind == "fake-gcs":  # no XML-API uploads (docs/SOURCES.md): its JSON API
            for p in files:
                name = f"arr/{p.relative_to(local)}"
                req = urllib.request.Request(
                    f"{self.url}/upload/storage/v1/b/bkt/o?uploadType=media&name={name}",
                    method="POST", data=p.read_bytes(), headers={"Content-Type": "application/octet-stream"})
                urllib.request.urlopen(req).read()
        else:  # through a raw mount
            mnt = work / "upload-mnt"
            mnt.mkdir(exist_ok=True)
            source, args, env = self.mount_spec(self.url)
            with Mounted(binary, source.replace("/arr", ""), mnt, "--view", "raw", *args, env=env):
                shutil.copytree(local, mnt / "arr")

    def mount_spec(self, endpoint: str):
        env = dict(os.environ, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_REGION="us-east-1")
        env.pop("AWS_CA_BUNDLE", None)
        if self.kind == "nginx":
            return f"{endpoint}/arr", [], env
        if self.kind in ("moto", "s3s-fs"):
            return "s3://bkt/arr", ["--endpoint-url", endpoint], env
        if self.kind == "fake-gcs":
            return "gs://bkt/arr", ["--endpoint-url", endpoint, "-o", f"google_service_account_key={GCS_KEY}"], env
        env["AZURITE_BLOB_STORAGE_URL"] = endpoint
        return "az://bkt/arr", ["-o", "azure_storage_use_emulator=true"], env

    def stop(self):
        subprocess.run([SCRIPT, "stop", str(self.dir)], stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="moto,s3s-fs,fake-gcs,azurite,nginx")
    args = ap.parse_args()
    shape, chunks, shards = ((512, 512), (64, 64), (256, 256)) if args.quick else \
        ((2048, 2048), (128, 128), (1024, 1024))
    work = Path(tempfile.mkdtemp(prefix="zm-bench-backends-"))
    try:
        local = work / "local"
        ref = np.random.default_rng(5).standard_normal(shape, dtype="float32")
        a = zarr.create_array(str(local), shape=shape, chunks=chunks, shards=shards, dtype="float32",
                              compressors=zarr.codecs.ZstdCodec(level=1))
        a[:] = ref
        n_chunks = (shape[0] // chunks[0]) * (shape[1] // chunks[1])
        n_shards = (shape[0] // shards[0]) * (shape[1] // shards[1])
        print(f"array {shape} float32, chunks {chunks}, shards {shards}: {n_shards} shards, "
              f"{n_chunks} chunks; zarr-python reads it whole through the unsharded view, fresh daemon")
        print(f"{'backend':10s} {'seconds':>8s} {'requests':>9s}  by kind")
        for kind in args.only.split(","):
            relay_port = free_port()
            srv = Server(kind, work, relay_port)
            try:
                srv.upload(local, args.bin, work)
                relay = Relay(srv.port, relay_port)
                source, margs, env = srv.mount_spec(f"http://127.0.0.1:{relay.port}")
                mnt = work / f"mnt-{kind}"
                mnt.mkdir()
                relay.take()
                with Mounted(args.bin, source, mnt, "--read-only", *margs, env=env):
                    t = time.perf_counter()
                    got = zarr.open_array(str(mnt), mode="r")[:]
                    took = time.perf_counter() - t
                    assert np.array_equal(got, ref), kind
                counts = relay.take()
                kinds = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                print(f"{kind:10s} {took:8.2f} {sum(counts.values()):9d}  {kinds}")
            finally:
                srv.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
