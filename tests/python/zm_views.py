"""Helpers shared by the decoded-view and v2-view tests."""

from __future__ import annotations

import errno
import json
import os
from contextlib import contextmanager
from pathlib import Path

import zarr_view_ref as ref
from zm_harness import Mount


@contextmanager
def view_mounts(source: Path, tmp_path_factory, views=("decoded", "v2-decoded", "v2")):
    """One read-only mount of `source` per view, all stopped (and unmounted) at the end, also
    on failure."""
    made = {}
    try:
        for view in views:
            made[view] = Mount(source, tmp_path_factory.mktemp(f"mnt-{view}"), view=view, read_only=True)
            made[view].start()
        yield made
    finally:
        problems = [f"{v}: {p}" for v, m in made.items() for p in m.stop()]
        assert not problems, problems


def codec_names(array_dir: Path) -> list[str]:
    """The codec names of a v3 array's chain; of the inner chain when it shards."""
    codecs = json.loads((array_dir / "zarr.json").read_text())["codecs"]
    if codecs[0]["name"] == "sharding_indexed":
        codecs = codecs[0]["configuration"]["codecs"]
    return [c["name"] for c in codecs]


def assert_nothing_passed_through(m: Mount) -> None:
    """The daemon decoded every array: it logged no array passed through or left undecoded."""
    for line in m.log_text(tail=None).splitlines():
        assert "passed through undecoded" not in line and "cannot decode" not in line, line


def erofs_checks(mnt: Path, chunk: str, meta: str) -> list[str]:
    """Try every kind of write; return the ones that did not fail with EROFS."""
    problems = []

    def expect_erofs(what, fn):
        try:
            fn()
        except OSError as e:
            if e.errno != errno.EROFS:
                problems.append(f"{what}: {errno.errorcode.get(e.errno, e.errno)} ({e}), want EROFS")
        else:
            problems.append(f"{what}: succeeded, want EROFS")

    def overwrite():
        with open(mnt / chunk, "r+b") as f:
            f.write(b"\0\0\0\0")
            f.flush()

    def create():
        with open(mnt / os.path.dirname(chunk) / "new-chunk", "wb") as f:
            f.write(b"x")

    def truncate():
        os.truncate(mnt / chunk, 0)

    expect_erofs("open r+ and write a chunk", overwrite)
    expect_erofs("create a file", create)
    expect_erofs("truncate a chunk", truncate)
    expect_erofs("write metadata", lambda: (mnt / meta).write_bytes(b"{}"))
    expect_erofs("unlink a chunk", lambda: os.unlink(mnt / chunk))
    expect_erofs("unlink metadata", lambda: os.unlink(mnt / meta))
    expect_erofs("mkdir", lambda: os.mkdir(mnt / "new-dir"))
    expect_erofs("rmdir", lambda: os.rmdir(mnt / os.path.dirname(chunk)))
    expect_erofs("rename a chunk", lambda: os.rename(mnt / chunk, mnt / (chunk + ".moved")))
    return problems


def assert_tree_unchanged(copy: Path, original: Path) -> None:
    a, b = ref.tree_files(copy), ref.tree_files(original)
    assert sorted(a) == sorted(b), f"files added/removed: {sorted(set(a) ^ set(b))[:20]}"
    changed = [k for k in a if a[k].read_bytes() != b[k].read_bytes()]
    assert not changed, f"backing files changed through a read-only view: {changed[:20]}"
