"""What a server's idle threads leave open on PostgreSQL.

- Told to keep no connection (DATABASE_CONN_MAX_AGE=0, as the suite's workers are), a server keeps
  none once its requests are answered, the hot worker calls included: those are answered before
  Django builds a request, so Django's own end-of-request clean-up never sees them.
- Keeping its connections (the product's default, as the suite's web servers do), a server whose
  connections PostgreSQL ends once idle (`idle_session_timeout`) holds none a few seconds after
  its last request, and its next requests are answered on new connections (Django's health check).

Linux only (it reads /proc): the server's processes are the ones holding its listening socket,
and a connection to PostgreSQL is a socket of theirs whose peer is the database's port.
"""

import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.db import connection

from tests.processes import WEB_IDLE_SESSION_SECONDS
from tests.reliability.conftest import SERVER_CONNECTIONS, web_server
from tests.reliability.helpers import Worker

pytestmark = [
    pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc"),
    pytest.mark.pg_connections(SERVER_CONNECTIONS),
]


def _sockets(port: int, *, remote: bool, state: str) -> set[str]:
    """Inodes of TCP sockets (IPv4 and IPv6) in `state` (hex, as /proc/net/tcp says it) whose
    local (or remote) port is `port`."""
    inodes = set()
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        lines = table.read_text().splitlines()[1:] if table.exists() else []
        for line in lines:
            fields = line.split()
            address = fields[2] if remote else fields[1]
            if int(address.rsplit(":", 1)[1], 16) == port and fields[3] == state:
                inodes.add(fields[9])
    return inodes


def _inodes_of(pid: str) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def database_connections_held(server_url: str) -> int:
    """How many connections to PostgreSQL the processes of the server at `server_url` hold."""
    listening = _sockets(urlsplit(server_url).port or 80, remote=False, state="0A")
    database = _sockets(int(connection.settings_dict["PORT"] or 5432), remote=True, state="01")
    held = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            inodes = _inodes_of(pid)
        except OSError:
            continue  # not ours to read, or gone
        if inodes & listening:
            held += len(inodes & database)
    return held


def _hot_calls(server: str, token: str, *, agents: int = 16, runs: int = 3) -> None:
    """`agents` threads each create `runs` runs and make the hot calls on each."""

    def agent(n: int) -> None:
        worker = Worker(server, token)
        for i in range(runs):
            run_id = worker.create(external_id=f"idle-{server[-5:]}-{n}-{i}-{time.monotonic()}")[
                "id"
            ]
            epoch = worker.lease(run_id).json()["epoch"]  # the hot calls
            assert worker.intent(run_id, epoch, 0).status_code == 201
            assert worker.outcome(run_id, epoch, 0).status_code == 200
        worker.close()

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(agents)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)


def _until_none_held(server: str, *, within: float) -> None:
    deadline = time.monotonic() + within
    while (held := database_connections_held(server)) > 0:
        assert time.monotonic() < deadline, f"the server still holds {held} idle connections"
        time.sleep(0.1)


def test_a_server_with_conn_max_age_0_holds_no_connection_after_hot_worker_calls(
    raw_token: str, transactional_db: Any
) -> None:
    with web_server(env={"DATABASE_CONN_MAX_AGE": "0"}) as server:
        _hot_calls(server, raw_token)
        # every answer is sent; a Django request closes its connection just after its response
        _until_none_held(server, within=30)


def test_a_server_keeping_its_connections_loses_them_when_idle_and_answers_on_new_ones(
    ledger_server: str, raw_token: str, transactional_db: Any
) -> None:
    _hot_calls(ledger_server, raw_token)
    assert database_connections_held(ledger_server) > 0, "its threads keep their connections"
    _until_none_held(ledger_server, within=WEB_IDLE_SESSION_SECONDS + 30)
    _hot_calls(ledger_server, raw_token, agents=4, runs=2)  # no 503: a dead one is replaced
