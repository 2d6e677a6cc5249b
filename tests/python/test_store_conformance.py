"""zarr-python's own store test suite (`zarr.testing.store.StoreTests`, 73 tests) against a
`LocalStore` whose root is a directory inside the mount (issue #20).

One mount per (backend, view) for the whole class, a fresh directory inside it per test. The
backends: a local directory, and a bucket on each local S3 server of `zm_s3.S3_SERVERS`. Needs
pytest-asyncio with asyncio_mode = auto (pytest.ini). `test_set_if_not_exists` is the one that
needs `link()` as an atomic create (zarr-python writes a temp file and `os.link`s it).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from zm_harness import Mount
from zm_s3 import DAEMON_ENV, S3_SERVERS

zarr = pytest.importorskip("zarr")
from zarr.core.buffer import cpu  # noqa: E402
from zarr.storage import LocalStore  # noqa: E402
from zarr.testing.store import StoreTests  # noqa: E402

BACKENDS = ["local"] + [f"s3-{kind}" for kind in S3_SERVERS]
CONFIGS = [(b, v) for b in BACKENDS for v in ("raw", "unsharded")]
_counter = itertools.count()
# The first S3 test may install moto[server] (scripts/s3-server.sh) on a busy machine.
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="class", params=CONFIGS, ids=[f"{b}-{v}" for b, v in CONFIGS])
def mounted(request, tmp_path_factory, zarr_mount_bin):
    backend, view = request.param
    work = tmp_path_factory.mktemp(f"conf-{backend}-{view}")
    server = None
    try:
        if backend == "local":
            (work / "store").mkdir()
            m = Mount(work / "store", work / "mnt", view=view)
        else:
            server = S3_SERVERS[backend.removeprefix("s3-")](work / "server").start()
            m = Mount(server.url("stores"), work / "mnt", view=view,
                      extra_args=server.mount_args(), env=DAEMON_ENV)
        m.start()
        try:
            yield m
        finally:
            problems = m.stop()
            assert not problems, f"{m.path}: {problems}\n{m.log_text()}"
    finally:
        if server is not None:
            server.stop()


class TestLocalStoreInsideTheMount(StoreTests[LocalStore, cpu.Buffer]):
    store_cls = LocalStore
    buffer_cls = cpu.Buffer

    async def get(self, store: LocalStore, key: str) -> cpu.Buffer:
        return self.buffer_cls.from_bytes((store.root / key).read_bytes())

    async def set(self, store: LocalStore, key: str, value: cpu.Buffer) -> None:
        path = store.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value.to_bytes())

    @pytest.fixture
    def store_kwargs(self, mounted: Mount) -> dict:
        mounted.check_alive()
        root = Path(mounted.path) / f"t{next(_counter)}"
        root.mkdir()  # an existing directory, as zarr's own LocalStore tests use
        return {"root": str(root)}

    def test_store_repr(self, store: LocalStore) -> None:
        assert str(store) == f"file://{store.root.as_posix()}"

    def test_store_supports_writes(self, store: LocalStore) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: LocalStore) -> None:
        assert store.supports_listing
