"""The server image, run as a deployment runs it: `migrate`, then `web`, against a database of its
own on the test PostgreSQL, as an ordinary role that owns it (docs/deploy.md), and the README's
SDK example from a virtualenv holding nothing of ours but the SDK. Killed after its email step
and started again, the example leaves one ticket and one email. What the image cannot reach,
`/readyz` names."""

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from teams.scope import EVERY_TEAM_SESSION_OPTIONS
from tests.deploy.databases import (
    an_ordinary_role_owning_every_table,
    connected_role,
    fresh_database,
)
from tests.deploy.podman import Podman, image_size, sdk_only_virtualenv
from tests.doc_examples import doc_example
from tests.processes import STARTUP_TIMEOUT, free_port, redis_url, smtp_sink

pytestmark = pytest.mark.slow

README_EXAMPLE = doc_example("README.md", "## Using the worker SDK")

# The README's example as its author runs it, with one addition a test needs: with STOP_AFTER,
# once the step of that name has executed and been journalled, the process writes the marker
# file and waits there for the test's SIGKILL.
HARNESS = """
import os, sys, time
from pathlib import Path
import intentledger

stop_after, marker = os.environ.get("STOP_AFTER"), os.environ.get("MARKER")
run = intentledger.Ledger.run

def on_step(current, step):
    if stop_after and step.name == stop_after and not step.replayed:
        Path(marker).write_text(str(step.index))
        time.sleep(600)

intentledger.Ledger.run = lambda self, *a, **k: run(self, *a, on_step=on_step, **k)
code = open(sys.argv[1]).read()
exec(compile(code, "README.md", "exec"), {"token": os.environ["INTENTLEDGER_TOKEN"]})
"""


def container_env(**values: str) -> list[str]:
    return [arg for name, value in values.items() for arg in ("--env", f"{name}={value}")]


def wait_ready(url: str, *, timeout: float = STARTUP_TIMEOUT) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            answer = httpx.get(f"{url}/readyz", timeout=5)
            if answer.status_code == 200 or time.monotonic() > deadline:
                return answer
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def counts(database_url: str, customer: str) -> tuple[int, int, list[str]]:
    """The tools' own records: tickets and outbound emails for `customer`, and the runs' statuses."""
    with psycopg.connect(
        database_url.replace("postgres://", "postgresql://"), options=EVERY_TEAM_SESSION_OPTIONS
    ) as conn:
        tickets = conn.execute(
            "SELECT count(*) FROM tools_ticket WHERE customer = %s", [customer]
        ).fetchone()
        emails = conn.execute(
            'SELECT count(*) FROM tools_outboundemail WHERE "to" = %s', [customer]
        ).fetchone()
        runs = conn.execute(
            "SELECT status FROM runs_run WHERE agent = 'support' AND external_id = 'ticket-42'"
        ).fetchall()
    assert tickets is not None and emails is not None
    return tickets[0], emails[0], [status for (status,) in runs]


@pytest.mark.pg_connections(6)
def test_the_image_serves_a_ledger_the_readme_example_survives_a_kill_against(
    podman: Podman, ledger_image: str, django_db_setup: Any, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:6]
    with fresh_database("image") as database_url, smtp_sink() as mail:
        settings = container_env(
            SECRET_KEY="image-test-secret-key",
            DATABASE_URL=database_url,
            DATABASE_CONN_MAX_AGE="0",
            CELERY_BROKER_URL=redis_url(),
            EMAIL_HOST="127.0.0.1",
            EMAIL_PORT=str(mail.port),
        )
        run_once = ["run", "--rm", "--network", "host", *settings, ledger_image]
        # what the image says it runs: the entrypoint's own words, nothing of its code
        told = podman("run", "--rm", ledger_image, "--help").stdout
        assert told.splitlines()[0].startswith("The image's entrypoint"), told
        assert "set -eu" not in told and "anything else is run as given" in told
        migrated = podman(*run_once, "migrate")
        assert "Applying runs.0001" in migrated.stdout, migrated.stdout
        # as an ordinary role (no superuser, no BYPASSRLS), which now owns every table
        assert connected_role(database_url) == an_ordinary_role_owning_every_table()

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        web = ["--network", "host", *settings, "--env", f"PORT={port}"]
        web += container_env(WEB_WORKERS="1", WEB_THREADS="4")
        started = time.monotonic()
        with podman.container(f"ledger-test-web-{suffix}", *web, ledger_image, "web"):
            ready = wait_ready(url)
            podman.timings["podman run web to /readyz 200"] = time.monotonic() - started
            assert (ready.status_code, ready.json()) == (200, {"ready": True, "missing": []})
            print(f"\n[deploy] image size: {image_size(podman, ledger_image) / 1e6:.0f} MB")

            made = podman(*run_once, "python", "manage.py", "create_worker_token", "image-test")
            token = made.stdout.strip().splitlines()[-1]

            example = tmp_path / "example.py"
            example.write_text(README_EXAMPLE.code.replace("http://ledger:8000", url))
            (tmp_path / "harness.py").write_text(HARNESS)
            with sdk_only_virtualenv(tmp_path) as python:
                imports = subprocess.run(
                    [
                        str(python),
                        "-c",
                        "import intentledger, importlib.util as u;"
                        " print(u.find_spec('django') is None)",
                    ],
                    capture_output=True,
                    text=True,
                    cwd=tmp_path,
                    check=True,
                )
                assert imports.stdout.strip() == "True", "the SDK virtualenv has Django"
                env = {**os.environ, "INTENTLEDGER_TOKEN": token}
                env.pop("PYTHONPATH", None)
                marker = tmp_path / "emailed"
                first = subprocess.Popen(
                    [str(python), "harness.py", str(example)],
                    cwd=tmp_path,
                    env={**env, "STOP_AFTER": "email.send", "MARKER": str(marker)},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                deadline = time.monotonic() + 120
                while not marker.exists():
                    assert first.poll() is None, first.communicate()
                    assert time.monotonic() < deadline, "the example never reached email.send"
                    time.sleep(0.05)
                first.send_signal(signal.SIGKILL)
                first.wait(timeout=30)
                assert counts(database_url, "ada@example.com") == (1, 1, ["running"])

                again = subprocess.run(
                    [str(python), "harness.py", str(example)],
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                assert again.returncode == 0, again.stderr
                assert "stopped cleanly" not in again.stdout
            assert counts(database_url, "ada@example.com") == (1, 1, ["completed"])
            assert len(mail.to("ada@example.com")) == 1

        # the same image with PostgreSQL out of reach: alive, and not ready, naming the database
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        unreachable = f"postgres://ledger@127.0.0.1:{free_port()}/ledger"
        web = ["--network", "host", *settings, "--env", f"PORT={port}"]
        web += container_env(DATABASE_URL=unreachable, WEB_WORKERS="1", WEB_THREADS="2")
        with podman.container(f"ledger-test-nodb-{suffix}", *web, ledger_image, "web"):
            answer = wait_ready(url, timeout=60)
            assert (answer.status_code, answer.json()) == (
                503,
                {"ready": False, "missing": ["database"]},
            )
            assert httpx.get(f"{url}/healthz").status_code == 200
