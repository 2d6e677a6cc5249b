#!/usr/bin/env python3
"""Reference-store fixtures made by the real writers (issue 24).

    gen_reference_fixtures.py OUT [--url URL] [--big]

writes into OUT:
    data.nc              a NetCDF4 file (netCDF4 library): chunked variables compressed with
                         zlib+shuffle and with zlib alone, a contiguous one, a coordinate
    refs-v1.json         kerchunk's SingleHdf5ToZarr references (version 1, small chunks inline)
    refs-v0.json         the same references as a version 0 document (the bare refs mapping)
    refs-templated.json  version 1 with the target URL moved into `templates` ({{u}})
    refs.parq/           kerchunk's refs_to_dataframe Parquet references (record_size 4, so
                         arrays span several refs.N.parq files)
    manifest.json        per variable: shape, dtype, chunk refs (url, offset, length)

URL is what the references name as the target (default: the relative path "data.nc", which a
reference store resolves next to the reference file); e.g. s3://bkt/data.nc for a copy of
data.nc in a bucket. --big adds an uncompressed 9.6 MB variable `noise` of 400 KB chunks
(each read by the kernel in several FUSE reads, and data.nc then larger than the object cache's
whole-object limit of 8 MiB).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import netCDF4
import numpy as np
from kerchunk.df import refs_to_dataframe
from kerchunk.hdf import SingleHdf5ToZarr


def write_netcdf(path: Path, big: bool) -> None:
    rng = np.random.default_rng(24)
    with netCDF4.Dataset(path, "w") as ds:
        ds.title = "zarr-mount reference fixture"
        ds.createDimension("t", 10)
        ds.createDimension("y", 7)
        ds.createDimension("x", 9)
        t = ds.createVariable("t", "f8", ("t",))
        t[:] = np.arange(10) * 1.5
        t.units = "hours since 2000-01-01"
        # zlib + shuffle, partial edge chunks on every axis.
        temp = ds.createVariable("temp", "f4", ("t", "y", "x"), zlib=True, shuffle=True, complevel=4,
                                 chunksizes=(3, 4, 5))
        temp[:] = rng.standard_normal((10, 7, 9)).astype("f4") * 10 + 280
        temp.units = "K"
        # zlib alone (decodable by the decoded and v2 views), edge chunks too.
        pres = ds.createVariable("pres", "i4", ("y", "x"), zlib=True, shuffle=False, complevel=1,
                                 chunksizes=(3, 4))
        pres[:] = np.arange(63, dtype="i4").reshape(7, 9) * 1000 - 5000
        # Contiguous (one reference to the whole variable).
        small = ds.createVariable("small", "i2", ("x",), contiguous=True)
        small[:] = np.arange(9, dtype="i2") - 4
        if big:
            ds.createDimension("r", 1200)
            ds.createDimension("c", 2000)
            noise = ds.createVariable("noise", "f4", ("r", "c"), chunksizes=(200, 500))
            noise[:] = rng.standard_normal((1200, 2000)).astype("f4")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--url", default="data.nc")
    ap.add_argument("--big", action="store_true")
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    nc = out / "data.nc"
    write_netcdf(nc, args.big)
    with open(nc, "rb") as f:
        refs = SingleHdf5ToZarr(f, url=args.url, inline_threshold=20).translate()
    assert refs.get("version") == 1, refs.keys()
    (out / "refs-v1.json").write_text(json.dumps(refs))
    (out / "refs-v0.json").write_text(json.dumps(refs["refs"]))
    templated = {
        "version": 1,
        "templates": {"u": args.url},
        "refs": {k: (["{{u}}", *v[1:]] if isinstance(v, list) and v[0] == args.url else v)
                 for k, v in refs["refs"].items()},
    }
    assert any(isinstance(v, list) and v[0] == "{{u}}" for v in templated["refs"].values())
    (out / "refs-templated.json").write_text(json.dumps(templated))
    refs_to_dataframe(refs, str(out / "refs.parq"), record_size=4)

    manifest = {"url": args.url, "variables": {}}
    with netCDF4.Dataset(nc) as ds:
        for name, var in ds.variables.items():
            chunks = {k.split("/", 1)[1]: v for k, v in refs["refs"].items()
                      if k.startswith(name + "/") and not k.split("/", 1)[1].startswith(".")}
            manifest["variables"][name] = {
                "shape": list(var.shape),
                "dtype": var.dtype.str,
                "references": {k: v for k, v in chunks.items() if isinstance(v, list)},
                "inline": sorted(k for k, v in chunks.items() if not isinstance(v, list)),
            }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
