"""Dashboard pages read from a real streaming replica; everything that decides uses the primary.

The test builds its own primary (initdb) and hot standby (pg_basebackup -R, streaming) on free
ports, migrates the primary, and serves the project with DATABASE_REPLICA_URL. With the
standby's replay paused, the worker API still journals on the primary, the dashboard does not
see the new run yet and says how far behind it is; once replay resumes the page catches up.
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from teams.scope import EVERY_TEAM_SESSION_OPTIONS
from tests.conftest import ROOT, free_port, web_server
from tests.scale.helpers import log_in

BINS = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not BINS, reason="PostgreSQL's server binaries are not installed"),
]


def as_postgres(args: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root; as root, run them as the postgres user."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


@pytest.fixture(scope="module")
def streaming_pair() -> Iterator[tuple[str, str]]:
    """(primary URL, replica URL): a fresh primary and a hot standby streaming from it."""
    pg_bin = Path(BINS[-1])
    folder = Path(tempfile.mkdtemp(prefix="ledger-replica-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    primary, replica = folder / "primary", folder / "replica"
    primary_port, replica_port = free_port(), free_port()

    def run(args: list[str]) -> None:
        subprocess.run(as_postgres(args), check=True, capture_output=True, timeout=120)

    run([str(pg_bin / "initdb"), "-D", str(primary), "-U", "root", "--auth=trust", "--no-sync",
         "-E", "UTF8"])  # fmt: skip
    with open(primary / "postgresql.auto.conf", "a") as conf:
        conf.write(
            f"port = {primary_port}\nlisten_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{folder}'\nfsync = off\ntimezone = 'UTC'\n"
        )
    with open(primary / "pg_hba.conf", "a") as hba:
        hba.write("host replication all 127.0.0.1/32 trust\n")
    pg_ctl = str(pg_bin / "pg_ctl")
    run([pg_ctl, "-D", str(primary), "-l", str(folder / "primary.log"), "-w", "start"])
    try:
        with psycopg.connect(f"postgresql://root@127.0.0.1:{primary_port}/postgres") as conn:
            conn.autocommit = True
            # the ledger's role: an ordinary one owning its database (docs/deploy.md)
            conn.execute("CREATE ROLE ledger LOGIN")
            conn.execute("CREATE DATABASE ledger OWNER ledger")
        run([str(pg_bin / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary_port),
             "-U", "root", "-D", str(replica), "-R", "-X", "stream", "--no-sync", "--checkpoint=fast"])  # fmt: skip
        with open(replica / "postgresql.auto.conf", "a") as conf:
            conf.write(f"port = {replica_port}\n")
        run([pg_ctl, "-D", str(replica), "-l", str(folder / "replica.log"), "-w", "start"])
        yield (
            f"postgres://ledger@127.0.0.1:{primary_port}/ledger",
            f"postgres://ledger@127.0.0.1:{replica_port}/ledger",
        )
    finally:
        for data in (replica, primary):
            if data.exists():
                subprocess.run(
                    as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "stop"]),
                    capture_output=True,
                )
        shutil.rmtree(folder, ignore_errors=True)


def on_replica(replica: str, sql: str) -> Any:
    with psycopg.connect(
        replica.replace("postgres://", "postgresql://"), options=EVERY_TEAM_SESSION_OPTIONS
    ) as conn:
        conn.autocommit = True
        row = conn.execute(sql).fetchone()
        return row[0] if row else None


def wait_for_replica(replica: str, run_id: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if on_replica(replica, f"SELECT count(*) FROM runs_run WHERE id = '{run_id}'"):  # noqa: S608
            return
        time.sleep(0.1)
    raise TimeoutError(f"run {run_id} never reached the replica")


def journal_a_step(http: httpx.Client) -> str:
    run_id = http.post("/api/v1/runs/", json={"agent": "replicated", "input": {}}).json()["id"]
    lease = http.post(f"/api/v1/runs/{run_id}/lease", json={"worker": "w-1"})
    assert lease.status_code == 200, lease.text
    step = http.post(
        f"/api/v1/runs/{run_id}/steps/",
        json={"epoch": lease.json()["epoch"], "index": 0, "kind": "tool", "name": "kb.search",
              "effect": "read", "arguments": {"query": "refund"}, "outcome": {"result": {}}},
    )  # fmt: skip
    assert step.status_code == 201, step.text
    return str(run_id)


def test_the_dashboard_reads_the_replica_and_says_when_it_lags(
    streaming_pair: tuple[str, str],
) -> None:
    primary, replica = streaming_pair
    env = {
        **os.environ,
        "DATABASE_URL": primary,
        "DATABASE_REPLICA_URL": replica,
        "LEDGER_REPLICA_LAG_WARN_SECONDS": "1",
        "SECURE_COOKIES": "0",
        "DJANGO_SUPERUSER_PASSWORD": "correct horse battery",
    }
    env.pop("TEST_DATABASE_NAME", None)

    def manage(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True,
            text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    manage("migrate", "--noinput")
    token = manage("create_worker_token", "replica-test").strip().splitlines()[-1]
    manage("createsuperuser", "--noinput", "--username", "boss", "--email", "boss@example.com")

    with (
        web_server(env=env, log_name="replica-web") as base,
        httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as api,
        httpx.Client(base_url=base, follow_redirects=True) as browser,
    ):
        seen = journal_a_step(api)
        wait_for_replica(replica, seen)
        log_in(browser, base, "boss", "correct horse battery")
        assert browser.get(f"/runs/{seen}/").status_code == 200

        # the standby's superuser pauses its replay (the ledger's own role may not)
        admin = replica.replace("postgres://ledger@", "postgres://root@", 1)
        on_replica(admin, "SELECT pg_wal_replay_pause()")
        try:
            # the primary decides: leases and steps go on while the standby stands still
            unseen = journal_a_step(api)
            page = browser.get(f"/runs/{unseen}/")
            assert page.status_code == 404, "the dashboard read the primary"
            time.sleep(2.5)  # past the 1 s warning and the 2 s cache of the lag reading
            listing = browser.get("/")
            assert listing.status_code == 200
            assert 'id="replica-lag"' in listing.text
            assert "behind the primary" in listing.text
        finally:
            on_replica(admin, "SELECT pg_wal_replay_resume()")

        wait_for_replica(replica, unseen)
        time.sleep(2.1)
        caught_up = browser.get(f"/runs/{unseen}/")
        assert caught_up.status_code == 200
        assert 'id="replica-lag"' not in caught_up.text
