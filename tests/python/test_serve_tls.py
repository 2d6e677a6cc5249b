"""`zarr-mount serve --tls-cert --tls-key` (issue 53): a self-signed certificate made in the
test (the `cryptography` package), curl over HTTPS with HTTP/2 (ALPN h2) and with HTTP/1.1,
checking the certificate against it; every file of three views, and a range, equal to the
same server's answers over plain HTTP."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
from pathlib import Path


from zm_harness import require_tool
from zm_serve import Server, get, listing

VIEWS = ["raw", "unsharded", "flat"]


def self_signed(d: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, PEM."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "zarr-mount test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = d / "cert.pem", d / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def files(server: Server, view: str) -> list[str]:
    """Every file's URL path in the view, from the server's listings over plain HTTP."""
    conn = server.connection()
    out, todo = [], [f"/{view}/"]
    while todo:
        d = todo.pop()
        for e in listing(conn, d):
            if e["type"] == "directory":
                todo.append(d + e["name"] + "/")
            else:
                out.append(d + e["name"])
    conn.close()
    return sorted(out)


def curl(cert: Path, base: str, paths: list[str], out: Path, version: str, extra=()) -> list[list[str]]:
    """One curl for all paths (one connection, kept alive); each file's bytes in out/N; its
    HTTP version, status and size per line."""
    argv = [require_tool("curl"), "-sS", "--cacert", str(cert), version, "--fail-with-body",
            "-w", "%{http_version} %{response_code} %{size_download}\\n", *extra]
    for i, p in enumerate(paths):
        argv += ["-o", str(out / str(i)), base.rstrip("/") + p]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return [ln.split() for ln in res.stdout.splitlines()]


def test_https_http2_equals_plain_http(tmp_path, zarr_mount_bin, fixtures_dir):
    require_tool("curl")
    cert, key = self_signed(tmp_path)
    views = [a for v in VIEWS for a in ("--view", v)]
    plain = Server(fixtures_dir, tmp_path / "plain.log", args=views).start()
    tls = None
    try:
        tls = Server(fixtures_dir, tmp_path / "tls.log",
                     args=views + ["--tls-cert", str(cert), "--tls-key", str(key)]).start()
        assert tls.url.startswith("https://127.0.0.1:"), tls.url
        conn = plain.connection()
        for view in VIEWS:
            paths = files(plain, view)
            assert len(paths) > 3, (view, paths)
            for version, want in [("--http2", "2"), ("--http1.1", "1.1")]:
                out = tmp_path / f"{view}-{want}"
                out.mkdir()
                lines = curl(cert, tls.url, paths, out, version)
                assert len(lines) == len(paths)
                for i, (p, (got_version, status, size)) in enumerate(zip(paths, lines)):
                    assert (got_version, status) == (want, "200"), (p, got_version, status)
                    s, _, body = get(conn, p)
                    assert s == 200 and (out / str(i)).read_bytes() == body, (view, p, version)
                    assert int(size) == len(body)
        # a range over HTTP/2
        big = max(files(plain, "flat"), key=lambda p: len(get(conn, p)[2]))
        _, _, whole = get(conn, big)
        [[v, status, size]] = curl(cert, tls.url, [big], tmp_path, "--http2", ["-r", "100-1099"])
        assert (v, status, size) == ("2", "206", "1000")
        assert (tmp_path / "0").read_bytes() == whole[100:1100]
        conn.close()
    finally:
        if tls is not None:
            tls.stop()
        plain.stop()
