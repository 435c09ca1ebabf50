"""What a deployment left out is named before a person meets it: `manage.py check --deploy` and
the processes' first log lines name each missing setting (never its value); a Celery worker that
could run no agent run refuses to start, saying what is missing; and the Celery-run agents need
no token copied by hand (the ledger's own, derived from SECRET_KEY)."""

import subprocess
import sys
import time
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from runs.models import WorkerToken
from runs.tokens import celery_agents_token_ensure, worker_token_revoke
from tests.processes import ROOT, server_env, spawn, stop_celery_worker, stop_process

# the settings each deploy check is about, and what the check warns with
NAMED = {
    "AUDIT_SIGNING_KEY": "ledger.W001",
    "EMAIL_HOST": "ledger.W002",
    "LEDGER_DASHBOARD_URL": "ledger.W003",
}
GIVEN = {
    "AUDIT_SIGNING_KEY": "MC4CAQAwBQYDK2VwBCIEIGRkZGRkZGRkZGRkZGRkZGRkZGRkZGRkZGRkZGRkZGRk",
    "EMAIL_HOST": "smtp.example.com",
    "LEDGER_DASHBOARD_URL": "https://ledger.example.com",
}


def manage_py(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def production_env(**given: str) -> dict[str, str]:
    """The test environment with DEBUG off and only `given` of the named settings."""
    env = server_env(without=("DEBUG", *NAMED))
    return {**env, "DEBUG": "0", **given}


@pytest.mark.slow
def test_check_deploy_names_each_setting_a_person_would_meet_missing() -> None:
    checked = manage_py("check", "--deploy", env=production_env())
    said = checked.stdout + checked.stderr
    for name, check_id in NAMED.items():
        assert f"({check_id}) {name} is not set" in said, said

    checked = manage_py("check", "--deploy", env=production_env(**GIVEN))
    said = checked.stdout + checked.stderr
    assert "ledger.W0" not in said, said
    for value in GIVEN.values():
        assert value not in said  # names only, never values


@pytest.mark.slow
def test_links_in_escalations_follow_ledger_dashboard_url() -> None:
    env = production_env(**GIVEN)
    shown = manage_py(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.LEDGER_DASHBOARD_URL)",
        env=env,
    )
    assert shown.stdout.strip().splitlines()[-1] == "https://ledger.example.com", shown.stderr


@pytest.mark.slow
@pytest.mark.pg_connections(2)
def test_a_worker_starting_without_a_setting_names_it_in_its_first_lines(
    django_db_setup: Any,
) -> None:
    env = production_env(EMAIL_HOST="127.0.0.1", LEDGER_DASHBOARD_URL="http://127.0.0.1:1")
    args = [sys.executable, "-m", "celery", "-A", "config", "worker", "-P", "solo", "-l", "info"]
    proc = spawn(
        [*args, "--without-mingle", "--without-gossip"], log_name="start-up-check", env=env
    )
    log = proc.log_path  # type: ignore[attr-defined]
    try:
        deadline = time.monotonic() + 120
        while b"ready." not in log.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        said = log.read_text()
        assert "celery worker: AUDIT_SIGNING_KEY is not set: exports answer 503" in said
        assert "EMAIL_HOST is not set" not in said
    finally:
        stop_celery_worker(proc)


@pytest.mark.slow
@pytest.mark.pg_connections(1)
def test_a_worker_whose_agents_go_over_http_without_a_token_refuses_to_start(
    django_db_setup: Any,
) -> None:
    env = {
        **production_env(**GIVEN),
        "LEDGER_AGENT_TRANSPORT": "http",
        "INTENTLEDGER_TOKEN": "",
    }
    args = [sys.executable, "-m", "celery", "-A", "config", "worker", "-P", "solo", "-l", "info"]
    proc = spawn(args, log_name="start-up-refusal", env=env)
    try:
        assert proc.wait(timeout=120) != 0
    finally:
        stop_process(proc)
    said = proc.log_path.read_text()  # type: ignore[attr-defined]
    assert "LEDGER_AGENT_TRANSPORT=http needs INTENTLEDGER_TOKEN" in said, said[-3000:]
    assert "ready." not in said


@pytest.mark.django_db
def test_the_celery_agents_use_the_ledgers_own_token_registered_once() -> None:
    raw = celery_agents_token_ensure()
    assert celery_agents_token_ensure() == raw  # every worker beside the database derives it
    [token] = WorkerToken.objects.all()
    assert token.name.startswith("celery-agents-") and token.is_active
    assert raw not in token.token_hash and token.prefix == raw[:10]


@pytest.mark.django_db
def test_a_revoked_agents_token_stays_revoked_and_says_what_to_set() -> None:
    celery_agents_token_ensure()
    worker_token_revoke(token_id=WorkerToken.objects.get().pk)
    with pytest.raises(ImproperlyConfigured, match="set INTENTLEDGER_TOKEN"):
        celery_agents_token_ensure()
    assert WorkerToken.objects.filter(revoked_at__isnull=True).count() == 0
