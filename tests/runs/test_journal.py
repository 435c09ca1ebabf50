"""A run journalled step by step through the HTTP API, and its tamper-evident chain."""

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

from runs.models import Event, Run, Step
from tests.database import guards_off
from tests.runs.journal_client import JournalClient


def verify_journal(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("verify_journal", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


def test_a_twenty_step_run_is_journalled_with_usage_events_and_a_verifying_chain(
    api: APIClient, make_policy: Any
) -> None:
    make_policy("support", max_steps=20, max_tokens=10_000)
    journal = JournalClient(api)
    run = journal.create(external_id="ticket-20")
    epoch = journal.lease(run["id"]).json()["epoch"]

    for index in range(20):
        if index % 2:
            assert journal.read(run["id"], epoch, index, tokens=7).status_code == 201
        else:
            journal.write_step(run["id"], epoch, index, tokens=11)
    done = api.post(f"/api/v1/runs/{run['id']}/complete", {"epoch": epoch, "output": {"ok": True}})

    assert done.status_code == 200
    assert done.json()["status"] == "completed"
    body = journal.journal(run["id"])
    assert [s["index"] for s in body["steps"]] == list(range(20))
    assert {s["state"] for s in body["steps"]} == {"done"}
    assert done.json()["budget"]["used"] == {
        "steps": 20,
        "tokens": 10 * 7 + 10 * 11,
        "cost_usd": "0.000000",
        "recoveries": 0,
    }
    types = [e["type"] for e in body["events"]]
    assert types[:2] == ["run_created", "lease_acquired"]
    assert types.count("step_intent") == 20
    assert types.count("step_done") == 20
    assert types[-1] == "run_completed"
    assert [e["seq"] for e in body["events"]] == list(range(1, len(types) + 1))
    for earlier, later in zip(body["events"], body["events"][1:], strict=False):
        assert later["prev_hash"] == earlier["hash"]
    assert verify_journal("--run", run["id"])[0] == 0


def test_editing_one_event_in_the_database_breaks_verify_journal(api: APIClient) -> None:
    journal = JournalClient(api)
    run = journal.create()
    epoch = journal.lease(run["id"]).json()["epoch"]
    journal.write_step(run["id"], epoch, 0)
    target = Event.objects.get(run_id=run["id"], type="step_intent")
    assert verify_journal()[0] == 0

    # someone bypassing the app (and its append-only trigger)
    with connection.cursor() as cursor, guards_off(cursor, "runs_event"):
        cursor.execute(
            "UPDATE runs_event SET payload = jsonb_set(payload, '{name}', '\"tampered\"') WHERE id = %s",
            [target.pk],
        )

    code, output = verify_journal()
    assert code == 1
    assert f"BROKEN run {run['id']} event {target.seq}: hash does not match" in output


def test_the_event_table_refuses_update_and_delete(api: APIClient) -> None:
    journal = JournalClient(api)
    run = journal.create()
    event = Event.objects.get(run_id=run["id"])
    from django.db import InternalError, ProgrammingError, transaction

    for statement in (
        "UPDATE runs_event SET actor = 'x' WHERE id = %s",
        "DELETE FROM runs_event WHERE id = %s",
    ):
        with (
            pytest.raises((InternalError, ProgrammingError)),
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(statement, [event.pk])
    assert Event.objects.get(pk=event.pk).actor == event.actor


def test_the_same_external_id_attaches_to_the_existing_run(api: APIClient) -> None:
    first = api.post("/api/v1/runs/", {"agent": "support", "input": {"a": 1}, "external_id": "T-9"})
    again = api.post("/api/v1/runs/", {"agent": "support", "input": {"a": 1}, "external_id": "T-9"})
    other_agent = api.post("/api/v1/runs/", {"agent": "billing", "input": {}, "external_id": "T-9"})

    assert (first.status_code, again.status_code, other_agent.status_code) == (201, 200, 201)
    assert first.json()["id"] == again.json()["id"] != other_agent.json()["id"]
    assert Run.objects.count() == 2


def test_a_read_step_is_recorded_done_in_one_call(api: APIClient) -> None:
    journal = JournalClient(api)
    run = journal.create()
    epoch = journal.lease(run["id"]).json()["epoch"]

    response = journal.read(run["id"], epoch, 0, tokens=42)

    assert response.status_code == 201
    assert response.json()["state"] == "done"
    assert response.json()["usage"]["input_tokens"] == 42
    assert Step.objects.get(run_id=run["id"]).outcome_at is not None


def test_the_same_outcome_twice_is_accepted_and_a_different_one_conflicts(api: APIClient) -> None:
    journal = JournalClient(api)
    run = journal.create()
    epoch = journal.lease(run["id"]).json()["epoch"]
    journal.intent(run["id"], epoch, 0)
    assert journal.outcome(run["id"], epoch, 0, tokens=5).status_code == 200
    assert journal.outcome(run["id"], epoch, 0, tokens=5).status_code == 200

    conflict = journal.outcome(run["id"], epoch, 0, result={"other": True})

    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "outcome_conflict"
    assert journal.run(run["id"])["budget"]["used"]["tokens"] == 5
