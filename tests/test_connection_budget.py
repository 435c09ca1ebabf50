"""The suite's PostgreSQL budget (tests/connection_budget.py): a test that starts processes waits
while the run's other tests hold too many connections, and nothing a dead or finished test held
is kept for ever."""

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from tests import connection_budget
from tests.connection_budget import Reservation


@pytest.fixture
def own_run(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A ledger of this test's own, for a run of three processes and the default 40."""
    monkeypatch.setenv(connection_budget.RUN_VARIABLE, f"budget-test-{uuid.uuid4().hex}")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
    monkeypatch.setenv("TEST_PG_CONNECTIONS", "40")
    yield
    connection_budget.end_run()


def another_process_holds(connections: int, *, pid: int, until: float | None = None) -> None:
    with connection_budget._ledger() as entries:
        entries.append(Reservation(pid, connections, "elsewhere", until))


def held() -> list[Reservation]:
    with connection_budget._ledger() as entries:
        return list(entries)


def test_what_fits_beside_the_others_is_reserved_at_once_and_released_at_the_end(
    own_run: None,
) -> None:
    assert connection_budget.capacity() == 40 - 3 * connection_budget.BASE
    another_process_holds(16, pid=os.getppid())
    assert connection_budget.reserve(16, "mine") < connection_budget.POLL_SECONDS  # no wait
    assert sorted(entry.connections for entry in held()) == [16, 16]
    connection_budget.release("mine")
    assert [entry.test for entry in held()] == ["elsewhere"]


def test_a_test_that_does_not_fit_waits_until_the_other_one_ends(own_run: None) -> None:
    another_process_holds(20, pid=os.getppid())
    ended = threading.Event()

    def the_other_test_ends() -> None:
        time.sleep(0.5)
        with connection_budget._ledger() as entries:
            entries[:] = [entry for entry in entries if entry.test != "elsewhere"]
            # set while the ledger is still locked: a waiter can only see the change after this
            # (set after the block, a loaded machine let the waiter in first: a flaky failure)
            ended.set()

    threading.Thread(target=the_other_test_ends).start()
    waited = connection_budget.reserve(16, "mine")
    assert ended.is_set()
    assert waited >= 0.4
    assert [(entry.test, entry.connections) for entry in held()] == [("mine", 16)]


def test_a_dead_process_loses_its_reservation_and_a_lingering_one_ends_in_time(
    own_run: None,
) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    another_process_holds(30, pid=dead.pid)
    another_process_holds(30, pid=os.getppid(), until=time.monotonic() - 1)  # lingered, over
    assert connection_budget.reserve(34, "mine") < connection_budget.POLL_SECONDS  # no wait
    assert [entry.test for entry in held()] == ["mine"]


def test_a_server_that_outlives_its_test_lingers_and_its_next_user_takes_it_over(
    own_run: None,
) -> None:
    server = ("tests/reliability::ledger_server",)
    connection_budget.reserve(16, "first", server)
    connection_budget.release("first")
    (lingering,) = held()
    assert lingering.until is not None and lingering.until > time.monotonic()
    # the next test on the same server reuses its idle connections: not counted twice
    connection_budget.reserve(16, "second", server)
    assert [(entry.test, entry.connections) for entry in held()] == [("second", 16)]
    connection_budget.release("second")
    # a test without that server counts them beside its own until they are gone
    connection_budget.reserve(8, "third")
    assert sorted(entry.connections for entry in held()) == [8, 16]


def test_more_than_the_whole_budget_is_capped_so_the_test_still_runs(own_run: None) -> None:
    assert connection_budget.reserve(100, "huge") < connection_budget.POLL_SECONDS  # no wait
    assert [entry.connections for entry in held()] == [connection_budget.capacity()]


def test_a_small_test_does_not_pass_a_large_one_waiting_in_the_queue(own_run: None) -> None:
    another_process_holds(20, pid=os.getppid())
    with connection_budget._ledger() as entries:  # the two-node chaos test, queued a while ago
        entries.append(Reservation(1, 20, "queued", None, (), time.monotonic() - 5))
    granted = threading.Event()

    def small_test() -> None:
        connection_budget.reserve(8, "small")  # 20 + 8 fit in 34, but it comes second
        granted.set()

    threading.Thread(target=small_test, daemon=True).start()
    assert not granted.wait(0.5)
    with connection_budget._ledger() as entries:  # the queued one is served and ends
        entries[:] = [entry for entry in entries if entry.test != "queued"]
    assert granted.wait(2)
