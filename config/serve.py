"""The web server: granian serving config.wsgi (`python -m config.serve`), one place for how.

granian (a Rust HTTP server) answers the same WSGI app gunicorn did for about two thirds of
gunicorn's server CPU per worker call (bench/SERVERS.md). The app is loaded once here, in the
main process, before the workers are forked (what gunicorn's --preload did): each worker starts
with Django imported and warmed up (config/warmup.py) and no database connection.

Where each robustness duty sits, with the environment setting that tunes it (docs/deploy.md):

- graceful stop: SIGTERM or SIGINT; a worker finishes its in-flight requests, and one that has
  not stopped after WEB_KILL_TIMEOUT seconds is killed.
- graceful reload: SIGHUP starts a new worker beside each old one, then stops the old one.
- recycling: a worker is replaced the same way after WEB_WORKER_LIFETIME seconds, or once its
  resident memory passes WEB_WORKER_MAX_RSS MiB; a worker that dies is started again.
- limits: request head (line and headers) over WEB_HTTP1_BUFFER_SIZE bytes: refused by granian
  (431); a head not complete after WEB_HEADER_READ_TIMEOUT_MS: the connection is closed; a body
  over Django's DATA_UPLOAD_MAX_MEMORY_SIZE (LEDGER_MAX_BODY_BYTES): 413 from the app; a request
  line over LEDGER_MAX_REQUEST_LINE: 414 from config.wsgi.RequestLineLimit.
- timeouts: granian kills no request that runs long (gunicorn's worker timeout did); what bounds
  one is listed in docs/deploy.md ("Timeouts").
- idle threads: a thread idle for WEB_THREAD_IDLE_TIMEOUT ends; PostgreSQL ends the connection it
  leaves (WEB_DATABASE_IDLE_SESSION_SECONDS, database_url_ending_idle_sessions).
- logs: granian's own lines (logger `_granian`) and one access line a request (`granian.access`);
  with LOG_FORMAT=json, each a JSON object (console.logs.JsonFormatter), the access line with its
  method, path, status and duration as fields.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_WORKERS = 2
DEFAULT_THREADS = 8


@dataclass(frozen=True)
class Robustness:
    """The settings read from the environment beside the command line's four (docs/deploy.md)."""

    # seconds a worker serves before it is replaced (0: never); granian's minimum is 60
    worker_lifetime: int = 0
    # MiB of resident memory past which a worker is replaced (0: never)
    worker_max_rss: int = 1024
    # seconds between two looks at the workers' memory
    worker_rss_sample_seconds: int = 30
    # seconds a stopping worker has to finish its in-flight requests before it is killed
    kill_timeout: int = 30
    # milliseconds a connection has to send a whole request head (line and headers)
    header_read_timeout_ms: int = 30_000
    # bytes of request head granian buffers: a longer head is refused with 431 (hyper's minimum
    # is 8192)
    http1_buffer_size: int = 64 * 1024
    # one access line per request
    access_log: bool = True
    # granian's own lines (start, workers, signals) at this level and above
    log_level: str = "info"
    # seconds a blocking thread may sit idle before granian ends it (granian allows 5 to 600)
    thread_idle_timeout: int = 600
    # seconds PostgreSQL lets a web connection sit idle before it ends it (0: never): what
    # closes the connection of a thread granian ended (see database_url_ending_idle_sessions)
    database_idle_session_seconds: int = 660

    @classmethod
    def from_env(cls) -> Robustness:
        defaults = cls()
        log_level = _env_text("WEB_LOG_LEVEL", defaults.log_level)
        if log_level not in ("critical", "error", "warning", "info", "debug"):
            raise SystemExit(
                f"WEB_LOG_LEVEL is critical, error, warning, info or debug (got {log_level})"
            )
        lifetime = _env_int("WEB_WORKER_LIFETIME", defaults.worker_lifetime)
        if 0 < lifetime < 60:
            raise SystemExit(f"WEB_WORKER_LIFETIME is 0 (off) or at least 60 s (got {lifetime})")
        return cls(
            worker_lifetime=lifetime,
            worker_max_rss=_env_int("WEB_WORKER_MAX_RSS", defaults.worker_max_rss),
            worker_rss_sample_seconds=_env_int(
                "WEB_WORKER_RSS_SAMPLE_SECONDS", defaults.worker_rss_sample_seconds, 1
            ),
            kill_timeout=_env_int("WEB_KILL_TIMEOUT", defaults.kill_timeout, 1),
            header_read_timeout_ms=_env_int(
                "WEB_HEADER_READ_TIMEOUT_MS", defaults.header_read_timeout_ms, 1
            ),
            http1_buffer_size=_env_int("WEB_HTTP1_BUFFER_SIZE", defaults.http1_buffer_size, 8192),
            access_log=_env_text("WEB_ACCESS_LOG", "1") not in ("0", "false", "no", "off"),
            log_level=log_level,
            thread_idle_timeout=_env_int(
                "WEB_THREAD_IDLE_TIMEOUT", defaults.thread_idle_timeout, 5
            ),
            database_idle_session_seconds=_env_int(
                "WEB_DATABASE_IDLE_SESSION_SECONDS", defaults.database_idle_session_seconds
            ),
        )


def _env_text(name: str, default: str) -> str:
    return os.environ.get(name, "").strip().lower() or default


