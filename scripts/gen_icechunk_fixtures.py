#!/usr/bin/env python3
"""Write an Icechunk repository for the zarr-mount tests (issue 24), with the real writers.

    gen_icechunk_fixtures.py OUT
    gen_icechunk_fixtures.py OUT --s3 ENDPOINT [--dead-endpoint URL]

OUT/source.nc   a NetCDF4 file (netCDF4), variable `temp` chunked and uncompressed
OUT/repo/       the repository (PyPI `icechunk`), its history:
                  main: commit 1 (arrays `plain`, `sharded`, `virt`, group `g` with `g/nested`)
                        commit 2 (`plain` changed, array `added`)
                  tag `v1` -> commit 1
                  branch `dev` -> commit 1 + commit 3 (`plain[0, 0]` changed)
                `virt`'s chunks are virtual: byte ranges of source.nc (found with h5py), through
                a local-file virtual chunk container for file://OUT/.
OUT/info.json   the snapshot ids of the three commits and the container prefix.

With --s3 ENDPOINT (an S3-compatible server such as moto; nothing is uploaded):
OUT/s3/source.nc  a NetCDF4 file to be put at s3://bkt/nc/source.nc, variables `temp` (4 chunks
                  of 512 bytes) and `big` (4 chunks of 128 KiB, more than one FUSE read each)
OUT/s3/repo/      a repository whose chunks are all virtual, through a virtual chunk container
                  `s3://bkt/` on ENDPOINT (path-style, plain HTTP), and for the bad-input tests:
                  `past_end` (one chunk whose range runs past the end of the file) and
                  `unreachable` (one chunk in container `s3://gone/` on --dead-endpoint)
OUT/s3/info.json  the containers, the NetCDF key and each virtual chunk's key, offset, length.
"""
import json
import os
import sys

import h5py
import icechunk as ic
import netCDF4
import numpy as np
import zarr


def plain_v1():
    # Values that do not compress: the chunks stay larger than the inline threshold.
    return ((np.arange(120, dtype="uint64") * 2654435761) % 1000003).astype("float64").reshape(12, 10) / 7


def main(out):
    out = os.path.abspath(out)
    os.makedirs(out, exist_ok=True)
    nc_path = os.path.join(out, "source.nc")
    temp = (np.arange(24, dtype="float32") * 1.5 - 7).reshape(4, 6)
    with netCDF4.Dataset(nc_path, "w") as ds:
        ds.createDimension("y", 4)
        ds.createDimension("x", 6)
        v = ds.createVariable("temp", "f4", ("y", "x"), chunksizes=(2, 6), zlib=False)
        v[:] = temp
    with h5py.File(nc_path, "r") as f:
        dset = f["temp"]
        assert dset.dtype == np.dtype("<f4") and dset.compression is None
        spans = [dset.id.get_chunk_info(i) for i in range(dset.id.get_num_chunks())]
    prefix = "file://" + out + "/"

    config = ic.RepositoryConfig.default()
    # Chunks under 100 bytes live inline in the manifests, larger ones in chunks/: both kinds.
    config.inline_chunk_threshold_bytes = 100
    config.set_virtual_chunk_container(
        ic.VirtualChunkContainer(prefix, ic.local_filesystem_store(out + "/"))
    )
    storage = ic.local_filesystem_storage(os.path.join(out, "repo"))
    repo = ic.Repository.create(
        storage, config, authorize_virtual_chunk_access={prefix: None}
    )

    s = repo.writable_session("main")
    root = zarr.group(store=s.store, attributes={"title": "zarr-mount icechunk fixture"})
    a = root.create_array("plain", shape=(12, 10), chunks=(5, 5), dtype="float64")
    a[:] = plain_v1()
    sh = root.create_array(
        "sharded", shape=(8, 8), chunks=(2, 2), shards=(4, 4), dtype="float64"
    )
    sh[:] = np.arange(64, dtype="float64").reshape(8, 8) / 4
    virt = root.create_array(
        "virt", shape=(4, 6), chunks=(2, 6), dtype="float32", compressors=None,
        fill_value=float("nan"),
    )
    del virt
    for info in spans:
        row = info.chunk_offset[0] // 2
        s.store.set_virtual_ref(
            f"virt/c/{row}/0", "file://" + nc_path, offset=info.byte_offset, length=info.size
        )
    g = root.create_group("g")
    n = g.create_array("nested", shape=(5,), chunks=(2,), dtype="uint16")
    n[:] = np.array([1, 2, 3, 4, 5], dtype="uint16")
    c1 = s.commit("first")
    repo.create_tag("v1", c1)
    repo.create_branch("dev", c1)

    s = repo.writable_session("main")
    root = zarr.open_group(store=s.store)
    root["plain"][:] = plain_v1() + 1000
    ad = root.create_array("added", shape=(3, 3), chunks=(3, 3), dtype="int8")
    ad[:] = np.arange(9, dtype="int8").reshape(3, 3)
    c2 = s.commit("second")

    s = repo.writable_session("dev")
    root = zarr.open_group(store=s.store)
    root["plain"][0, 0] = -1
    c3 = s.commit("on dev")

    with open(os.path.join(out, "info.json"), "w") as f:
        json.dump(
            {"commit1": c1, "commit2": c2, "dev": c3, "container": prefix,
             "temp": temp.tolist()},
            f,
        )


