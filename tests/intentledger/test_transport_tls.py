"""What the SDK's HTTP clients verify TLS with: httpx's CA bundle over https; over plain http,
where no TLS is spoken, a context that checks certificates but trusts no one (building the
bundle into every client cost an agent process a tenth of its start)."""

import ssl

import pytest
from intentledger._http import HttpTransport, tls_verification


def test_an_https_ledger_is_verified_against_the_ca_bundle() -> None:
    assert tls_verification("https://ledger.example.com") is True
    assert tls_verification("HTTPS://ledger.example.com") is True


def test_a_plain_http_ledger_gets_a_context_that_would_refuse_any_certificate() -> None:
    context = tls_verification("http://127.0.0.1:8000")
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True
    assert context.cert_store_stats()["x509_ca"] == 0  # no CA loaded: nothing would pass


def test_the_transport_for_an_http_ledger_builds_its_client_without_the_bundle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import httpx._transports.default as transports

    asked: list[object] = []
    build = transports.create_ssl_context

    def recording(verify: object = True, cert: object = None, trust_env: bool = True) -> object:
        asked.append(verify)
        return build(verify=verify, cert=cert, trust_env=trust_env)  # type: ignore[arg-type]

    monkeypatch.setattr(transports, "create_ssl_context", recording)
    HttpTransport("http://127.0.0.1:8000", "token", timeout=1, retries=0, backoff=0).close()
    [over_http] = asked
    assert isinstance(over_http, ssl.SSLContext)
    assert over_http.cert_store_stats()["x509_ca"] == 0
    HttpTransport("https://ledger.example.com", "token", timeout=1, retries=0, backoff=0).close()
    assert asked[1] is True, "an https ledger is verified against the bundle"
