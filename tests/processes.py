"""The real processes the tests start, in one place: the web server, a Celery worker, an SMTP sink,
free ports, and the Redis database this test process may use.

- Ports come from the OS (bind to port 0), never from a hand-kept range.
- Redis: each test process (each pytest-xdist worker) claims one database of the local Redis for
  its whole life, from a pool, with an exclusive `flock` on a file in the temp folder: two
  sessions on one machine never share a database, so one's Celery workers cannot consume the
  other's tasks. The lock dies with the process; a claimed database is flushed before use.
  `TEST_REDIS_URL` (default `redis://127.0.0.1:6379`) names the server.
- Every process started in its own session (process group) is stopped as a group.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from email import message_from_bytes
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / ".pytest_cache"

# 0 is the settings' default broker, 5 the demo's, 6 the bench's; 8-15 first (older branches of
# the suite hard-coded 1, 2, 4 and 7)
REDIS_DB_POOL = (8, 9, 10, 11, 12, 13, 14, 15, 1, 2, 3, 4, 7)
_redis_claim: tuple[int, IO[str]] | None = None
# how long a server or worker may take to start: no timing is asserted, this only ends a hang
STARTUP_TIMEOUT = float(os.environ.get("TEST_STARTUP_TIMEOUT", "180"))


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now, chosen by the OS."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_db() -> int:
    """This process's own Redis database (claimed on first use, held until the process ends)."""
    global _redis_claim
    if _redis_claim is not None:
        return _redis_claim[0]
    deadline = time.monotonic() + 600
    while True:
        for db in REDIS_DB_POOL:
            path = Path(tempfile.gettempdir()) / f"intentledger-tests-redis-db-{db}.lock"
            handle = open(path, "a")  # noqa: SIM115  (held for the life of the process)
            with suppress(OSError):
                os.chmod(path, 0o666)  # noqa: S103  (anyone's next session may claim it)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            _redis_claim = (db, handle)
            _flush(db)
            return db
        if time.monotonic() > deadline:
            raise RuntimeError(f"every Redis database of {REDIS_DB_POOL} is claimed by a session")
        time.sleep(1)


def redis_server_url() -> str:
    return os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379").rstrip("/")


def redis_url() -> str:
    """The broker URL of this process's own Redis database."""
    return f"{redis_server_url()}/{redis_db()}"


def _flush(db: int) -> None:
    import redis

    with suppress(redis.ConnectionError):  # no Redis here: the tests that need one say so
        redis.Redis.from_url(f"{redis_server_url()}/{db}").flushdb()


def flush_redis() -> None:
    """Empty this process's Redis database (before a test's own worker starts)."""
    _flush(redis_db())


@contextmanager
def celery_app_on(broker_url: str) -> Iterator[Any]:
    """This process's Celery app sends to `broker_url` for the block (the reaper's re-dispatch,
    `start_agent_run`), then back to what it was."""
    from config.celery import app

    previous = app.conf.broker_url
    app.conf.update(broker_url=broker_url)
    app._after_fork()  # type: ignore[attr-defined]  # drop pooled connections to the old broker
    try:
        yield app
    finally:
        app.conf.update(broker_url=previous)
        app._after_fork()  # type: ignore[attr-defined]


def test_database_url(*, idle_session_seconds: int = 0) -> str:
    """The URL of the test database pytest-django created, as the suite's ordinary role
    (tests/database.py), for processes the tests start;
    `idle_session_seconds`: PostgreSQL ends a connection of that URL's once it has been idle
    (outside a transaction) that long (`idle_session_timeout`, sent as a connection option)."""
    from django.db import connection

    settings = connection.settings_dict
    login = settings["USER"] or "root"
    if settings.get("PASSWORD"):
        login += f":{quote(settings['PASSWORD'], safe='')}"
    url = (
        f"postgres://{login}@{settings['HOST'] or '127.0.0.1'}:"
        f"{settings['PORT'] or 5432}/{settings['NAME']}"
    )
    if idle_session_seconds:
        url += f"?options=-c%20idle_session_timeout%3D{idle_session_seconds * 1000}"
    return url


test_database_url.__test__ = False  # type: ignore[attr-defined]  # not a test, whatever its name


