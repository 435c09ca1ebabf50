"""The journal kernel as the database holds it writes each rule once (issue 18).

Read from pg_proc, so the test sees the live version of every function whatever migration last
replaced it: the run's row lock and its not_found / stale_epoch / status refusals live in
ledger_run_locked, stopping a run at a limit in ledger_run_budget_stop, the approval rules of a
new write intent in ledger_approval_rule; the hot calls call them.
"""

import re

import pytest
from django.db import connection

HOT_CALLS = (
    "ledger_step_intent",
    "ledger_step_outcome",
    "ledger_lease",
    "ledger_heartbeat",
    "ledger_run_finish",
)


def _live_bodies() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = current_schema() AND p.proname LIKE 'ledger\\_%%'"
        )
        bodies: dict[str, str] = {}
        for name, source in cursor.fetchall():
            bodies[name] = bodies.get(name, "") + source
        return bodies


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _functions_with(bodies: dict[str, str], fragment: str) -> set[str]:
    return {name for name, source in bodies.items() if fragment in _squeezed(source)}


@pytest.mark.django_db
def test_only_the_prologue_helper_locks_the_run_and_every_hot_call_uses_it() -> None:
    bodies = _live_bodies()

    # (the reaper's sweep, not a worker's call, locks with SKIP LOCKED: a run someone else
    # holds is left for the next sweep)
    assert _functions_with(bodies, "FROM runs_run WHERE id = p_run FOR UPDATE") == {
        "ledger_run_locked",
        "ledger_lease_expire",
    }
    assert "FOR UPDATE SKIP LOCKED" in bodies["ledger_lease_expire"]
    assert _functions_with(bodies, "'stale_epoch'") == {"ledger_run_locked"}
    # (finish answers a repeat of itself before it refuses a status: a completed run completed
    # again with the same output is answered as it is)
    assert _functions_with(bodies, "ledger_status_refusal(") == {
        "ledger_run_locked",
        "ledger_run_finish",
    }
    for call in HOT_CALLS:
        assert "ledger_run_locked(" in bodies[call], call


@pytest.mark.django_db
def test_stopping_a_run_at_a_limit_is_written_once() -> None:
    bodies = _live_bodies()

    assert _functions_with(bodies, "r.status := 'budget_exceeded'") == {"ledger_run_budget_stop"}
    for caller in ("ledger_step_intent", "ledger_lease", "ledger_outcome_apply"):
        assert "ledger_run_budget_stop(" in bodies[caller], caller


@pytest.mark.django_db
def test_the_approval_rules_live_beside_the_one_intent_body() -> None:
    bodies = _live_bodies()

    assert _functions_with(bodies, "FROM runs_approvalrule") == {"ledger_approval_rule"}
    assert _functions_with(bodies, "INSERT INTO runs_approvalrequest") == {
        "ledger_approval_request"
    }
    intent = bodies["ledger_step_intent"]
    assert "ledger_approval_rule(" in intent and "ledger_approval_request(" in intent


@pytest.mark.django_db
def test_the_recovery_rules_the_move_to_review_and_the_finish_are_written_once_in_sql() -> None:
    bodies = _live_bodies()

    assert _functions_with(bodies, "'reconciled'") == {"ledger_recover_open_intents"}
    assert _functions_with(bodies, "r.status := 'needs_review'") == {"ledger_needs_review"}
    for caller in ("ledger_lease", "ledger_lease_expire"):
        assert "ledger_recover_open_intents(" in bodies[caller], caller
    for caller in ("ledger_lease", "ledger_lease_expire", "ledger_run_finish"):
        assert "ledger_needs_review(" in bodies[caller], caller


# the events of the worker's run-level calls and of recovery: the kernel appends them; Python
# reads them (the chain's binding, the desk, the console) and never appends one
KERNEL_WRITTEN = re.compile(
    r"(event_append\([^)]*type=|\.event\(|EVENTS = \{[^}]*)EventType\.(LEASE_ACQUIRED|LEASE_EXPIRED|NEEDS_REVIEW"
    r"|RECONCILED|STEP_UNKNOWN|STEP_INTERRUPTED|RUN_COMPLETED|RUN_FAILED)\b"
)


def test_no_python_module_appends_what_the_kernel_decides() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    writers = {
        str(path.relative_to(root))
        for folder in ("runs", "tools", "review", "support_agent", "audit", "console")
        for path in (root / folder).rglob("*.py")
        if "migrations" not in path.parts and KERNEL_WRITTEN.search(path.read_text())
    }
    assert writers == set()