def _env_int(name: str, default: int, minimum: int = 0) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise SystemExit(f"{name} is a whole number (got {raw!r})") from None
    if value < minimum:
        raise SystemExit(f"{name} is at least {minimum} (got {value})")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m config.serve",
        description=(
            "Serve Agent Ledger's WSGI app (config.wsgi) with granian in the foreground. "
            "SIGTERM/SIGINT stop it gracefully (in-flight requests finish), SIGHUP replaces "
            "its workers one by one without refusing a request. More settings come from the "
            "environment: WEB_WORKER_LIFETIME (s, 0 = never; default 0), WEB_WORKER_MAX_RSS "
            "(MiB, 0 = never; 1024), WEB_WORKER_RSS_SAMPLE_SECONDS (30), WEB_KILL_TIMEOUT (s; 30), "
            "WEB_HEADER_READ_TIMEOUT_MS (30000), WEB_HTTP1_BUFFER_SIZE (bytes of request head; "
            "65536), WEB_THREAD_IDLE_TIMEOUT (s; 600), WEB_DATABASE_IDLE_SESSION_SECONDS (660), "
            "WEB_ACCESS_LOG (1), WEB_LOG_LEVEL (info), LOG_FORMAT=json (JSON lines); "
            "docs/deploy.md describes each."
        ),
    )
    parser.add_argument(
        "--host",
        default=os.environ.get("WEB_HOST") or DEFAULT_HOST,
        help="address to listen on (WEB_HOST, default %(default)s)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=_env_int("PORT", DEFAULT_PORT, 1),
        help="port to listen on (PORT, default %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=_env_int("WEB_WORKERS", DEFAULT_WORKERS, 1),
        help="worker processes (WEB_WORKERS, default %(default)s)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=_env_int("WEB_THREADS", DEFAULT_THREADS, 1),
        help=(
            "requests each worker answers at once: granian's blocking threads per worker "
            "(WEB_THREADS, default %(default)s)"
        ),
    )
    return parser.parse_args(argv)


def logging_config(log_format: str) -> dict[str, Any] | None:
    """granian's logging set-up for LOG_FORMAT (None: granian's own text lines on stdout)."""
    if log_format != "json":
        return None
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "formatters": {"json": {"()": "console.logs.JsonFormatter"}},
        "filters": {"access_fields": {"()": "console.logs.AccessLogFields"}},
        "handlers": {"json": handler, "access": {**handler, "filters": ["access_fields"]}},
        "loggers": {
            "_granian": {"handlers": ["json"], "level": "INFO", "propagate": False},
            "granian.access": {"handlers": ["access"], "level": "INFO", "propagate": False},
        },
    }


def database_url_ending_idle_sessions(url: str, seconds: int) -> str:
    """`url` with PostgreSQL's idle_session_timeout set to `seconds` (as a connection option),
    unless it sets one already or `seconds` is 0.

    Django keeps a connection per thread (DATABASE_CONN_MAX_AGE). A granian blocking thread that
    sat idle for WEB_THREAD_IDLE_TIMEOUT ends, and its connection is neither closed nor reused
    (measured: the threads went, their connections stayed open, and the next requests opened
    new ones; tests/deploy/test_serve.py). PostgreSQL ends it once it has been idle this long;
    a live thread whose connection it ended reconnects at its next query (Django's
    conn_health_checks). Not behind a transaction pooler, which takes no connection options:
    there, the pooler's own client_idle_timeout does this."""
    if not seconds or "idle_session_timeout" in url:
        return url
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    option = f"-c idle_session_timeout={seconds * 1000}"
    merged = [(k, f"{v} {option}" if k == "options" else v) for k, v in query]
    if not any(k == "options" for k, _ in query):
        merged.append(("options", option))
    return urlunsplit(parts._replace(query=urlencode(merged, quote_via=quote)))


def _end_idle_sessions(name: str, seconds: int) -> None:
    """The database URL in variable `name`, if set, with idle sessions ended (above), for the
    Django this process loads next and the workers it forks."""
    url = os.environ.get(name, "")
    if url:
        os.environ[name] = database_url_ending_idle_sessions(url, seconds)


def build_server(args: argparse.Namespace, settings: Robustness) -> Any:
    """The granian server for `args` and `settings`, not started."""
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings
    from granian.log import LogLevels
    from granian.server import Server

    return Server(
        "config.wsgi:application",
        address=args.host,
        port=args.port,
        interface=Interfaces.WSGI,
        workers=args.workers,
        blocking_threads=args.threads,
        # a thread left idle this long ends (and its database connection stays open:
        # database_url_ending_idle_sessions)
        blocking_threads_idle_timeout=settings.thread_idle_timeout,
        http=HTTPModes.http1,
        websockets=False,
        http1_settings=HTTP1Settings(
            header_read_timeout=settings.header_read_timeout_ms,
            max_buffer_size=settings.http1_buffer_size,
        ),
        log_level=LogLevels(settings.log_level),
        log_dictconfig=logging_config(_env_text("LOG_FORMAT", "text")),
        log_access=settings.access_log,
        respawn_failed_workers=True,
        rss_sample_interval=settings.worker_rss_sample_seconds,
        workers_lifetime=settings.worker_lifetime or None,
        workers_max_rss=settings.worker_max_rss or None,
        workers_kill_timeout=settings.kill_timeout,
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = Robustness.from_env()
    server = build_server(args, settings)
    if not os.environ.get("DATABASE_POOLER"):
        _end_idle_sessions("DATABASE_URL", settings.database_idle_session_seconds)
        _end_idle_sessions("DATABASE_REPLICA_URL", settings.database_idle_session_seconds)
    # loaded (and warmed up) before granian forks its workers, which then find it imported;
    # after the server's set-up, so a bad setting fails before Django's import cost
    import config.wsgi  # noqa: F401

    server.serve()


if __name__ == "__main__":
    main()
