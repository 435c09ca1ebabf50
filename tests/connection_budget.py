"""The suite's share of PostgreSQL: at most TEST_PG_CONNECTIONS (default 40) connections at once,
over every pytest process of a run, so it passes beside the server's other users.

Each pytest process keeps `BASE` connections of its own (its connection to the test database and
the in-process live server's). A test that starts processes or threads that connect needs more,
and says how many: a fixture that starts a server declares what it holds at most
(`@holds_connections(16)` under `@pytest.fixture`), a test that starts its own with
`@pytest.mark.pg_connections(n)`, and any other `slow` test (it uses a process fixture) counts as
`PROCESS_TEST`. Before such a test starts, its process reserves that many in a ledger shared by
the run's processes (a JSON file under an exclusive `flock`), and waits while the others'
reservations leave too few. The reservation ends with the test, or `LINGER` seconds later when
the test used a server of a wider scope (a session's web server keeps an idle connection until
PostgreSQL ends it: tests/processes.py, WEB_IDLE_SESSION_SECONDS); the process's next test on
that server takes it over. A process that dies holding a reservation loses it to the next
process that reads the ledger.

The figures are declared, not measured: `TEST_PG_AUDIT=1` makes each process sample its test
database while its tests run, and the summary lists the tests that held more than their
reservation and `BASE` (a server an earlier test left lingering counts against the next one).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tests.processes import LOGS, WEB_IDLE_SESSION_SECONDS, test_database_url

F = TypeVar("F", bound=Callable[..., Any])

BASE = 2
PROCESS_TEST = 8  # a web server of the default 2 workers x 4 threads, a connection a thread
LINGER = WEB_IDLE_SESSION_SECONDS + 0.5
POLL_SECONDS = 0.1


def budget() -> int:
    return int(os.environ.get("TEST_PG_CONNECTIONS", "40"))


def workers() -> int:
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def capacity() -> int:
    """What the run's tests may reserve beyond each process's own `BASE`."""
    return max(PROCESS_TEST, budget() - BASE * workers())


RUN_VARIABLE = "INTENTLEDGER_TEST_RUN"


def start_run() -> None:
    """Names the run (pytest's first process, before xdist starts its workers, which inherit
    the name): its processes share one ledger."""
    os.environ.setdefault(RUN_VARIABLE, uuid.uuid4().hex)


def end_run() -> None:
    with suppress(FileNotFoundError):
        ledger_path().unlink()


def _run_name() -> str:
    return os.environ.get(RUN_VARIABLE) or f"pid{os.getpid()}"


def ledger_path() -> Path:
    return Path(tempfile.gettempdir()) / f"intentledger-tests-pg-connections-{_run_name()}.json"


@dataclass(frozen=True)
class Reservation:
    pid: int
    connections: int
    test: str
    until: float | None  # None while the test runs; then when its lingering connections are gone
    servers: tuple[str, ...] = ()  # the fixtures of a wider scope whose servers linger
    waiting_since: float | None = None  # not held yet: in the queue since then


@contextmanager
def _ledger() -> Iterator[list[Reservation]]:
    """The run's reservations, locked for the block; what the block leaves in the list is saved,
    less the reservations of dead processes and the lingering ones that are over."""
    path = ledger_path()
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        text = handle.read()
        now = time.monotonic()
        entries = [
            entry
            for entry in (
                Reservation(**{**item, "servers": tuple(item.get("servers", ()))})
                for item in (json.loads(text) if text else [])
            )
            if _alive(entry.pid) and (entry.until is None or entry.until > now)
        ]
        yield entries
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps([entry.__dict__ for entry in entries]))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reserve(connections: int, test: str, servers: tuple[str, ...] = ()) -> float:
    """Wait until `connections` fit beside the run's other reservations, then hold them; returns
    the seconds waited. More than the whole capacity is capped to it (it then runs alone).
    Waiting tests are served first come, first served: a small test does not pass a large one
    that waits (with three processes, the two-node chaos test waited 158 s for a gap).

    A lingering reservation of this process for servers this test uses too is taken over rather
    than added to: the test reuses those idle connections."""
    pid = os.getpid()
    started = time.monotonic()

    def reused(entry: Reservation) -> bool:
        return (
            entry.pid == pid
            and entry.waiting_since is None
            and bool(entry.servers)
            and set(entry.servers) <= set(servers)
        )

    def queued(entry: Reservation) -> bool:  # this process's place in the queue
        return entry.pid == pid and entry.waiting_since is not None

    while True:
        with _ledger() as entries:
            kept = [entry for entry in entries if not reused(entry) and not queued(entry)]
            taken_over = [entry.connections for entry in entries if reused(entry)]
            wanted = min(max([connections, *taken_over]), capacity())
            held = sum(entry.connections for entry in kept if entry.waiting_since is None)
            queued_before_us = any(
                entry.waiting_since is not None and entry.waiting_since < started for entry in kept
            )
            if held + wanted <= capacity() and not queued_before_us:
                entries[:] = [*kept, Reservation(pid, wanted, test, None, servers)]
                return time.monotonic() - started
            if not any(queued(entry) for entry in entries):
                entries.append(Reservation(pid, wanted, test, None, servers, started))
        time.sleep(POLL_SECONDS)


def release(test: str) -> None:
    """Ends the test's reservation; one with servers that outlive the test lingers `LINGER` s."""
    with _ledger() as entries:
        for i, entry in enumerate(entries):
            if entry.pid == os.getpid() and entry.test == test and entry.until is None:
                if entry.servers:
                    entries[i] = Reservation(
                        entry.pid, entry.connections, test, time.monotonic() + LINGER, entry.servers
                    )
                else:
                    del entries[i]
                break


