"""The probes a load balancer or an orchestrator asks, through the product's web server: `/healthz` answers
while the process serves, `/readyz` says 200 only when the database and the broker answer and
every migration is applied, and names what is missing otherwise."""

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from tests.deploy.databases import fresh_database
from tests.processes import ROOT, free_port, server_env, start_web_server, stop_process

pytestmark = pytest.mark.slow


@contextmanager
def ledger_web(**env: str) -> Iterator[str]:
    """The web server (one worker) on the test database and this process's Redis unless `env`
    says otherwise; yields its base URL."""
    url, proc = start_web_server(env=env, workers=1, threads=2, ready_path="/healthz")
    try:
        yield url
    finally:
        stop_process(proc)


def closed_port_url(scheme: str) -> str:
    return f"{scheme}://root@127.0.0.1:{free_port()}/nothing"


@pytest.mark.pg_connections(2)
def test_a_ready_ledger_answers_probes_from_any_host_over_plain_http(django_db_setup: Any) -> None:
    # what a deployment behind HTTPS sets; the orchestrator still probes the pod's own address
    with ledger_web(SECURE_SSL_REDIRECT="1", ALLOWED_HOSTS="ledger.example.com") as url:
        pod = {"Host": "10.42.0.7:8000"}
        alive = httpx.get(f"{url}/healthz", headers=pod)
        assert (alive.status_code, alive.json()) == (200, {"alive": True})
        ready = httpx.get(f"{url}/readyz", headers=pod)
        assert (ready.status_code, ready.json()) == (200, {"ready": True, "missing": []})
        assert ready.headers["Cache-Control"] == "no-store"
        assert "set-cookie" not in ready.headers
        # every other page still checks the host and redirects to HTTPS
        assert httpx.get(f"{url}/login/", headers=pod).status_code == 400
        elsewhere = httpx.get(f"{url}/login/", headers={"Host": "ledger.example.com"})
        assert elsewhere.status_code == 301
        assert elsewhere.headers["Location"].startswith("https://ledger.example.com/")
        assert httpx.post(f"{url}/readyz", headers=pod).status_code == 405


@pytest.mark.pg_connections(1)
def test_a_ledger_whose_database_is_unreachable_is_alive_but_not_ready(
    django_db_setup: Any,
) -> None:
    with ledger_web(DATABASE_URL=closed_port_url("postgres")) as url:
        alive = httpx.get(f"{url}/healthz")
        assert (alive.status_code, alive.json()) == (200, {"alive": True})
        ready = httpx.get(f"{url}/readyz")
        assert (ready.status_code, ready.json()) == (503, {"ready": False, "missing": ["database"]})


@pytest.mark.pg_connections(2)
def test_a_ledger_whose_broker_is_unreachable_is_not_ready(django_db_setup: Any) -> None:
    with ledger_web(CELERY_BROKER_URL=closed_port_url("redis")) as url:
        ready = httpx.get(f"{url}/readyz")
        assert (ready.status_code, ready.json()) == (503, {"ready": False, "missing": ["broker"]})


@pytest.mark.pg_connections(2)
def test_a_ledger_on_a_database_never_migrated_is_not_ready(django_db_setup: Any) -> None:
    with fresh_database("unmigrated") as database_url, ledger_web(DATABASE_URL=database_url) as url:
        ready = httpx.get(f"{url}/readyz")
        body = ready.json()
        assert (ready.status_code, body) == (503, {"ready": False, "missing": ["migrations"]})


@pytest.mark.pg_connections(1)
def test_the_command_line_probe_answers_for_processes_without_http(django_db_setup: Any) -> None:
    """`python -m config.health`: what the worker's healthcheck and the image's migrate ask."""

    def probe(*args: str, **env: str) -> tuple[int, dict[str, Any]]:
        done = subprocess.run(
            [sys.executable, "-m", "config.health", *args],
            cwd=ROOT,
            env=server_env(env),
            capture_output=True,
            text=True,
            timeout=120,
        )
        return done.returncode, json.loads(done.stdout)

    assert probe() == (0, {"ready": True, "missing": []})
    closed = {"DATABASE_URL": closed_port_url("postgres")}
    assert probe(**closed) == (1, {"ready": False, "missing": ["database"]})
    # migrate asks for the database only; a broker that is away does not hold it up
    broker_away = {"CELERY_BROKER_URL": closed_port_url("redis")}
    assert probe("--need", "database", **broker_away) == (0, {"ready": True, "missing": []})
