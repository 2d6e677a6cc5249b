"""Reading fixture arrays with zarr-python 3 and tensorstore, natively or through a mount."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorstore as ts
import zarr


def entry_for(manifest: dict, path: str) -> dict:
    for e in manifest["arrays"]:
        if e["path"] == path:
            return e
    raise KeyError(f"{path} not in manifest.json")


def zp_read(root: Path, path: str) -> np.ndarray:
    return zarr.open_array(str(Path(root) / path), mode="r")[...]


def zp_open_via_parent(root: Path, entry: dict):
    parent, _, name = entry["path"].rpartition("/")
    grp = zarr.open_group(str(Path(root) / parent), mode="r", zarr_format=entry["zarr_format"],
                          use_consolidated=False)
    return grp[name]


def zp_open_via_consolidated(root: Path, entry: dict):
    croot = entry["consolidated_root"]
    rel = entry["path"][len(croot) + 1:]
    grp = zarr.open_consolidated(str(Path(root) / croot), zarr_format=entry["zarr_format"])
    return grp[rel]


def ts_read(root: Path, entry: dict) -> np.ndarray:
    driver = "zarr3" if entry["zarr_format"] == 3 else "zarr"
    t = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(Path(root) / entry["path"]) + "/"},
                 "open": True}, read=True).result()
    return t.read().result()


def assert_same_array(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    np.testing.assert_array_equal(actual, expected, err_msg=what)


def assert_looks_unpacked(arr, entry: dict, what: str) -> None:
    """An unpacked array's metadata, as a zarr-python client sees it: the chunk grid is the
    former inner chunk shape and (unless nested) there is no sharding left."""
    grid = list(arr.metadata.chunk_grid.chunk_shape)
    assert grid == entry["inner_chunk_shape"], f"{what}: chunk grid {grid}, want {entry['inner_chunk_shape']}"
    if "sharding_indexed" not in entry["inner_codecs"]:
        assert arr.shards is None, f"{what}: still sharded ({arr.shards})"
