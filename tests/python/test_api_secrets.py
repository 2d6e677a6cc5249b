"""The Python API keeps secrets off the daemon's command line (#54): secret-valued object-store
options (`option=["aws_secret_access_key=..."]`) reach the daemon in its environment, under the
name object_store reads them from, and never in its argv, which every user sees in `ps`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from zm_harness import REPO, force_unmount
from zm_s3 import ACCESS_KEY, BUCKET

sys.path.insert(0, str(REPO / "python"))
import zarr_mount  # noqa: E402

SECRET = "zm-py-secret-do-not-show"


def test_secret_options_move_to_the_environment_under_object_stores_names():
    opts, env = zarr_mount._secrets_to_env(
        {"option": ["aws_access_key_id=AK", f"aws_secret_access_key={SECRET}",
                    "aws_virtual_hosted_style_request=true"], "region": "eu-west-1"},
        "s3://b/p")
    # The key id goes too: the daemon's list of secret-looking keys takes any `access_key`.
    assert opts == {"region": "eu-west-1", "option": ["aws_virtual_hosted_style_request=true"]}
    assert env == {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": SECRET}
    # A key without the cloud's prefix takes the prefix of the source's scheme.
    assert zarr_mount._secrets_to_env({"option": [f"account_key={SECRET}"]}, "az://acc/c")[1] == {
        "AZURE_ACCOUNT_KEY": SECRET}
    assert zarr_mount._secrets_to_env(
        {"option": f"service_account_key={SECRET}"}, "icechunk+gs://b/r")[1] == {
        "GOOGLE_SERVICE_ACCOUNT_KEY": SECRET}
    # Nothing secret: nothing moves.
    assert zarr_mount._secrets_to_env({"option": ["k=v"]}, "s3://b") == ({"option": ["k=v"]}, {})


@pytest.fixture
def api_daemon(zarr_mount_bin, tmp_path, monkeypatch):
    """The API starts the binary under test, and no AWS credential reaches the daemon but the
    ones a test passes: none in the environment, no profile files, no instance metadata."""
    monkeypatch.setenv("ZARR_MOUNT_BIN", str(zarr_mount_bin))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def assert_in_no_command_line(secret: str) -> None:
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        assert secret.encode() not in cmdline, f"the secret in {entry}/cmdline"


def _daemon_pid(mountpoint: Path) -> int:
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if str(mountpoint).encode() in argv and any(a.endswith(b"zarr-mount") for a in argv):
            return int(entry.name)
    raise AssertionError(f"no daemon serving {mountpoint}")


def test_a_mount_with_a_secret_option_shows_it_in_no_command_line(api_daemon, moto, tmp_path):
    moto.client().put_object(Bucket=BUCKET, Key="pre/a", Body=b"hello")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        with zarr_mount.mount(moto.url("pre"), mnt, endpoint_url=moto.endpoint, region="us-east-1",
                              option=[f"aws_access_key_id={ACCESS_KEY}",
                                      f"aws_secret_access_key={SECRET}"]) as path:
            assert (path / "a").read_bytes() == b"hello"
            pid = _daemon_pid(mnt)
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert f"AWS_SECRET_ACCESS_KEY={SECRET}".encode() in environ
            assert_in_no_command_line(SECRET)
    finally:
        force_unmount(mnt)
    assert not os.path.ismount(mnt)


def test_serve_with_a_secret_option_shows_it_in_no_command_line(api_daemon, moto):
    """`zarr_mount.serve` starts its daemon the way `mount` does: the secret in its
    environment, in no process's command line, and the store read with it."""
    import urllib.request

    moto.client().put_object(Bucket=BUCKET, Key="srv/a", Body=b"served")
    with zarr_mount.serve(moto.url("srv"), view="raw", endpoint_url=moto.endpoint,
                          region="us-east-1", option=[f"aws_access_key_id={ACCESS_KEY}",
                                                      f"aws_secret_access_key={SECRET}"]) as url:
        with urllib.request.urlopen(url + "raw/a", timeout=30) as r:
            assert r.read() == b"served"
        assert_in_no_command_line(SECRET)