S3_BUCKET = "bkt"
S3_NC_KEY = "nc/source.nc"


def chunk_spans(nc_path, var):
    """(chunk row index, byte offset, length) of each chunk of a variable chunked by rows."""
    with h5py.File(nc_path, "r") as f:
        dset = f[var]
        assert dset.compression is None, var
        rows = dset.chunks[0]
        out = []
        for i in range(dset.id.get_num_chunks()):
            info = dset.id.get_chunk_info(i)
            out.append((info.chunk_offset[0] // rows, info.byte_offset, info.size))
    return sorted(out)


def main_s3(out, endpoint, dead_endpoint):
    out = os.path.join(os.path.abspath(out), "s3")
    os.makedirs(out, exist_ok=True)
    nc_path = os.path.join(out, "source.nc")
    temp = (np.arange(512, dtype="float32") * 0.25 - 40).reshape(8, 64)
    big = np.sin(np.arange(4 * 16384, dtype="float64")).reshape(4, 16384)
    with netCDF4.Dataset(nc_path, "w") as ds:
        ds.createDimension("y", 8)
        ds.createDimension("x", 64)
        ds.createDimension("r", 4)
        ds.createDimension("n", 16384)
        ds.createVariable("temp", "f4", ("y", "x"), chunksizes=(2, 64), zlib=False)[:] = temp
        ds.createVariable("big", "f8", ("r", "n"), chunksizes=(1, 16384), zlib=False)[:] = big
    size = os.path.getsize(nc_path)

    def container(prefix, ep):
        # What an on-premises (MinIO, Ceph) user writes: a custom endpoint, path-style, HTTP.
        store = ic.s3_store(region="us-east-1", endpoint_url=ep, allow_http=True,
                            s3_compatible=True, force_path_style=True)
        return ic.VirtualChunkContainer(prefix, store)

    live, dead = f"s3://{S3_BUCKET}/", "s3://gone/"
    config = ic.RepositoryConfig.default()
    config.set_virtual_chunk_container(container(live, endpoint))
    config.set_virtual_chunk_container(container(dead, dead_endpoint))
    creds = ic.s3_static_credentials(access_key_id="test", secret_access_key="test-secret")
    repo = ic.Repository.create(ic.local_filesystem_storage(os.path.join(out, "repo")), config,
                                authorize_virtual_chunk_access=ic.containers_credentials({live: creds, dead: creds}))
    s = repo.writable_session("main")
    root = zarr.group(store=s.store, attributes={"title": "virtual chunks in S3"})
    url = f"{live}{S3_NC_KEY}"
    chunks = {}
    for var, data, rows in (("temp", temp, 2), ("big", big, 1)):
        root.create_array(var, shape=data.shape, chunks=(rows, data.shape[1]),
                          dtype=data.dtype, compressors=None, fill_value=float("nan"))
        for row, offset, length in chunk_spans(nc_path, var):
            key = f"{var}/c/{row}/0"
            s.store.set_virtual_ref(key, url, offset=offset, length=length)
            chunks[key] = [offset, length]
    # Bad input: 512 bytes from 100 bytes before the end; a container nobody listens on.
    for name, ref_url, offset in (("past_end", url, size - 100), ("unreachable", f"{dead}{S3_NC_KEY}", 0)):
        root.create_array(name, shape=(2, 64), chunks=(2, 64), dtype="float32",
                          compressors=None, fill_value=float("nan"))
        s.store.set_virtual_ref(f"{name}/c/0/0", ref_url, offset=offset, length=512)
    snapshot = s.commit("virtual chunks in S3")
    with open(os.path.join(out, "info.json"), "w") as f:
        json.dump({"containers": [live, dead], "bucket": S3_BUCKET, "nc_key": S3_NC_KEY,
                   "nc_size": size, "chunks": chunks, "snapshot": snapshot}, f)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Icechunk fixtures for zarr-mount's tests")
    ap.add_argument("out")
    ap.add_argument("--s3", metavar="ENDPOINT", help="write the S3 virtual-chunk fixture instead")
    ap.add_argument("--dead-endpoint", default="http://127.0.0.1:9",
                    help="endpoint of the unreachable container (--s3)")
    a = ap.parse_args()
    if a.s3:
        main_s3(a.out, a.s3, a.dead_endpoint)
    else:
        main(a.out)
