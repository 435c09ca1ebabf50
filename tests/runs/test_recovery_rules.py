"""After a lost lease, each open intent lands in the state the recovery rules (docs/api.md, "Recovery rules") give it."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from runs.models import Event, Run, Step
from runs.recovery import KeyState
from runs.tasks import reap_expired_leases as reaper_task
from tests.runs.journal_client import JournalClient

# what the tool side says about each ledger-enforced step's key, by tool name
KEY_STATES = {
    "ledger.completed": KeyState(state="completed", response={"email": {"id": 7}}),
    "ledger.failed": KeyState(state="failed", response={"error": "smtp refused"}),
    "ledger.absent": KeyState(state="absent"),
    "ledger.fresh": KeyState(state="in_progress", stale=False),
    "ledger.stale": KeyState(state="in_progress", stale=True),
}
STEP_BY_KEY: dict[str, str] = {}


def key_state_for_test(key: str) -> KeyState:
    return KEY_STATES[STEP_BY_KEY[key]]


OPEN_INTENTS = [
    # (name, effect, enforced_by, expected state after recovery)
    ("kb.search", "read", None, "interrupted"),
    ("ledger.completed", "write", "ledger", "done"),
    ("ledger.failed", "write", "ledger", "error"),
    ("ledger.absent", "write", "ledger", "interrupted"),
    ("ledger.fresh", "write", "ledger", "interrupted"),
    ("ledger.stale", "write", "ledger", "unknown"),
    ("tickets.create", "write", "tool", "interrupted"),
    ("email.send", "write", "nobody", "unknown"),
]


def run_with_open_intents(api: APIClient, rows: list[tuple[str, str, str | None, str]]) -> str:
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    epoch = journal.lease(run_id, worker="w-7").json()["epoch"]
    for index, (name, effect, enforced_by, _) in enumerate(rows):
        kind = "model" if effect == "read" else "tool"
        response = journal.intent(
            run_id, epoch, index, name=name, effect=effect, enforced_by=enforced_by, kind=kind
        )
        assert response.status_code == 201, response.content
        STEP_BY_KEY[response.json()["idempotency_key"]] = name
    return run_id


@pytest.fixture(autouse=True)
def tool_side_answers(settings: Any) -> None:
    settings.LEDGER_KEY_STATE_LOOKUP = "tests.runs.test_recovery_rules.key_state_for_test"


@pytest.mark.parametrize("by", ["reaper", "new lease"])
def test_each_open_intent_lands_in_its_recovery_state(
    api: APIClient, fake_clock: Any, by: str
) -> None:
    run_id = run_with_open_intents(api, OPEN_INTENTS)
    fake_clock.advance(seconds=31)

    if by == "reaper":
        assert reaper_task() == 1
    else:
        refused = JournalClient(api).lease(run_id, worker="w-9")
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "needs_review"

    states = dict(Step.objects.filter(run_id=run_id).values_list("name", "state"))
    assert states == {name: expected for name, _, _, expected in OPEN_INTENTS}
    completed = Step.objects.get(run_id=run_id, name="ledger.completed")
    assert completed.result == {"email": {"id": 7}}
    assert Event.objects.filter(run_id=run_id, type="reconciled").count() == 2
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.status_reason, run.lease_worker) == (
        "needs_review",
        "unknown_step",
        None,
    )


@pytest.mark.parametrize("by", ["reaper", "new lease"])
def test_without_unknown_steps_the_run_resumes_and_reexecutes_interrupted_steps(
    api: APIClient, fake_clock: Any, by: str
) -> None:
    safe = [row for row in OPEN_INTENTS if row[3] != "unknown"]
    run_id = run_with_open_intents(api, safe)
    fake_clock.advance(seconds=31)
    if by == "reaper":
        assert reaper_task() == 1
        assert Run.objects.get(pk=run_id).status == "interrupted"

    lease = JournalClient(api).lease(run_id, worker="w-9")

    assert lease.status_code == 200
    body = lease.json()
    assert body["recovered"] is True
    assert body["run"]["budget"]["used"]["recoveries"] == 1
    assert [s["state"] for s in body["journal"]] == [expected for *_, expected in safe]
    reopened = JournalClient(api).intent(
        run_id, body["epoch"], 3, name="ledger.absent", effect="write", enforced_by="ledger"
    )
    assert reopened.status_code == 201
    assert reopened.json()["state"] == "intent"
    assert reopened.json()["idempotency_key"] == body["journal"][3]["idempotency_key"]
    assert Run.objects.get(pk=run_id).used_steps == len(safe)  # re-execution is not a new step


def test_the_reaper_fences_the_lost_worker_at_once(api: APIClient, fake_clock: Any) -> None:
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    epoch = journal.lease(run_id).json()["epoch"]
    fake_clock.advance(seconds=31)

    reaper_task()

    late = journal.read(run_id, epoch, 0)
    assert late.json()["error"]["code"] == "stale_epoch"
    assert Step.objects.filter(run_id=run_id).count() == 0


def test_the_reaper_leaves_live_leases_alone(api: APIClient, fake_clock: Any) -> None:
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    journal.lease(run_id, ttl=60)
    fake_clock.advance(seconds=59)
    assert reaper_task() == 0
    assert Run.objects.get(pk=run_id).status == "running"


@pytest.mark.parametrize("name", ["ledger.completed", "ledger.failed"])
def test_a_reconciled_result_edited_in_the_database_breaks_the_chain(
    api: APIClient, fake_clock: Any, name: str
) -> None:
    from django.db import connection

    from runs.chain import run_chain_breaks

    run_id = run_with_open_intents(api, OPEN_INTENTS)
    fake_clock.advance(seconds=31)
    assert reaper_task() == 1
    run = Run.objects.get(pk=run_id)
    assert run_chain_breaks(run) == []

    step = Step.objects.get(run_id=run_id, name=name)
    with connection.cursor() as cursor:
        cursor.execute(
            'UPDATE runs_step SET result = \'{"email": {"id": 8}}\' WHERE id = %s', [step.pk]
        )
    assert [b.problem for b in run_chain_breaks(run)] == [
        f"step {step.index} result does not match its events"
    ]


asked_about: list[str] = []


def key_state_counted(key: str) -> KeyState:
    asked_about.append(STEP_BY_KEY[key])
    return KEY_STATES[STEP_BY_KEY[key]]


@pytest.mark.parametrize(
    ("rows", "statements", "asked"),
    [
        # nothing the tool side must say: one statement, nobody asked
        ([r for r in OPEN_INTENTS if r[2] != "ledger"], 1, []),
        # the kernel names the ledger-enforced writes, they are asked once, the statement again
        (OPEN_INTENTS, 2, ["ledger.completed", "ledger.failed", "ledger.absent", "ledger.fresh",
                           "ledger.stale"]),
    ],
)  # fmt: skip
def test_a_recovering_lease_asks_the_tool_side_only_what_the_kernel_names(
    api: APIClient, fake_clock: Any, settings: Any, rows: Any, statements: int, asked: list[str]
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.LEDGER_KEY_STATE_LOOKUP = "tests.runs.test_recovery_rules.key_state_counted"
    asked_about.clear()
    run_id = run_with_open_intents(api, rows)
    fake_clock.advance(seconds=31)

    with CaptureQueriesContext(connection) as sent:
        JournalClient(api).lease(run_id, worker="w-9")

    assert sum("ledger_lease(" in q["sql"] for q in sent.captured_queries) == statements
    assert asked_about == asked
    states = dict(Step.objects.filter(run_id=run_id).values_list("name", "state"))
    assert states == {name: expected for name, _, _, expected in rows}
