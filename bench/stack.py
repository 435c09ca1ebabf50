"""The real stack for a bench run: the bench database, the web server, a worker token.

Every process started here runs in its own session (process group) and is registered, so
`stop_all()` (called from a finally block in `bench.__main__`) leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg

from bench.common import APP_ROLE, BENCH_DB, PG_HOST, PG_PORT, PG_USER, ROOT, WORK, pg_url
from tests import processes  # one source for processes
from tests.processes import free_port, redis_url, wait_for_http

_STARTED: list[subprocess.Popen[bytes]] = []
_TREE: Path | None = None


def tree() -> Path:
    """Where the served code comes from: a snapshot of the committed HEAD by default.

    Several people edit this working tree at once; serving `git archive HEAD` makes a run
    measure committed code (named in RESULTS.md), not someone's half-written file.
    BENCH_TREE=worktree serves the working tree as it is (for trying a change before commit).
    """
    global _TREE
    if _TREE is not None:
        return _TREE
    if os.environ.get("BENCH_TREE") == "worktree":
        _TREE = ROOT
        os.environ["BENCH_SERVED_COMMIT"] = "working tree"
        return _TREE
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    target = WORK / f"tree-{rev[:12]}"
    os.environ["BENCH_SERVED_COMMIT"] = rev[:12]  # RESULTS.md names the commit it measured
    for old in WORK.glob("tree-*"):
        # snapshots of earlier commits, unused for a day (a concurrent run may hold a newer one)
        if old != target and time.time() - old.stat().st_mtime > 86400:
            shutil.rmtree(old, ignore_errors=True)
    if not (target / "manage.py").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", rev],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    _TREE = target
    return _TREE


def admin_connect(db: str = "postgres") -> psycopg.Connection[Any]:
    return psycopg.connect(
        host=PG_HOST, port=PG_PORT, user=PG_USER, dbname=db, autocommit=True, connect_timeout=10
    )


def ensure_app_role() -> None:
    """The application role (APP_ROLE), made by the admin when missing; refused when it is a
    superuser or bypasses row-level security (it would measure a ledger no policy binds)."""
    with admin_connect() as conn:
        found = conn.execute(
            "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", (APP_ROLE,)
        ).fetchone()
        if found is None:
            with suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
                conn.execute(f'CREATE ROLE "{APP_ROLE}" LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEROLE')
            found = (False, False)
    if any(found):
        raise RuntimeError(
            f"BENCH_APP_ROLE {APP_ROLE!r} is a superuser or has BYPASSRLS: the bench serves the "
            "ledger as an ordinary role (ALTER ROLE ... NOSUPERUSER NOBYPASSRLS, or name another)"
        )


def ensure_database(name: str) -> None:
    """The bench database, owned by the application role (its migrations run as that role, so
    it owns the tables and the forced row-level security binds it). A bench database another
    role owns (one made before the bench served as an ordinary role) is made again."""
    ensure_app_role()
    with admin_connect() as conn:
        row = conn.execute(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", (name,)
        ).fetchone()
        if row is not None and row[0] != APP_ROLE:
            print(
                f"[bench] {name} is owned by {row[0]}, not {APP_ROLE}: making it again",
                flush=True,
            )
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            row = None
        if row is None:
            conn.execute(f'CREATE DATABASE "{name}" OWNER "{APP_ROLE}"')


def drop_database(name: str) -> None:
    with admin_connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def project_env(**extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": pg_url(BENCH_DB),
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only-secret"),
        "DEBUG": "0",
        "LOG_LEVEL": "ERROR",
        "CELERY_BROKER_URL": redis_url(),  # a Redis database this process claimed for itself
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("TEST_DATABASE_NAME", None)
    key_file = WORK / "audit-signing-key"
    if key_file.is_file() and "AUDIT_SIGNING_KEY" not in os.environ:
        env["AUDIT_SIGNING_KEY"] = key_file.read_text().strip()
    env.update(extra)
    return env


def ensure_audit_key() -> None:
    """Exports are signed: a bench-only Ed25519 key in bench/.work (never a real one)."""
    key_file = WORK / "audit-signing-key"
    if key_file.is_file() or not (tree() / "audit" / "signing.py").exists():
        return
    WORK.mkdir(parents=True, exist_ok=True)
    manage("generate_signing_key", "--write", str(key_file))


def manage(*args: str, check: bool = True) -> str:
    proc = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=tree(),
        env=project_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


# a shell snippet's scope: the served ledger's role sees no team's row until the transaction names
# some (teams.scope); the bench's snippets read and refresh every team's, as an operator does
EVERY_TEAM = (
    "from teams.scope import every_team_scope, set_current\n"
    "set_current(every_team_scope('operator command'))\n"
)


def shell(code: str) -> str:
    """`manage.py shell -c code` in the served tree, every team in scope; its output."""
    return manage("shell", "-c", EVERY_TEAM + code)


def migrate_bench_db() -> None:
    ensure_database(BENCH_DB)
    manage("migrate", "--noinput")


def reset_journal_tables() -> None:
    """Empty the journal and tool tables (TRUNCATE bypasses the append-only trigger on events)."""
    with admin_connect(BENCH_DB) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND ("
                " tablename LIKE 'runs\\_%' OR tablename LIKE 'tools\\_%' OR tablename LIKE 'audit\\_%'"
                " OR tablename LIKE 'review\\_%' OR tablename LIKE 'agents\\_%')"
                " AND tablename NOT IN ('runs_budgetpolicy', 'runs_workertoken')"
            )
        ]
        if tables:
            conn.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " CASCADE")
        conn.execute("VACUUM ANALYZE")


def worker_token(*options: str) -> str:
    """A new worker token; `options` as for create_worker_token (e.g. "--scope", "tools:direct").
    Each has a name of its own: a live token's name is unique."""
    out = manage("create_worker_token", f"bench-{os.getpid()}-{uuid.uuid4().hex[:8]}", *options)
    return out.strip().splitlines()[-1].strip()


