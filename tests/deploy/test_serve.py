"""The web server's own duties, through a real `python -m config.serve` (granian) on the test
database: it reloads and recycles its workers without failing a request, lets a request in flight
finish when told to stop, refuses a request head that is too long or too slow, a request line and
a body that are too big, leaves no database connection behind a thread it ends, and /metrics
counts what every worker it ever had answered."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import urllib3

from runs.tokens import worker_token_create
from tests.deploy.serve_process import Served, config_serve
from tests.reliability.test_idle_connections import database_connections_held

pytestmark = pytest.mark.slow


class Hammer:
    """Threads asking `/healthz` over and over, each through a client as a worker's SDK is (a
    pool of kept-alive connections, urllib3's default retries), until stopped; what each answer
    was."""

    def __init__(self, url: str, clients: int = 4) -> None:
        self.url = url
        self.statuses: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._ask) for _ in range(clients)]

    def _ask(self) -> None:
        pool = urllib3.PoolManager(maxsize=1, timeout=30)
        while not self._stop.is_set():
            try:
                self.statuses.append(pool.request("GET", f"{self.url}/healthz").status)
            except urllib3.exceptions.HTTPError as error:
                self.errors.append(repr(error))
        pool.clear()

    def __enter__(self) -> Hammer:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


@contextmanager
def under_load(server: Served) -> Iterator[Hammer]:
    with Hammer(server.url) as hammer:
        # some answers before whatever the test does, so the load spans it
        server.wait_until("first answers", lambda: len(hammer.statuses) >= 20)
        yield hammer


@pytest.mark.pg_connections(2)
def test_a_sighup_under_load_fails_no_request_and_replaces_every_worker(
    django_db_setup: Any,
) -> None:
    with config_serve(workers=2, log_name="serve-sighup") as server:
        before = server.worker_pids()
        with under_load(server) as load:
            server.proc.send_signal(1)  # SIGHUP
            server.wait_until("the reload", lambda: server.said(r"Stopped old worker-2"))
            answered_during = len(load.statuses)
        assert load.errors == []
        assert set(load.statuses) == {200}
        assert len(load.statuses) > answered_during  # it kept answering after the reload too
        after = server.worker_pids()
        assert len(after) == 2
        assert not after & before


@pytest.mark.pg_connections(2)
def test_a_worker_past_its_memory_limit_is_replaced_without_failing_a_request(
    django_db_setup: Any,
) -> None:
    # every worker is past 1 MiB: each is replaced at every look (each second)
    env = {"WEB_WORKER_MAX_RSS": "1", "WEB_WORKER_RSS_SAMPLE_SECONDS": "1"}
    with config_serve(env, log_name="serve-rss") as server:
        [first] = server.worker_pids()
        with under_load(server) as load:
            server.wait_until("a recycled worker", lambda: first not in server.worker_pids())
            server.wait_until("the old one stopped", lambda: server.said(r"Stopped old worker-1"))
        assert server.said(r"worker-1 RSS over threshold, gracefully respawning")
        assert load.errors == []
        assert set(load.statuses) == {200}


def test_the_worker_lifetime_setting_reaches_granian(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lifetime's recycling is the memory limit's (tested above); granian's shortest lifetime
    is a minute, so this shows only that the setting reaches granian, and a too short one is
    refused before anything starts."""
    import granian.server

    from config.serve import Robustness, build_server, parse_args

    given: dict[str, Any] = {}
    # granian's Server, told what it would be given (building one configures this process's
    # logging)
    monkeypatch.setattr(granian.server, "Server", lambda target, **kwargs: given.update(kwargs))
    monkeypatch.setenv("WEB_WORKER_LIFETIME", "3600")
    build_server(parse_args([]), Robustness.from_env())
    assert given["workers_lifetime"] == 3600
    monkeypatch.setenv("WEB_WORKER_LIFETIME", "30")
    with pytest.raises(SystemExit, match="at least 60"):
        Robustness.from_env()


@pytest.mark.pg_connections(1)
def test_a_request_head_over_the_buffer_is_refused_with_431(django_db_setup: Any) -> None:
    with config_serve({"WEB_HTTP1_BUFFER_SIZE": "8192"}, log_name="serve-head") as server:
        fits = httpx.get(f"{server.url}/healthz", headers={"X-Note": "n" * 4000})
        assert fits.status_code == 200
        refused = httpx.get(f"{server.url}/healthz", headers={"X-Note": "n" * 16_000})
        assert refused.status_code == 431
        long_line = httpx.get(f"{server.url}/healthz?q={'q' * 16_000}")
        assert long_line.status_code == 431


@pytest.mark.pg_connections(1)
def test_a_request_line_over_4094_bytes_is_refused_with_the_documented_414(
    django_db_setup: Any,
) -> None:
    """gunicorn's limit, which the contract documents on every operation (runs/schema.py)."""
    with config_serve(log_name="serve-line") as server:
        line = "GET /healthz?q= HTTP/1.1"
        fits = httpx.get(f"{server.url}/healthz?q={'q' * (4094 - len(line))}")
        assert fits.status_code == 200
        refused = httpx.get(f"{server.url}/healthz?q={'q' * (4095 - len(line))}")
        assert refused.status_code == 414
        assert refused.headers["content-type"].startswith("text/html")


