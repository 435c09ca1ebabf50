"""compose.yaml brought up with podman-compose: PostgreSQL, Redis, the one-shot migrate, web,
worker and beat; a support-agent run queued through the web container completes in the composed
worker.

What the test substitutes, and why: no image registry answers on the test machines, so the
`postgres` and `redis` services run stand-ins built here from the local Debian base
(tests/deploy/images: Debian's PostgreSQL 17 and Redis, with the official images' variables,
init scripts, data folders and health commands), named through compose.yaml's POSTGRES_IMAGE and
REDIS_IMAGE; the ledger's image is the one test_image.py builds (LEDGER_IMAGE). Everything else is
the file as a user runs it, on its own network, its port published, with the README's command
(`up -d`, no service named): Debian's podman-compose (1.0.3) knows no profiles, so the file has
none (PgBouncer is compose.pgbouncer.yaml's) and nothing it starts needs an image from a registry.
It does not wait for `depends_on` conditions: the ledger copes (migrate waits for PostgreSQL; web
answers /readyz 503 `migrations` until migrate is done).
"""

import base64
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from teams.scope import EVERY_TEAM_SESSION_OPTIONS
from tests.deploy.podman import BASE_IMAGE, Podman, builds_one_at_a_time, cannot_run
from tests.processes import ROOT, STARTUP_TIMEOUT, free_port

pytestmark = pytest.mark.slow

POSTGRES_STANDIN = "localhost/ledger-test-postgres:17"
REDIS_STANDIN = "localhost/ledger-test-redis:7"
SERVICES = ("postgres", "redis", "migrate", "web", "worker", "beat")


def standins_build(podman: Podman) -> None:
    images = ROOT / "tests" / "deploy" / "images"
    for tag, file in ((POSTGRES_STANDIN, "postgres"), (REDIS_STANDIN, "redis")):
        with builds_one_at_a_time():
            podman.build(
                tag,
                "--build-arg",
                f"BASE={BASE_IMAGE}",
                "--file",
                str(images / f"{file}.Containerfile"),
                str(images),
            )


