"""What the SDK's HTTP transport verifies TLS with, and which proxy it goes through.

Over https: the system's trust store (OpenSSL's default paths, so `SSL_CERT_FILE` names another
bundle), the host name checked, one context per client. Over plain http no TLS is set up at all.
Proxies come from the environment, as curl, requests and httpx (the SDK's client before urllib3)
read them: `HTTP_PROXY` / `HTTPS_PROXY` / `ALL_PROXY`, and `NO_PROXY` for hosts reached directly.
"""

import contextlib
import datetime
import http.server
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from intentledger import Ledger, LedgerUnavailable
from intentledger._http import HttpTransport

RUN = b'{"id": "r-1", "status": "running"}'


class _Answers(http.server.BaseHTTPRequestHandler):
    """A ledger (or a proxy in front of one) that answers every GET with a run, and remembers
    the request lines it was sent."""

    seen: list[str] = []

    def do_GET(self) -> None:
        self.seen.append(self.requestline)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(RUN)))
        self.end_headers()
        self.wfile.write(RUN)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _serve(context: ssl.SSLContext | None = None) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (not localhost) that no trust store knows, and its key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ledger test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "ledger.pem", folder / "ledger.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture
def https_ledger(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(URL, certificate) of a ledger speaking TLS with a certificate nobody trusts."""
    cert, key = _self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with _serve(context) as port:
        yield f"https://127.0.0.1:{port}", cert


@pytest.fixture
def plain_ledger() -> Iterator[str]:
    _Answers.seen.clear()
    with _serve() as port:
        yield f"http://127.0.0.1:{port}"


def test_an_https_ledger_whose_certificate_nobody_trusts_is_refused(
    https_ledger: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _cert = https_ledger
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with (
        Ledger(url, "token", retries=0) as client,
        pytest.raises(LedgerUnavailable, match="CERTIFICATE_VERIFY_FAILED"),
    ):
        client.get_run("r-1")


def test_an_https_ledger_is_verified_against_the_trust_store_ssl_cert_file_names(
    https_ledger: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cert = https_ledger
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with Ledger(url, "token", retries=0) as client:
        assert client.get_run("r-1")["status"] == "running"
    # the host name is checked too: the same server as `localhost`, which its certificate does
    # not name, is refused
    with (
        Ledger(url.replace("127.0.0.1", "localhost"), "token", retries=0) as client,
        pytest.raises(LedgerUnavailable, match="not valid for 'localhost'"),
    ):
        client.get_run("r-1")


def test_a_plain_http_ledger_sets_up_no_tls_at_all(plain_ledger: str) -> None:
    transport = HttpTransport(plain_ledger, "token", timeout=2, retries=0, backoff=0)
    assert type(transport.pool) is urllib3.HTTPConnectionPool  # not its HTTPS subclass
    assert "ssl_context" not in transport.pool.conn_kw
    assert transport.get_run("r-1")["status"] == "running"
    transport.close()


def test_the_environments_proxy_carries_the_calls_unless_no_proxy_names_the_host(
    plain_ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the stub answers as the proxy would relay: the request line names the whole URL
    ledger = "http://ledger.invalid:8000"
    monkeypatch.setenv("HTTP_PROXY", plain_ledger)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with Ledger(ledger, "token", retries=0) as client:
        assert client.get_run("r-1")["status"] == "running"
    assert _Answers.seen == [f"GET {ledger}/api/v1/runs/r-1/ HTTP/1.1"]

    _Answers.seen.clear()
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with Ledger(plain_ledger, "token", retries=0) as client:
        assert client.get_run("r-1")["status"] == "running"
    assert _Answers.seen == ["GET /api/v1/runs/r-1/ HTTP/1.1"]


def test_an_unreachable_proxy_is_a_call_never_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """So even a call that is not idempotent (a run created without an external id) is sent
    again, as for a ledger that refused the connection."""
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    transport = HttpTransport("http://ledger.invalid", "token", timeout=2, retries=2, backoff=0)
    with pytest.raises(LedgerUnavailable, match="after 3 attempt"):
        transport.create_run(agent="a", input={}, external_id=None)
    transport.close()
