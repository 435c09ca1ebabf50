"""LOG_FORMAT=json: every process of the ledger writes one JSON object a line, not only the web
app: the web server's own lines (granian: start, workers, signals; one access line per request,
the request's method, path, status and duration as fields), the Celery worker's and beat's
(their banners left out), each started as the README starts it."""

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.processes import free_port, server_env, spawn, stop_process, wait_for_http

pytestmark = pytest.mark.slow
BIN = Path(sys.prefix) / "bin"


def json_lines(log: Path) -> list[dict[str, Any]]:
    """Every line of the log as a JSON object; a line that is not one fails the test."""
    objects = []
    for line in log.read_text().splitlines():
        if not line.strip():
            continue
        try:
            parsed = json.loads(line)
        except json.JSONDecodeError:
            pytest.fail(f"{log.name}: not a JSON line: {line!r}")
        assert isinstance(parsed, dict), line
        objects.append(parsed)
    return objects


def run_until(args: list[str], name: str, said: Callable[[str], bool], env: dict[str, str]) -> Path:
    """Start `args`, wait until its log `said` what the test waits for, stop it; its log."""
    proc = spawn(args, log_name=name, env=env)
    log: Path = proc.log_path  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + 120
        while not said(log.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        stop_process(proc, timeout=20)
    return log


@pytest.mark.pg_connections(2)
def test_the_web_server_writes_its_own_lines_and_one_access_line_a_request_as_json(
    django_db_setup: Any,
) -> None:
    port = free_port()
    args = [sys.executable, "-m", "config.serve", "--workers", "1", "--port", str(port)]
    proc = spawn(args, log_name="json-web", env=server_env({"LOG_FORMAT": "json"}))
    try:
        wait_for_http(f"http://127.0.0.1:{port}/healthz", timeout=120, proc=proc)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz?probe=1").status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/no-such-page/").status_code in (302, 404)
    finally:
        stop_process(proc, timeout=20)
    lines = json_lines(proc.log_path)  # type: ignore[attr-defined]
    loggers = {line["logger"] for line in lines}
    assert {"_granian", "granian.access"} <= loggers, lines
    assert any(line["message"].startswith("Starting granian") for line in lines), lines
    access = [line for line in lines if line["logger"] == "granian.access"]
    probes = [line for line in access if line["query_string"] == "probe=1"]
    assert len(probes) == 1, access  # one line for the one request
    [probe] = probes
    assert (probe["method"], probe["path"], probe["status"]) == ("GET", "/healthz", 200)
    assert probe["duration_ms"] >= 0
    assert any(line["path"] == "/no-such-page/" for line in access)


@pytest.mark.pg_connections(2)
def test_the_celery_worker_writes_json_lines_and_no_banner(django_db_setup: Any) -> None:
    args = [str(BIN / "celery"), "-A", "config", "worker", "-l", "info", "-P", "solo"]
    env = server_env({"LOG_FORMAT": "json"}, quiet=False)
    log = run_until(
        [*args, "--without-mingle", "--without-gossip"], "json-worker", lambda t: "ready." in t, env
    )
    lines = json_lines(log)
    assert any(line["message"].endswith("ready.") for line in lines)
    assert all(line["level"] for line in lines)


@pytest.mark.pg_connections(1)
def test_celery_beat_writes_json_lines_and_no_banner(django_db_setup: Any, tmp_path: Path) -> None:
    args = [str(BIN / "celery"), "-A", "config", "beat", "-l", "info"]
    args += ["--schedule", str(tmp_path / "schedule"), "--pidfile="]
    env = server_env({"LOG_FORMAT": "json"}, quiet=False)
    # stopped once its scheduler runs (a beat stopped while it starts dies with a traceback)
    log = run_until(args, "json-beat", lambda t: "Sending due task" in t, env)
    lines = json_lines(log)
    assert any("beat: Starting" in line["message"] for line in lines), lines
    assert any("Sending due task" in line["message"] for line in lines), lines


def test_text_logs_stay_celerys_own_without_log_format() -> None:
    """Without LOG_FORMAT=json nobody answers Celery's setup_logging: its own text set-up."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import config.celery as c; from celery import signals;"
            " w = c.app.Worker(quiet=False); print(w.quiet, len(signals.setup_logging.receivers))",
        ],
        env=server_env(without=("LOG_FORMAT",)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.split()[-2:] == ["False", "0"], done.stderr[-3000:]
