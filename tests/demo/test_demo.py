"""The newcomer's first ten minutes: `scripts/demo` in a clean clone tells the whole story,
`manage.py` run in the checkout reaches its database, and it leaves nothing running when stopped
as a process manager is stopped: Ctrl-C in a terminal, or SIGINT or SIGTERM to its process
(honcho stops the Procfile's processes, the entry stops the embedded PostgreSQL last); a restart
does not tell the story again; every command the README mentions answers --help.

The clone reuses this virtualenv's packages through DEMO_VENV (a fresh install takes minutes;
scripts/demo creates the clone's own .venv on top of them, installing nothing) and forces the
no-install broker (Kombu's filesystem transport), the path a machine without Redis takes.
"""

from __future__ import annotations

import contextlib
import json
import mailbox
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
import pytest

from teams.scope import EVERY_TEAM_SESSION_OPTIONS
from tests.doc_examples import doc_blocks, documented_commands
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
SUMMARY_TIMEOUT = 300.0  # seconds from start to the printed summary (about 30 s on a quiet machine)
STOP_TIMEOUT = 90.0


def demo_port() -> int:
    """A free port for the demo's web server (the OS chooses it)."""
    return free_port()


def logs_tail(clone: Path, lines: int = 20) -> str:
    """The end of every log the demo wrote, for a failure message."""
    parts = []
    for log in sorted((clone / ".demo" / "logs").glob("*.log")):
        text = log.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"--- {log.name}\n" + "\n".join(text))
    return "\n".join(parts)


class Output:
    """The demo's terminal output, read line by line in the background."""

    def __init__(self, proc: subprocess.Popen[str], clone: Path) -> None:
        self.clone = clone
        self.lines: list[str] = []
        self._proc = proc
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def to_the_end(self) -> str:
        """Everything it printed, once it has exited: the reader may still be behind the pipe."""
        self._thread.join(timeout=10)
        return self.text

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.text, re.MULTILINE)
            if match:
                return match
            if self._proc.poll() is not None:
                self._thread.join(timeout=5)
                match = re.search(pattern, self.text, re.MULTILINE)
                if match:
                    return match
                raise AssertionError(
                    f"scripts/demo exited with {self._proc.returncode} before {pattern!r}:\n"
                    + self.text
                    + "\n"
                    + logs_tail(self.clone)
                )
            time.sleep(0.2)
        raise AssertionError(
            f"no {pattern!r} within {timeout:.0f}s; output so far:\n{self.text}\n"
            + logs_tail(self.clone)
        )