def spawn(args: list[str], *, log_name: str, env: dict[str, str] | None = None) -> Any:
    """Start a process from the served tree in its own process group, logging to
    bench/.work/<log_name>.log; registered for stop_all()."""
    proc = processes.spawn(
        args,
        log_name=log_name,
        env=env or project_env(),
        own_group=True,
        log_path=WORK / f"{log_name}.log",
        cwd=tree(),
    )
    _STARTED.append(proc)
    return proc


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    processes.stop_process(proc, timeout)
    if proc in _STARTED:
        _STARTED.remove(proc)


def stop_all() -> None:
    for proc in list(reversed(_STARTED)):
        stop(proc)


def wait_http(url: str, proc: subprocess.Popen[bytes] | None = None, timeout: float = 60) -> None:
    wait_for_http(url, timeout=timeout, proc=proc)


def web_server_args(port: int, workers: int, threads: int) -> list[str]:
    """The product's web server (`python -m config.serve`: granian serving config.wsgi), as the
    image starts it; its other settings are the launcher's defaults unless WEB_* variables in the
    environment say otherwise (WEB_ACCESS_LOG=0: no access line per request)."""
    return processes.web_server_args(port, workers=workers, threads=threads)


@contextmanager
def web_server(
    *, workers: int = 2, threads: int = 4, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The product's web server on the bench database; yields (base URL, its main process:
    the workers are its child processes)."""
    port = free_port()
    proc = spawn(
        web_server_args(port, workers, threads), log_name=f"web-{port}", env=env or project_env()
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/api/v1/schema/", proc)
        yield url, proc
    finally:
        stop(proc)


@contextmanager
def uvicorn(*, env: dict[str, str] | None = None) -> Iterator[str]:
    """One uvicorn process serving config.asgi (the ?wait= long polls); yields its base URL."""
    port = free_port()
    args = [sys.executable, "-m", "uvicorn", "config.asgi:application", "--port", str(port)]
    args += ["--log-level", "warning", "--no-access-log"]
    proc = spawn(args, log_name=f"uvicorn-{port}", env=env or project_env())
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/api/v1/schema/", proc)
        yield url
    finally:
        stop(proc)


def ensure_policy(agent: str, *, max_steps: int, max_recoveries: int) -> None:
    """A budget policy for a bench agent (room for many recoveries), written with SQL in
    `default` (the bench's worker tokens are default's)."""
    with admin_connect(BENCH_DB) as conn:
        conn.execute(
            "INSERT INTO runs_budgetpolicy (team_id, name, agent, is_default, max_steps,"
            " max_tokens, max_wall_seconds, max_cost_usd, max_recoveries, created_at, updated_at)"
            " SELECT t.id, %s, %s, false, %s, 1000000000, 86400, NULL, %s, now(), now()"
            " FROM teams_team t WHERE t.slug = 'default'"
            " ON CONFLICT (team_id, name) DO UPDATE SET max_steps = EXCLUDED.max_steps,"
            " max_recoveries = EXCLUDED.max_recoveries",
            (f"bench-{agent}", agent, max_steps, max_recoveries),
        )
