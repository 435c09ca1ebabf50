"""The README's third way to run the ledger, "your own PostgreSQL and broker", run as written: its
block's commands in its order, from this checkout, with only the environment's values put in
(a fresh database on the test server, owned by an ordinary role as docs/deploy.md makes one, this
process's own Redis database, a local SMTP server, the address the test's server listens on). A
run queued with `manage.py start_agent_run` then completes on the block's Celery worker, the
README's SDK example completes against its server with the token the block makes, and the first
admin signs in over the block's plain HTTP.

What the test does not do as written, and why: the block's first line (a virtualenv with the SDK
and the server's dependencies) is this suite's own virtualenv, which holds both; `.venv/bin/`
is that virtualenv's; the web server (`python -m config.serve`) binds 127.0.0.1 on a free port
with 2 processes instead of 0.0.0.0:8000 with 4 (the suite's PostgreSQL connection budget); `createsuperuser` gets its
answers from DJANGO_SUPERUSER_* with --noinput, as a terminal's user would type them.
"""

import base64
import os
import re
import secrets
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
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
from tests.doc_examples import doc_example
from tests.processes import (
    ROOT,
    STARTUP_TIMEOUT,
    SmtpSink,
    flush_redis,
    free_port,
    redis_url,
    smtp_sink,
    spawn,
    stop_process,
)

pytestmark = pytest.mark.slow

README_BLOCK = doc_example("README.md", "## Three ways to run it", lang="bash", index=1)
README_EXAMPLE = doc_example("README.md", "## Using the worker SDK")
ADMIN_PASSWORD = "own-database-admin-" + secrets.token_urlsafe(8)
WEB_SERVER = ["-m", "config.serve"]
# the example names its worker token `token`, as its reader's code would hold it
RUN_EXAMPLE = "import os, sys; exec(open(sys.argv[1]).read(), {'token': os.environ['TOKEN']})"


