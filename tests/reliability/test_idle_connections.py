"""A server told to keep no connection (DATABASE_CONN_MAX_AGE=0, as every server the suite starts)
keeps none once its requests are answered, the hot worker calls included: those are answered
before Django builds a request, so Django's own end-of-request clean-up never sees them.

Linux only (it reads /proc): the server's processes are the ones holding its listening socket,
and a connection to PostgreSQL is a socket of theirs whose peer is port 5432.
"""

import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.db import connection

from tests.reliability.helpers import Worker

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc")


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


def test_a_server_with_conn_max_age_0_holds_no_connection_after_hot_worker_calls(
    ledger_server: str, raw_token: str, transactional_db: Any
) -> None:
    def agent(n: int) -> None:
        worker = Worker(ledger_server, raw_token)
        for i in range(3):
            run_id = worker.create(external_id=f"idle-{n}-{i}")["id"]
            epoch = worker.lease(run_id).json()["epoch"]  # the hot calls
            assert worker.intent(run_id, epoch, 0).status_code == 201
            assert worker.outcome(run_id, epoch, 0).status_code == 200
        worker.close()

    agents = [threading.Thread(target=agent, args=(n,)) for n in range(16)]
    for thread in agents:
        thread.start()
    for thread in agents:
        thread.join(timeout=120)

    # every answer is sent; a Django request closes its connection just after its response
    deadline = time.monotonic() + 30
    while (held := database_connections_held(ledger_server)) > 0:
        assert time.monotonic() < deadline, f"the server still holds {held} idle connections"
        time.sleep(0.1)
