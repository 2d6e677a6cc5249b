"""Helpers shared by the decoded-view and v2-view tests."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import zarr_view_ref as ref


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