def holds_connections(count: int) -> Callable[[F], F]:
    """Declares, on a fixture function (under `@pytest.fixture`), how many connections the
    server or worker it starts holds at most: a test using it reserves that many."""

    def declare(function: F) -> F:
        function.pg_connections = count  # type: ignore[attr-defined]
        return function

    return declare


def _fixture_definitions(item: Any) -> dict[str, Any]:
    """The fixtures `item` uses, by name: each name's definitions, the one it gets last."""
    return getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})  # type: ignore[no-any-return]


def connections_needed(item: Any) -> int:
    """What `item` reserves: its `pg_connections` mark; else what the fixtures it uses declare
    (`holds_connections`), or `PROCESS_TEST` for another `slow` test; else nothing (a test that
    starts no process stays within its process's `BASE`)."""
    mark = item.get_closest_marker("pg_connections")
    if mark is not None:
        return int(mark.args[0])
    definitions = _fixture_definitions(item)
    declared = sum(
        getattr(defs[-1].func, "pg_connections", 0) for defs in definitions.values() if defs
    )
    if declared:
        return int(declared)
    return PROCESS_TEST if item.get_closest_marker("slow") else 0


def lingering_servers(item: Any, process_fixtures: frozenset[str]) -> tuple[str, ...]:
    """The server fixtures `item` uses whose scope is wider than the test: their idle connections
    stay open for a while after it."""
    definitions = _fixture_definitions(item)
    return tuple(
        sorted(
            f"{definitions[name][-1].baseid}::{name}"
            for name in process_fixtures
            if definitions.get(name) and definitions[name][-1].scope != "function"
        )
    )


class Audit:
    """Samples this process's test database while a test runs (TEST_PG_AUDIT=1): the most
    connections it saw besides its own, to compare with what the test reserved."""

    def __init__(self) -> None:
        self.url = test_database_url()
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> Audit:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                ).fetchone()
                self.most = max(self.most, int(row[0]) if row else 0)
                self._stop.wait(0.02)


def _audit_path() -> Path:
    return LOGS / f"pg-connections-audit-{_run_name()}.tsv"


def audit_record(test: str, reserved: int, most: int, waited: float) -> None:
    """One test's line: the most connections sampled (-1: not sampled), its reservation, its wait."""
    path = _audit_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:  # one short line per write: the processes' lines stay whole
        handle.write(f"{most}\t{reserved}\t{waited:.1f}\t{test}\n")


def audit_report() -> list[str]:
    """The run's waits for connections; sampled (TEST_PG_AUDIT=1), the tests that held more than
    `BASE` plus their reservation."""
    path = _audit_path()
    if not path.exists():
        return []
    rows = [line.split("\t", 3) for line in path.read_text().splitlines() if line]
    path.unlink()
    waits = sorted((row for row in rows if float(row[2]) > 0), key=lambda row: -float(row[2]))
    lines = [
        f"waited for PostgreSQL connections (tests/connection_budget.py): {len(waits)} tests,"
        f" {sum(float(row[2]) for row in waits):.1f} s in all"
    ]
    lines += [f"  {row[2]} s: {row[3].strip()}" for row in waits[:5]]
    sampled = [row for row in rows if int(row[0]) >= 0]
    if sampled:
        over = [row for row in sampled if int(row[0]) > int(row[1]) + BASE]
        lines.append(
            f"pg connections audit: {len(sampled)} tests sampled, the most in one test's"
            f" database: {max(int(row[0]) for row in sampled)}; over their reservation: {len(over)}"
        )
        lines += [f"  held {row[0]}, reserved {row[1]} + {BASE}: {row[3].strip()}" for row in over]
    return lines
