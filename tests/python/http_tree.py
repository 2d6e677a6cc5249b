"""Helper of tests/it/http.rs (a plain Zarr tree on static HTTP); not a pytest module.

    http_tree.py write ROOT             write v3.zarr, v2.zarr, plain.zarr under ROOT
    http_tree.py raw MNT SRC            v3.zarr mounted raw: listing = SRC's files, reads exact
    http_tree.py unsharded MNT          v3.zarr in the unsharded view: reads exact
    http_tree.py v2 MNT SRC             v2.zarr: listing = SRC's files, reads exact
    http_tree.py plain MNT SRC on|off   plain.zarr (no consolidated metadata): listed from the
                                        autoindex page (on) or not at all (off); reads exact
    http_tree.py outage MNT             after the server stopped: EIO, not ENOENT
"""

import errno
import os
import sys
import warnings

import numpy as np
import tensorstore as ts
import zarr

warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")


def small():
    return np.arange(1200, dtype="int32").reshape(40, 30)


def big():
    return np.random.default_rng(0).standard_normal((2048, 2048), dtype="float32")


# big's one shard (16 MiB) is larger than the memory cache's whole-object limit (8 MiB), so
# the unsharded view reads it by ranges.
def write(root):
    g = zarr.open_group(os.path.join(root, "v3.zarr"), mode="w", zarr_format=3)
    s = g.create_group("g").create_array(
        "small", shape=(40, 30), chunks=(5, 6), shards=(20, 12), dtype="int32"
    )
    s[:] = small()
    b = g.create_array(
        "big", shape=(2048, 2048), chunks=(256, 256), shards=(2048, 2048), dtype="float32",
        compressors=None,
    )
    b[:] = big()
    p = g.create_array("plain", shape=(10,), chunks=(4,), dtype="float64")
    p[:] = np.arange(10)
    zarr.consolidate_metadata(os.path.join(root, "v3.zarr"))

    g = zarr.open_group(os.path.join(root, "v2.zarr"), mode="w", zarr_format=2)
    g.attrs["title"] = "v2"
    a = g.create_array("a", shape=(20, 20), chunks=(7, 7), dtype="int16")
    a[:] = np.arange(400, dtype="int16").reshape(20, 20)
    n = g.create_group("sub").create_array(
        "nested", shape=(9, 4), chunks=(4, 4), dtype="uint8",
        chunk_key_encoding={"name": "v2", "separator": "/"},
    )
    n[:] = np.arange(36, dtype="uint8").reshape(9, 4)
    zarr.consolidate_metadata(os.path.join(root, "v2.zarr"))

    g = zarr.open_group(os.path.join(root, "plain.zarr"), mode="w", zarr_format=3)
    g.create_array("arr", shape=(10,), chunks=(5,), dtype="int32")[:] = np.arange(10)


def tree(top):
    """{relative path: size or 'dir'} of everything below top."""
    out = {}
    for d, dirs, files in os.walk(top):
        rel = os.path.relpath(d, top)
        for name in dirs:
            out[os.path.normpath(os.path.join(rel, name))] = "dir"
        for name in files:
            out[os.path.normpath(os.path.join(rel, name))] = os.stat(os.path.join(d, name)).st_size
    return out


def same_tree(mnt, src):
    got, want = tree(mnt), tree(src)
    assert got == want, f"listing differs:\nonly mounted {set(got) - set(want)}\n" \
        f"only stored {set(want) - set(got)}\n" \
        f"sizes {[(k, got[k], want[k]) for k in got if k in want and got[k] != want[k]]}"
    return got


def missing(path):
    try:
        os.stat(path)
    except FileNotFoundError:
        return
    raise AssertionError(f"{path} exists")


def raw(mnt, src):
    entries = same_tree(mnt, src)
    # Every shard of the grid was written, so the listing holds them all: 2x3 + 1 + 3.
    assert sum(1 for k in entries if "/c/" in k and entries[k] != "dir") == 10, entries
    g = zarr.open_group(mnt, mode="r")
    np.testing.assert_array_equal(g["g/small"][:], small())
    np.testing.assert_array_equal(g["big"][:], big())
    np.testing.assert_array_equal(g["plain"][:], np.arange(10))
    assert g["g/small"].shards == (20, 12)
    for name in ["nope", "g/nope", "g/small/c/0/9", "g/small/c/5", "big/c/0/2", "big/zarr.json.bak"]:
        missing(os.path.join(mnt, name))


def unsharded(mnt):
    g = zarr.open_group(mnt, mode="r")
    s = g["g/small"]
    assert s.chunks == (5, 6) and s.shards is None, (s.chunks, s.shards)
    np.testing.assert_array_equal(s[:], small())
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": os.path.join(mnt, "g/small")}}).result()
    np.testing.assert_array_equal(t.read().result(), small())
    b = zarr.open_array(os.path.join(mnt, "big"), mode="r")
    np.testing.assert_array_equal(b[100:110, 5:9], big()[100:110, 5:9])
    # An inner chunk of the unsharded view: a file of exactly one chunk's bytes.
    assert os.stat(os.path.join(mnt, "big/c/1/0")).st_size == 256 * 256 * 4
    missing(os.path.join(mnt, "big/c/8/0"))


def v2(mnt, src):
    same_tree(mnt, src)
    g = zarr.open_group(mnt, mode="r")
    assert g.attrs["title"] == "v2"
    np.testing.assert_array_equal(g["a"][:], np.arange(400, dtype="int16").reshape(20, 20))
    np.testing.assert_array_equal(g["sub/nested"][:], np.arange(36, dtype="uint8").reshape(9, 4))
    missing(os.path.join(mnt, "a/3.0"))


def plain(mnt, src, autoindex):
    if autoindex == "on":
        same_tree(mnt, src)
    else:
        try:
            os.listdir(mnt)
        except OSError as e:
            assert e.errno == errno.EOPNOTSUPP, e
        else:
            raise AssertionError("a directory without consolidated metadata was listed")
    assert os.path.isdir(os.path.join(mnt, "arr"))
    np.testing.assert_array_equal(zarr.open_array(os.path.join(mnt, "arr"), mode="r")[:], np.arange(10))
    g = zarr.open_group(mnt, mode="r")
    np.testing.assert_array_equal(g["arr"][:], np.arange(10))
    missing(os.path.join(mnt, "arr/c/7"))


def outage(mnt):
    for name in ["never-looked-up", "g/small/c/0/7"]:
        try:
            os.stat(os.path.join(mnt, name))
        except OSError as e:
            assert e.errno == errno.EIO, e
        else:
            raise AssertionError(f"{name}: no error while the server is down")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"write": write, "raw": raw, "unsharded": unsharded, "v2": v2, "plain": plain,
     "outage": outage}[cmd](*args)