def wait_for_http(
    url: str, *, timeout: float = 30.0, proc: subprocess.Popen[Any] | None = None
) -> None:
    """Return once `url` answers anything over HTTP; fail early if `proc` exits."""
    import urllib3

    deadline = time.monotonic() + timeout
    # one pool for every attempt (an https one builds its TLS context once)
    pool = urllib3.connection_from_url(url, timeout=1.0, retries=False)
    try:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"process for {url} exited with {proc.returncode}")
            try:
                pool.urlopen("GET", url, redirect=False)
                return
            except urllib3.exceptions.HTTPError:
                time.sleep(0.05)
    finally:
        pool.close()
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`; a process started in its own session is stopped
    with its whole process group."""
    group = _own_group(proc)
    if proc.poll() is None:
        _signal(proc, signal.SIGTERM, group)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal(proc, signal.SIGKILL, group)
            proc.wait(timeout=timeout)
    elif group:  # the leader is gone; children of its group may not be
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    log = getattr(proc, "log", None)
    if log is not None:
        log.close()


def _own_group(proc: subprocess.Popen[Any]) -> bool:
    return bool(getattr(proc, "own_group", False))


def _signal(proc: subprocess.Popen[Any], signum: int, group: bool) -> None:
    with suppress(ProcessLookupError):
        if group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)


def spawn(
    args: list[str],
    *,
    log_name: str,
    env: dict[str, str] | None = None,
    own_group: bool = False,
    append: bool = False,
    log_path: Path | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start `args` in `cwd` (the project's root unless given), output to a log file
    (`.pytest_cache/<log_name>.log` unless `log_path`); `own_group` gives it a session of its
    own, as a pod or a terminal's job."""
    path = log_path or LOGS / f"{log_name}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    log = open(path, "ab" if append else "wb")  # noqa: SIM115  (closed by stop_process)
    proc = subprocess.Popen(
        args,
        cwd=cwd or ROOT,
        env=env if env is not None else dict(os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=own_group,
    )
    proc.log = log  # type: ignore[attr-defined]
    proc.log_path = path  # type: ignore[attr-defined]
    proc.own_group = own_group  # type: ignore[attr-defined]
    return proc


# how long PostgreSQL lets a connection a test web server keeps sit idle before it ends it
WEB_IDLE_SESSION_SECONDS = 2


def server_env(
    extra: dict[str, str] | None = None,
    *,
    without: tuple[str, ...] = (),
    quiet: bool = True,
    keep_connections: bool = False,
) -> dict[str, str]:
    """The environment of a server or worker on the test database and this process's Redis;
    variables whose names start with one of `without` are left out; `quiet` logs warnings only.

    A connection per request by default (DATABASE_CONN_MAX_AGE=0): the suite's workers and
    servers then fit beside other users of the PostgreSQL server. `keep_connections` (the web
    servers): each thread keeps its connection between requests, as the product's default does,
    and PostgreSQL ends one idle for WEB_IDLE_SESSION_SECONDS, which Django's health check at the
    next request notices. A new connection costs PostgreSQL a process (about 9 ms of CPU here),
    and the suite's servers answer thousands of requests; an idle thread's connection is gone
    seconds after the test that used it.
    """
    env = {k: v for k, v in os.environ.items() if not (without and k.startswith(without))}
    env.update({"DATABASE_URL": test_database_url(), "CELERY_BROKER_URL": redis_url()})
    # not behind the transaction pooler of scripts/test's second pass, which takes no options
    if keep_connections and not env.get("DATABASE_POOLER"):
        env["DATABASE_URL"] = test_database_url(idle_session_seconds=WEB_IDLE_SESSION_SECONDS)
        env.setdefault("DATABASE_CONN_MAX_AGE", "600")
    env.setdefault("DATABASE_CONN_MAX_AGE", "0")
    if quiet:
        env["LOG_LEVEL"] = "WARNING"
    env.update(extra or {})
    return env


def web_server_args(port: int, *, workers: int = 2, threads: int = 4) -> list[str]:
    """The product's web server, as production starts it (`python -m config.serve`: granian
    serving config.wsgi), on 127.0.0.1:`port` with `workers` processes of `threads` threads."""
    return [
        sys.executable,
        "-m",
        "config.serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--threads",
        str(threads),
    ]


def start_web_server(
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
    workers: int = 2,
    threads: int = 4,
    log_name: str = "web",
    ready_path: str = "/api/v1/schema/",
    own_group: bool = False,
    keep_connections: bool = True,
) -> tuple[str, subprocess.Popen[bytes]]:
    """Start the product's web server (`python -m config.serve`) on the test database and wait
    until it answers; returns (base URL, process). `env` is added to `server_env()`, with
    `keep_connections` (the product's default: a connection per thread, kept)."""
    port = port or free_port()
    proc = spawn(
        web_server_args(port, workers=workers, threads=threads),
        log_name=f"{log_name}-{port}",
        env=server_env(env, keep_connections=keep_connections),
        own_group=own_group,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        # generous: on a shared 2-core machine under load, the workers may take a minute
        wait_for_http(f"{url}{ready_path}", timeout=STARTUP_TIMEOUT, proc=proc)
    except BaseException:
        stop_process(proc)
        raise
    return url, proc


@contextmanager
def web_server_process(
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
    workers: int = 2,
    threads: int = 4,
    log_name: str = "web",
    own_group: bool = False,
    ready_path: str = "/api/v1/schema/",
    keep_connections: bool = True,
    stop_timeout: float = 10.0,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The product's web server for the block; yields its base URL and its main process.
    `own_group`: the main process leads its own process group, so a test can SIGKILL the whole
    node (main process and workers) the way a machine dies. At the end it gets `stop_timeout`
    seconds to stop after SIGTERM (stop_process)."""
    url, proc = start_web_server(
        port=port,
        env=env,
        workers=workers,
        threads=threads,
        log_name=log_name,
        own_group=own_group,
        ready_path=ready_path,
        keep_connections=keep_connections,
    )
    try:
        yield url, proc
    finally:
        stop_process(proc, timeout=stop_timeout)


@contextmanager
def web_server(
    *,
    port: int | None = None,
    env: dict[str, str] | None = None,
    workers: int = 2,
    threads: int = 4,
    log_name: str = "web",
) -> Iterator[str]:
    """The product's web server on the test database for the block; yields its base URL."""
    with web_server_process(
        port=port, env=env, workers=workers, threads=threads, log_name=log_name
    ) as (url, _proc):
        yield url


def start_celery_worker(
    *,
    env: dict[str, str] | None = None,
    pool: str = "prefork",
    concurrency: int = 1,
    name: str = "test",
    heartbeat: bool = False,
    own_group: bool = False,
    log_path: Path | None = None,
    ready_timeout: float = 0,
    without: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """A real `celery worker` on the test database and this process's Redis (unless `env` names
    another broker), started and ready; stop it with `stop_process`. Its log is `proc.log_path`."""
    node = f"{name}-{uuid.uuid4().hex[:6]}"
    args = [sys.executable, "-m", "celery", "-A", "config", "worker", "-l", "info", "-P", pool]
    if pool != "solo":
        args += ["-c", str(concurrency)]
    # the agents' queue and the webhook deliveries' own (config.settings.CELERY_TASK_ROUTES)
    args += ["-Q", f"celery,{os.environ.get('WEBHOOK_QUEUE', 'webhooks')}"]
    args += ["-n", f"{node}@%h", "--without-gossip", "--without-mingle"]
    if not heartbeat:
        args.append("--without-heartbeat")
    proc = spawn(
        args,
        log_name=node,
        env=server_env(env, without=without, quiet=False),
        own_group=own_group,
        append=log_path is not None,
        log_path=log_path,
    )
    path: Path = proc.log_path  # type: ignore[attr-defined]
    ready_timeout = ready_timeout or STARTUP_TIMEOUT
    deadline = time.monotonic() + ready_timeout
    while b"ready." not in path.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_process(proc)
            raise AssertionError(
                f"celery worker not ready in {ready_timeout:.0f} s:\n{path.read_text()[-3000:]}"
            )
        time.sleep(0.1)
    return proc


def stop_celery_worker(proc: subprocess.Popen[bytes]) -> None:
    """End a test's Celery worker at once: SIGKILL to its whole process group when it has one of
    its own, else `stop_process`. A warm shutdown (about 2 s for the pool and the broker
    connection) buys a test that is over nothing: its worker's tasks were the test's, and what
    it leaves in the broker is in this process's own Redis database, flushed before a test
    starts the next worker."""
    if _own_group(proc) and proc.poll() is None:
        _signal(proc, signal.SIGKILL, group=True)
        proc.wait(timeout=10)
    stop_process(proc)  # reaps what is left of the group and closes the log


class SmtpSink:
    """An aiosmtpd handler that keeps every message it receives; `delay` holds each one for a
    while (a wider in-progress window). `port` is where it listens once started."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.port = 0
        self.summaries: list[dict[str, Any]] = []  # to, subject, message_id of each
        self.raw: list[Any] = []  # each as an email.message.Message
        self._lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.delay:
            import asyncio

            await asyncio.sleep(self.delay)
        message = message_from_bytes(envelope.content)
        with self._lock:
            self.raw.append(message)
            self.summaries.append(
                {
                    "to": list(envelope.rcpt_tos),
                    "subject": message["Subject"],
                    "message_id": message["Message-ID"],
                }
            )
        return "250 Message accepted for delivery"

    @property
    def messages(self) -> list[Any]:
        """Every message received: to, subject and message_id of each."""
        return self.summaries

    def to(self, address: str) -> list[dict[str, Any]]:
        with self._lock:
            return [m for m in self.summaries if address in m["to"]]

    def with_message_id(self, message_id: str) -> list[Any]:
        with self._lock:
            return [m for m in self.raw if m["Message-ID"] == message_id]

    def mail_env(self) -> dict[str, str]:
        """The settings that make a server send its mail here."""
        return {
            "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "EMAIL_HOST": "127.0.0.1",
            "EMAIL_PORT": str(self.port),
        }


@contextmanager
def smtp_sink(sink: Any = None, *, port: int | None = None) -> Iterator[Any]:
    """A local aiosmtpd for the block, handled by `sink` (a new SmtpSink by default)."""
    from aiosmtpd.controller import Controller

    sink = sink if sink is not None else SmtpSink()
    for attempt in range(20):
        # a port the OS called free may be taken by another of the suite's servers before we bind
        sink.port = port or free_port()
        controller = Controller(sink, hostname="127.0.0.1", port=sink.port)
        try:
            controller.start()
            break
        except OSError as error:
            if port or error.errno != errno.EADDRINUSE or attempt == 19:
                raise
    try:
        yield sink
    finally:
        controller.stop()
