#!/usr/bin/env python3
"""Write an Icechunk repository for the zarr-mount tests (issue 24), with the real writers.

    gen_icechunk_fixtures.py OUT

OUT/source.nc   a NetCDF4 file (netCDF4), variable `temp` chunked and uncompressed
OUT/repo/       the repository (PyPI `icechunk`), its history:
                  main: commit 1 (arrays `plain`, `sharded`, `virt`, group `g` with `g/nested`)
                        commit 2 (`plain` changed, array `added`)
                  tag `v1` -> commit 1
                  branch `dev` -> commit 1 + commit 3 (`plain[0, 0]` changed)
                `virt`'s chunks are virtual: byte ranges of source.nc (found with h5py), through
                a local-file virtual chunk container for file://OUT/.
OUT/info.json   the snapshot ids of the three commits and the container prefix.
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


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: gen_icechunk_fixtures.py OUT")
    main(sys.argv[1])