@contextmanager
def composed(podman: Podman, image: str, port: int) -> Iterator[tuple[str, dict[str, str]]]:
    """`podman-compose up -d` of compose.yaml for the block, then `down -v` and its network."""
    project = f"ledgertest{uuid.uuid4().hex[:6]}"
    env = {
        **podman.env,
        "SECRET_KEY": "compose-test-secret-key",
        "AUDIT_SIGNING_KEY": base64.b64encode(os.urandom(32)).decode(),
        "INTENTLEDGER_TOKEN": f"alw_compose-test-{uuid.uuid4().hex}",
        "LEDGER_IMAGE": image,
        "POSTGRES_IMAGE": POSTGRES_STANDIN,
        "REDIS_IMAGE": REDIS_STANDIN,
        "LEDGER_PORT": str(port),
    }

    def compose(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman-compose", "-p", project, "-f", "compose.yaml", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    up = compose("up", "-d")  # as the README writes it
    try:
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        # and nothing but the ledger's services: no PgBouncer pulled from a registry
        assert "pgbouncer" not in up.stdout + up.stderr, up.stdout[-3000:] + up.stderr[-3000:]
        yield project, env
    finally:
        try:
            for service in SERVICES:
                name = container_of(podman, project, service)
                if name:
                    logs = podman("logs", name, check=False)
                    path = ROOT / ".pytest_cache" / f"{name}.log"
                    path.parent.mkdir(parents=True, exist_ok=True)  # a clean clone has none yet
                    path.write_text(logs.stdout + logs.stderr)
        finally:  # taken down even when keeping its logs failed (it once left six containers)
            compose("down", "-v", "-t", "2")
            podman("network", "rm", "--force", f"{project}_default", check=False)


def container_of(podman: Podman, project: str, service: str) -> str:
    found = podman(
        "ps",
        "--all",
        "--filter",
        f"label=io.podman.compose.project={project}",
        "--filter",
        f"label=com.docker.compose.service={service}",
        "--format",
        "{{.Names}}",
    )
    return found.stdout.strip().splitlines()[0] if found.stdout.strip() else ""


def psql(podman: Podman, project: str, sql: str) -> str:
    database = container_of(podman, project, "postgres")
    done = podman(
        "exec",
        "-e",
        f"PGOPTIONS={EVERY_TEAM_SESSION_OPTIONS}",
        database,
        "psql",
        "-U",
        "ledger",
        "-d",
        "ledger",
        "-Atc",
        sql,
    )
    return done.stdout.strip()


def start_agent_run(podman: Podman, web: str, ticket: str) -> subprocess.CompletedProcess[str]:
    """`manage.py start_agent_run` in the web container. Podman's container DNS (aardvark) has
    been seen to fail a lookup of `postgres` once under load, right after web itself answered
    /readyz through it, as a temporary failure or as "Name or service not known": such an answer
    is asked again, a few times (the command attaches to the same run by its ticket, so a second
    call starts nothing twice); any other failure fails."""
    argv = ("exec", web, "python", "manage.py", "start_agent_run", "--ticket", ticket)
    for _ in range(4):
        answer = podman(*argv, check=False)
        lookup = ("name resolution", "failed to resolve host 'postgres'")
        if answer.returncode == 0 or not any(words in answer.stderr for words in lookup):
            break
        time.sleep(2)
    assert answer.returncode == 0, f"start_agent_run exited {answer.returncode}: {answer.stderr}"
    return answer


def test_compose_up_gives_a_ledger_whose_worker_completes_a_run(
    podman: Podman, ledger_image: str, django_db_setup: Any
) -> None:
    if shutil.which("podman-compose") is None:
        cannot_run("podman-compose is not installed (apt-get install podman-compose)")
    standins_build(podman)
    port = free_port()
    started = time.monotonic()
    with composed(podman, ledger_image, port) as (project, _env):
        deadline = time.monotonic() + STARTUP_TIMEOUT * 2
        while True:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
                if ready.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the composed web never became ready"
            time.sleep(0.5)
        assert ready.json() == {"ready": True, "missing": []}
        # and the one-shot has finished (it registers the workers' token after migrating): what
        # `depends_on: condition: service_completed_successfully` makes docker compose wait for
        migrate = container_of(podman, project, "migrate")
        while (
            state := podman("inspect", migrate, "--format", "{{.State.Status}}")
        ).stdout.strip() != "exited":
            assert time.monotonic() < deadline, f"migrate still {state.stdout.strip()}"
            time.sleep(0.5)
        exit_code = podman("inspect", migrate, "--format", "{{.State.ExitCode}}").stdout.strip()
        assert exit_code == "0"

        web = container_of(podman, project, "web")
        queued = start_agent_run(podman, web, "T-1001")
        run_id = queued.stdout.strip().splitlines()[-1]
        run_id = str(uuid.UUID(run_id))  # a UUID, so safe to put in the SQL below
        status = ""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while status not in ("completed", "failed", "needs_review", "budget_exceeded"):
            assert time.monotonic() < deadline, f"run {run_id} still {status!r}"
            time.sleep(0.5)
            sql = f"SELECT status FROM runs_run WHERE id = '{run_id}'"  # noqa: S608
            status = psql(podman, project, sql)
        podman.timings["compose up to the first completed run"] = time.monotonic() - started
        assert status == "completed"
        # the worker ran it (its lease holder is the Celery node), and it sent its one email
        sql = f"SELECT DISTINCT payload->>'worker' FROM runs_event WHERE run_id = '{run_id}'"  # noqa: S608
        holders = psql(podman, project, sql + " AND type = 'lease_acquired'")
        assert holders.startswith("celery:"), holders
        assert psql(podman, project, "SELECT count(*) FROM tools_outboundemail") == "1"
        assert psql(podman, project, "SELECT name FROM runs_workertoken") == "workers"
        # all of it as `ledger`, an ordinary role (compose.postgres-init.sql) that migrate made
        # the owner of every table, so that row-level security forced on a table binds it
        role = "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = 'ledger'"
        assert psql(podman, project, role) == "f|f"
        owners = "SELECT DISTINCT tableowner FROM pg_tables WHERE schemaname = 'public'"
        assert psql(podman, project, owners) == "ledger"
        # and the file gives every setting a person would meet missing (config.deployment)
        for service in ("web", "worker", "beat"):
            logs = podman("logs", container_of(podman, project, service), check=False)
            assert "is not set:" not in logs.stdout + logs.stderr, (service, logs.stderr[-2000:])