def processes_of(clone: Path) -> list[psutil.Process]:
    """Every process on the machine the clone's demo started: its command line or working
    directory is in the clone, or it carries the demo's marker (PostgreSQL, run as root, lives
    outside the clone)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            cwd = proc.info["cwd"] or ""
            marked = proc.environ().get("AGENT_LEDGER_DEMO") == str(clone)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if str(clone) in cmdline or cwd.startswith(str(clone)) or marked:
            found.append(proc)
    return found


@pytest.fixture
def clean_clone(tmp_path: Path) -> Iterator[Path]:
    clone = tmp_path / "clone"
    if (ROOT / ".git").exists():
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    else:  # a source tree without its history (an exported CI checkout): copy what git would
        shutil.copytree(
            ROOT,
            clone,
            symlinks=True,
            ignore=shutil.ignore_patterns(
                ".venv", ".demo", "__pycache__", ".*_cache", "*.egg-info", "exports"
            ),
        )
    yield clone
    for proc in processes_of(clone):  # only if the test failed half-way
        proc.kill()
    if (clone / ".demo").exists():  # the cluster lives outside the clone when run as root
        subprocess.run(
            [str(clone / "scripts" / "demo"), "--reset"], env=demo_env(8599), check=False
        )


def demo_env(port: int) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in {
            "DATABASE_URL",
            "CELERY_BROKER_URL",
            "INTENTLEDGER_URL",
            "INTENTLEDGER_TOKEN",
            "SECRET_KEY",
            "DJANGO_SETTINGS_MODULE",
            "PYTHONPATH",
            "VIRTUAL_ENV",
            "EMAIL_BACKEND",
            "EMAIL_HOST",
            "EMAIL_PORT",
        }
        and not k.startswith(("AGENT_", "PYTEST_"))
    }
    return {**env, "DEMO_PORT": str(port), "DEMO_VENV": sys.prefix, "DEMO_BROKER": "filesystem"}


def log_in(client: httpx.Client, url: str, username: str, password: str) -> None:
    page = client.get(f"{url}/login/")
    assert page.status_code == 200, page.text[:500]
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert csrf, "the login page has a CSRF token"
    response = client.post(
        f"{url}/login/",
        data={"username": username, "password": password, "csrfmiddlewaretoken": csrf.group(1)},
        headers={"Referer": f"{url}/login/"},
    )
    assert response.status_code == 302, f"login as {username} failed: {response.text[:500]}"


def demo_start(clone: Path, port: int, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(clone / "scripts" / "demo"), *args],
        cwd=clone,
        env=demo_env(port),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )


def signal_pid(proc: subprocess.Popen[str], signum: signal.Signals) -> None:
    """`kill -INT PID` or `kill -TERM PID` (a supervisor's stop): the signal reaches the demo's
    own process only, not its process group; then wait for it to end."""
    if proc.poll() is None:
        os.kill(proc.pid, signum)
    try:
        proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired as timeout:  # (a failure of the test before it stays chained)
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(
            f"scripts/demo was still running {STOP_TIMEOUT:.0f}s after {signum.name}"
        ) from timeout


def port_closed(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def manage_py(clone: Path, port: int, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`.venv/bin/python manage.py ...` in the checkout, in a new shell: no DATABASE_URL, no
    SECRET_KEY, no DEBUG (the demo's port changes with every start)."""
    environment = {k: v for k, v in demo_env(port).items() if k not in ("DEBUG", "DEMO_PORT")}
    return subprocess.run(
        [str(clone / ".venv" / "bin" / "python"), "manage.py", *args],
        cwd=clone,
        env={**environment, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def ctrl_c(proc: subprocess.Popen[str]) -> None:
    """Ctrl-C as a terminal sends it: SIGINT to the foreground process group; then wait."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


@pytest.mark.slow
def test_demo_in_a_clean_clone_tells_the_story_once_and_every_stop_leaves_nothing_running(
    clean_clone: Path,
) -> None:
    port = demo_port()
    started = time.monotonic()
    proc = demo_start(clean_clone, port)
    out = Output(proc, clean_clone)
    try:
        out.wait_for(r"^Review queue: ", SUMMARY_TIMEOUT)
        print(f"scripts/demo: summary {time.monotonic() - started:.1f}s after the start")
        print(out.text)
        assert "PROBLEM" not in out.text
        url = out.wait_for(r"^Agent Ledger is running at (http://\S+)/$", 1).group(1)
        assert url == f"http://127.0.0.1:{port}"
        password = out.wait_for(r"^\s+supervisor\s+(\S+)\s+\(supervisors\)$", 1).group(1)
        token = out.wait_for(r"^Worker token \(Authorization: Bearer …\): (\S+)$", 1).group(1)
        database_url = out.wait_for(r"^\s+(postgres://\S+)$", 1).group(1)
        summary: dict[str, Any] = json.loads((clean_clone / ".demo" / "summary.json").read_text())
        runs = summary["runs"]

        with httpx.Client(timeout=10) as client:
            # the API answers with the printed token (and refuses without one)
            evicted = runs["evicted"]
            assert client.get(f"{url}/api/v1/runs/{evicted['run_id']}/").status_code == 401
            auth = {"Authorization": f"Bearer {token}"}
            run = client.get(f"{url}/api/v1/runs/{evicted['run_id']}/", headers=auth)
            assert run.status_code == 200, run.text
            assert run.json()["status"] == "completed"
            journal = client.get(f"{url}/api/v1/runs/{evicted['run_id']}/journal", headers=auth)
            assert journal.status_code == 200
            steps = journal.json()["steps"]
            writes = [(s["name"], s["state"]) for s in steps if s["effect"] == "write"]
            assert writes.count(("tickets.create", "done")) == 1
            assert writes.count(("email.send", "done")) == 1
            recoveries = [
                e
                for e in journal.json()["events"]
                if e["type"] == "lease_acquired" and e["payload"].get("recovery")
            ]
            assert len(recoveries) == 1, "the evicted run recovered once, from the journal"
            assert recoveries[0]["payload"]["replayable_steps"] == 13  # steps 0-12

            # the dashboard answers, and the review queue holds the "maybe sent" step
            log_in(client, url, "supervisor", password)
            queue = client.get(f"{url}/queue/")
            assert queue.status_code == 200
            maybe_sent = runs["maybe_sent"]
            assert maybe_sent["status"] == "needs_review"
            [unknown] = maybe_sent["unknown_steps"]
            assert unknown["name"] == "email.send"
            assert f"/queue/{maybe_sent['run_id']}/{unknown['index']}/" in queue.text
            assert client.get(f"{url}/runs/{evicted['run_id']}/").status_code == 200

        # the evicted run left exactly one ticket and one email, in the tables and the mailbox
        # the demo's role is bound by row-level security: this session reads every team
        with psycopg.connect(database_url, options=EVERY_TEAM_SESSION_OPTIONS) as conn:
            tickets = conn.execute(
                "SELECT count(*) FROM tools_ticket WHERE customer = %s", [evicted["customer"]]
            ).fetchone()
            emails = conn.execute(
                'SELECT count(*) FROM tools_outboundemail WHERE "to" = %s', [evicted["customer"]]
            ).fetchone()
        assert tickets == (1,)
        assert emails == (1,)
        box = mailbox.Maildir(clean_clone / ".demo" / "mail", create=False)
        received = [m for m in box if evicted["customer"] in (m.get("To") or "")]
        assert len(received) == 1

        # the token-budget run stopped before its side effects
        budget = runs["budget"]
        assert budget["status"] == "budget_exceeded"
        assert budget["budget_limit"]["limit"] == "tokens"
        assert budget["tickets"] == 0 and budget["emails"] == 0
        assert [runs[k]["status"] for k in runs if k.startswith("completes")] == ["completed"] * 3

        # a second demo of the same checkout is refused while this one runs (and harms nothing)
        refused = subprocess.run(
            [str(clean_clone / "scripts" / "demo")],
            cwd=clean_clone,
            env=demo_env(demo_port()),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert "already running from this checkout" in refused.stderr
        assert httpx.get(f"{url}/login/", timeout=10).status_code == 200

        # manage.py in the checkout reaches the running demo's database: no DATABASE_URL, no
        # SECRET_KEY, no DEBUG=1 to know about
        created = manage_py(
            clean_clone,
            port,
            "createsuperuser",
            "--noinput",
            "--username",
            "newcomer",
            "--email",
            "newcomer@example.com",
            DJANGO_SUPERUSER_PASSWORD="a-newcomer-password",
        )
        assert created.returncode == 0, created.stdout + created.stderr
        assert "using the running demo's" in created.stderr
        with httpx.Client(timeout=10) as client:
            log_in(client, url, "newcomer", "a-newcomer-password")
        worker_token = manage_py(clean_clone, port, "create_worker_token", "ops-laptop")
        assert worker_token.returncode == 0, worker_token.stdout + worker_token.stderr
        issued = re.search(r"alw_\S+", worker_token.stdout)
        assert issued, worker_token.stdout
        runs_api = httpx.get(
            f"{url}/api/v1/runs/{evicted['run_id']}/",
            headers={"Authorization": f"Bearer {issued.group(0)}"},
            timeout=10,
        )
        assert runs_api.status_code == 200, runs_api.text

        started_processes = processes_of(clean_clone)
        assert any("postgres" in " ".join(p.cmdline()) for p in started_processes)
        assert any("celery" in " ".join(p.cmdline()) for p in started_processes)
        assert any("honcho" in " ".join(p.cmdline()) for p in started_processes)
    finally:
        # `kill -INT PID`: not a terminal's Ctrl-C, which reaches the whole process group
        signal_pid(proc, signal.SIGINT)
    print(out.to_the_end().split("Press Ctrl-C to stop.")[-1])
    assert proc.returncode == 0, out.text
    assert "stopped; scripts/demo starts it again" in out.text
    # nothing it started is left: no postgres, worker, beat, web, mail catcher
    for process in started_processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE, process
    assert processes_of(clean_clone) == []
    # PostgreSQL had a clean shutdown (as root its data is outside the clone, untouched modes)
    pg_data = Path(out.wait_for(r"^==> embedded PostgreSQL .* \(data in (\S+), log", 1).group(1))
    assert (pg_data / "PG_VERSION").exists()
    assert not (pg_data / "postmaster.pid").exists()
    assert port_closed(port)
    # manage.py no longer finds a demo: the file the demo left is not read
    assert not (clean_clone / ".demo" / "runtime.env").exists()

    # a restart reuses the data (passwords are not shown again) and does not tell the story
    # again: it says where the told one stands; SIGTERM to its process stops everything
    restart = demo_start(clean_clone, port)
    restarted = Output(restart, clean_clone)
    try:
        restarted.wait_for(r"^Review queue: ", SUMMARY_TIMEOUT)
        print(restarted.text)
        assert "already in this database (round 1)" in restarted.text
        assert re.search(r"^\s+T-1005\s+needs_review$", restarted.text, re.MULTILINE)
        assert "the story (round 2)" not in restarted.text
        assert "passwords in .demo/credentials.txt" in restarted.text
        assert password not in restarted.text
        assert "creating the PostgreSQL cluster" not in restarted.text
        started_processes = processes_of(clean_clone)
        assert any("postgres" in " ".join(p.cmdline()) for p in started_processes)
    finally:
        signal_pid(restart, signal.SIGTERM)
    assert restart.returncode == 0, restarted.to_the_end()
    assert "stopped; scripts/demo starts it again" in restarted.to_the_end()
    for process in started_processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE, process
    assert processes_of(clean_clone) == []
    assert port_closed(port)
    assert not (pg_data / "postmaster.pid").exists()

    # --new-story tells round 2; Ctrl-C in the middle of it (an agent worker process and Celery
    # runs under way) stops it cleanly
    again = demo_start(clean_clone, port, "--new-story")
    second = Output(again, clean_clone)
    try:
        second.wait_for(r"a worker process evicted \(SIGKILL\) after step 12", SUMMARY_TIMEOUT)
        print(second.text)
        assert "PROBLEM" not in second.text
        assert "==> the story (round 2)" in second.text
    finally:
        ctrl_c(again)
    assert again.returncode == 0, second.to_the_end()
    assert "stopped; scripts/demo starts it again" in second.to_the_end()
    assert processes_of(clean_clone) == []

    # --reset wipes the demo's data
    reset = subprocess.run(
        [str(clean_clone / "scripts" / "demo"), "--reset"],
        cwd=clean_clone,
        env=demo_env(port),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert not (clean_clone / ".demo").exists()


# --------------------------------------------------------------------------------------------
# --help on every command the README and the manual in docs/ mention


def test_readme_names_the_demo_as_its_first_command() -> None:
    first_block = doc_blocks(ROOT / "README.md")[0]
    assert first_block.lang == "bash" and first_block.code.lstrip().startswith("scripts/demo")


# Runs `manage.py NAME --help` for each NAME given, one after another in this one interpreter
# (manage.py's own main(), as the shell runs it), and prints each one's exit status and output as
# JSON: a Django start-up is over a second of CPU here, and the README names a dozen commands.
MANAGE_HELP_EACH = """
import contextlib, io, json, runpy, sys
answers = {}
for name in sys.argv[1:]:
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["manage.py", name, "--help"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_path("manage.py", run_name="__main__")
            code = 0
        except SystemExit as stop:
            code = stop.code or 0
    answers[name] = {"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}
print(json.dumps(answers))
"""


def _help_env() -> dict[str, str]:
    return {**os.environ, "SECRET_KEY": os.environ.get("SECRET_KEY") or "help-only"}


@pytest.fixture(scope="module")
def manage_py_help() -> dict[str, dict[str, Any]]:
    """What `manage.py NAME --help` answered, for every manage.py command the README names."""
    names = [argv[2] for argv in documented_commands().values() if argv[1].endswith("manage.py")]
    result = subprocess.run(
        [sys.executable, "-c", MANAGE_HELP_EACH, *names],
        cwd=ROOT,
        env=_help_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    answers: dict[str, dict[str, Any]] = json.loads(result.stdout.strip().splitlines()[-1])
    return answers


@pytest.mark.slow  # a process per command (manage.py's commands share one)
@pytest.mark.parametrize(
    "argv", list(documented_commands().values()), ids=list(documented_commands().keys())
)
def test_every_command_the_readme_mentions_answers_help(
    argv: list[str], request: pytest.FixtureRequest
) -> None:
    if argv[1].endswith("manage.py"):
        answer = request.getfixturevalue("manage_py_help")[argv[2]]
    else:
        result = subprocess.run(
            argv, cwd=ROOT, env=_help_env(), capture_output=True, text=True, timeout=60, check=False
        )
        answer = {"returncode": result.returncode, "stdout": result.stdout, "stderr": result.stderr}
    assert answer["returncode"] == 0, answer["stdout"] + answer["stderr"]
    assert len(answer["stdout"].strip().splitlines()) >= 2, answer["stdout"]