def block_lines(code: str) -> list[str]:
    """The block's command lines, comments dropped."""
    lines = [re.sub(r"\s+#\s.*$", "", line).strip() for line in code.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def exported(lines: list[str]) -> dict[str, str]:
    """NAME=value of every `export` line, as the README writes them."""
    values: dict[str, str] = {}
    for line in lines:
        if line.startswith("export "):
            for word in shlex.split(line)[1:]:
                name, _, value = word.partition("=")
                values[name] = value
    return values


def readme_environment(
    written: dict[str, str], *, database_url: str, port: int, mail: SmtpSink
) -> dict[str, str]:
    """The block's settings with this machine's values; every setting the block names must be
    one the test knows, so a new line in the README is one this test runs too."""
    url = f"http://127.0.0.1:{port}"
    values = {
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": redis_url(),
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1",
        "CSRF_TRUSTED_ORIGINS": url,
        "AUDIT_SIGNING_KEY": base64.b64encode(os.urandom(32)).decode(),
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(mail.port),
        "DEFAULT_FROM_EMAIL": written["DEFAULT_FROM_EMAIL"],
        "LEDGER_DASHBOARD_URL": url,
        "SECURE_COOKIES": written["SECURE_COOKIES"],
    }
    assert set(written) == set(values), f"the README's block sets {sorted(written)}"
    # nothing of the test's own environment: no token, no settings the README does not give
    kept = ("PATH", "HOME", "LANG", "TMPDIR", "PYTHONPYCACHEPREFIX")
    return {**{k: os.environ[k] for k in kept if k in os.environ}, **values}


def argv_of(line: str, *, port: int) -> list[str]:
    """A command line of the block, on this suite's virtualenv and the test's port."""
    words = shlex.split(line)
    program = words[0].removeprefix(".venv/bin/")
    words[0] = sys.executable if program == "python" else str(Path(sys.prefix) / "bin" / program)
    argv = list(words)
    if argv[1:3] == WEB_SERVER:
        argv[argv.index("--host") + 1] = "127.0.0.1"
        argv[argv.index("--workers") + 1] = "2"
        argv += ["--port", str(port)]
    if "createsuperuser" in argv:
        argv.append("--noinput")
    return argv


def wait_for(predicate: Any, what: str, *, timeout: float = STARTUP_TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while not (answer := predicate()):
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s"
        time.sleep(0.3)
    return answer


def ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False


@contextmanager
def the_readme_block(
    env: dict[str, str], *, port: int
) -> Iterator[dict[str, subprocess.CompletedProcess[str]]]:
    """Every line of the block in order; one-shot commands must exit 0, the servers and workers
    run for the block. Yields each one-shot command's result by its first two words after the
    program (`manage.py migrate`)."""
    lines = block_lines(README_BLOCK.code)
    assert lines[0].startswith("python -m venv .venv"), lines[0]  # this suite's virtualenv
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    with ExitStack() as stack:
        for number, line in enumerate(lines[1:], start=1):
            if line.startswith("export "):
                continue
            argv = argv_of(line, port=port)
            if argv[1:3] == WEB_SERVER or Path(argv[0]).name == "celery":  # they run on
                proc = spawn(argv, log_name=f"own-database-{number}", env=env)
                stack.callback(stop_process, proc, 20)
                if "worker" in argv and "info" in argv:  # at WARNING it never says it is ready
                    log = Path(proc.log_path)  # type: ignore[attr-defined]
                    wait_for(
                        lambda p=proc, f=log: p.poll() is not None or b"ready." in f.read_bytes(),
                        "a worker ready",
                    )
                    assert proc.poll() is None, log.read_text()[-3000:]
                continue
            extra = {}
            if "createsuperuser" in argv:
                extra = {
                    "DJANGO_SUPERUSER_USERNAME": "admin",
                    "DJANGO_SUPERUSER_EMAIL": "admin@example.com",
                    "DJANGO_SUPERUSER_PASSWORD": ADMIN_PASSWORD,
                }
            done = subprocess.run(
                argv, cwd=ROOT, env={**env, **extra}, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            outputs[" ".join(argv[1:3])] = done
        yield outputs


def run_status(database_url: str, run_id: str) -> tuple[str, list[str]]:
    with psycopg.connect(
        database_url.replace("postgres://", "postgresql://"), options=EVERY_TEAM_SESSION_OPTIONS
    ) as conn:
        row = conn.execute("SELECT status FROM runs_run WHERE id = %s", [run_id]).fetchone()
        holders = conn.execute(
            "SELECT DISTINCT payload->>'worker' FROM runs_event"
            " WHERE run_id = %s AND type = 'lease_acquired'",
            [run_id],
        ).fetchall()
    assert row is not None
    return row[0], [holder for (holder,) in holders]


def log_in(client: httpx.Client, username: str, password: str) -> httpx.Response:
    page = client.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, page.text[:500]
    return client.post(
        "/login/",
        data={"csrfmiddlewaretoken": token.group(1), "username": username, "password": password},
        headers={"Referer": f"{client.base_url}/login/"},
    )


@pytest.mark.pg_connections(8)
def test_the_readmes_own_database_block_as_written_runs_a_queued_run(
    django_db_setup: Any, tmp_path: Path
) -> None:
    flush_redis()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    written = exported(block_lines(README_BLOCK.code))
    with fresh_database("readme") as database_url, smtp_sink() as mail:
        env = readme_environment(written, database_url=database_url, port=port, mail=mail)
        with the_readme_block(env, port=port) as outputs:
            # every setting the block gives is one the deploy check would have named
            checked = outputs["manage.py check"]
            assert "ledger.W0" not in checked.stdout + checked.stderr, checked.stderr
            # the block's DATABASE_URL is an ordinary role owning the database, as the README
            # says to make it (docs/deploy.md): its migrate made it the owner of every table
            assert connected_role(database_url) == an_ordinary_role_owning_every_table()
            wait_for(lambda: ready(url), "the block's web server ready")

            queued = subprocess.run(
                argv_of("python manage.py start_agent_run --ticket T-1001", port=port),
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert queued.returncode == 0, queued.stderr
            run_id = str(uuid.UUID(queued.stdout.strip().splitlines()[-1]))
            status, _ = wait_for(
                lambda: (
                    (s := run_status(database_url, run_id))[0] not in ("pending", "running") and s
                ),
                f"run {run_id} finished",
            )
            assert status == "completed"
            # the block's worker ran it, in-process beside the database, with no token given
            assert run_status(database_url, run_id)[1][0].startswith("celery:")
            wait_for(lambda: mail.to("ada@example.com"), "the run's email at the SMTP server")

            # the README's SDK example against the block's server, with the token it printed
            token = outputs["manage.py create_worker_token"].stdout.strip().splitlines()[-1]
            example = tmp_path / "example.py"
            example.write_text(README_EXAMPLE.code.replace("http://ledger:8000", url))
            sdk = subprocess.run(
                [sys.executable, "-c", RUN_EXAMPLE, str(example)],
                cwd=tmp_path,
                env={**os.environ, "TOKEN": token},
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert sdk.returncode == 0, sdk.stderr
            assert "stopped cleanly" not in sdk.stdout, sdk.stdout

            # the first admin signs in over the block's plain HTTP and reaches the pages
            with httpx.Client(base_url=url, timeout=30) as client:
                signed_in = log_in(client, "admin", ADMIN_PASSWORD)
                assert signed_in.status_code == 302, signed_in.text[:500]
                pages = ["/", "/queue/", f"/runs/{run_id}/", "/console/", "/people/"]
                pages += ["/audit/exports/", "/audit/checkpoints/", f"/audit/runs/{run_id}/export"]
                for page in pages:
                    assert client.get(page).status_code == 200, page