@pytest.mark.pg_connections(1)
def test_a_client_that_sends_half_a_request_line_is_disconnected(django_db_setup: Any) -> None:
    with config_serve({"WEB_HEADER_READ_TIMEOUT_MS": "1000"}, log_name="serve-slow") as server:
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=60) as slow:
            slow.sendall(b"GET /heal")
            received = b""
            # the socket's own timeout only ends a hang; the server closes it well before
            while chunk := slow.recv(4096):
                received += chunk
        # closed by the server: at most a 408 on the way out, never an answer to the request
        assert received == b"" or received.startswith(b"HTTP/1.1 408"), received


@pytest.mark.pg_connections(2)
def test_a_body_over_the_limit_is_refused_with_413_in_the_error_envelope(
    transactional_db: Any,
) -> None:
    _, token = worker_token_create(name="serve-body")
    with config_serve({"LEDGER_MAX_BODY_BYTES": "10000"}, log_name="serve-body") as server:
        api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"})
        body = {"agent": "serve", "input": {"padding": "x" * 20_000}}
        refused = api.post("/api/v1/runs/", json=body)
        assert refused.status_code == 413
        assert refused.json()["error"]["code"] == "payload_too_large"
        # a body under the limit but longer than granian's head buffer is the app's to answer
        fits = api.post("/api/v1/runs/", json={"agent": "serve", "input": {"p": "x" * 9000}})
        assert fits.status_code == 201, fits.text
        api.close()


@pytest.mark.pg_connections(4)
def test_a_thread_granian_ends_leaves_no_database_connection_behind(
    django_db_setup: Any,
) -> None:
    # connections kept (the product's default) with no idle limit of the suite's own: the
    # server's WEB_DATABASE_IDLE_SESSION_SECONDS is what ends the connection of an ended thread
    env = {
        "DATABASE_CONN_MAX_AGE": "600",
        "WEB_THREAD_IDLE_TIMEOUT": "5",
        "WEB_DATABASE_IDLE_SESSION_SECONDS": "6",
    }
    with config_serve(env, threads=4, keep_connections=False, log_name="serve-idle") as server:

        def ready_from_every_thread() -> None:
            threads = [
                threading.Thread(target=httpx.get, args=(f"{server.url}/readyz",)) for _ in range(8)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)

        ready_from_every_thread()
        assert database_connections_held(server.url) > 0, "its threads keep their connections"
        server.wait_until("no connection held", lambda: database_connections_held(server.url) == 0)
        ready_from_every_thread()  # new threads, new connections
        assert httpx.get(f"{server.url}/readyz").status_code == 200


def step_calls_counted(server: Served, token: str) -> int:
    """The creates /metrics counts in its merged histogram, over every worker there has been."""
    scraped = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {token}"})
    assert scraped.status_code == 200, scraped.text
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in scraped.text.splitlines()
        if line.startswith('intentledger_step_call_seconds_count{call="create"')
    )


@pytest.mark.pg_connections(4)
def test_metrics_merge_every_worker_and_keep_the_counts_of_workers_a_sighup_replaced(
    transactional_db: Any, tmp_path: Any
) -> None:
    _, token = worker_token_create(name="serve-metrics")
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "METRICS_TOKEN": "scrape-me"}
    with config_serve(env, workers=2, log_name="serve-metrics") as server:
        api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"})

        def create(count: int) -> None:
            for n in range(count):
                made = api.post("/api/v1/runs/", json={"agent": "serve", "input": {"n": n}})
                assert made.status_code == 201, made.text

        create(10)
        assert step_calls_counted(server, "scrape-me") == 10
        server.proc.send_signal(1)  # SIGHUP: both workers replaced
        server.wait_until("the reload", lambda: server.said(r"Stopped old worker-2"))
        create(5)
        assert step_calls_counted(server, "scrape-me") == 15
        api.close()


@pytest.mark.pg_connections(4)
def test_a_sigterm_lets_the_request_in_flight_finish_before_the_server_exits(
    transactional_db: Any,
) -> None:
    from django.db import connection

    _, token = worker_token_create(name="serve-sigterm")
    with config_serve(log_name="serve-sigterm") as server:
        api = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        run = api.post("/api/v1/runs/", json={"agent": "serve", "input": {}}).json()
        answers: list[httpx.Response] = []
        # a long poll on a run nobody settles: answered with the run after its 3 s
        waiter = threading.Thread(
            target=lambda: answers.append(api.get(f"/api/v1/runs/{run['id']}/?wait=3"))
        )
        waiter.start()

        def waiting() -> bool:  # the waiter's own LISTEN connection (WSGI: one each)
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND query LIKE 'LISTEN %%'"
                )
                return bool(cursor.fetchone()[0])

        server.wait_until("the request in flight", waiting)
        server.proc.send_signal(15)  # SIGTERM
        waiter.join(timeout=60)
        assert server.proc.wait(timeout=60) == 0
        [answer] = answers
        assert answer.status_code == 200, answer.text
        assert answer.json()["id"] == run["id"]
        assert server.said(r"Granian shutdown completed")
        api.close()
