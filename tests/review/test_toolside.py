"""The transcript shows what the tool side knows about each write step's key, and degrades."""

import pytest
from django.db import ProgrammingError
from django.test import Client

import tools.selectors
from dashboard.roles import AUDITORS
from review import toolside
from runs.services.creation import run_create
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record
from tests.review.factories import user_in


@pytest.mark.django_db
def test_transcript_shows_the_tool_sides_record_of_a_step_key(api, groups):
    run, _ = run_create(agent="support", input={}, actor="w")
    grant = run_lease_acquire(run_id=run.pk, worker="w", ttl_seconds=30, actor="w")
    args = {"customer": "ada@example.com", "subject": "Refund", "body": "Charged twice"}
    intent = step_intent_record(
        run_id=run.pk,
        epoch=grant.epoch,
        index=0,
        kind="tool",
        name="tickets.create",
        effect="write",
        enforced_by="ledger",
        arguments=args,
        actor="w",
    )
    key = intent.step.idempotency_key
    assert toolside.key_state(key).state == "absent"
    first = api.post(
        "/api/v1/tools/tickets.create/invoke",
        {"arguments": args},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )
    assert first.status_code == 200, first.content
    assert toolside.key_state(key).state == "completed"
    client = Client()
    client.force_login(user_in(AUDITORS))
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert f"<summary>completed</summary><code>{key}</code>" in page


@pytest.mark.django_db
def test_when_the_tool_sides_read_fails_keys_show_as_unavailable_not_an_error(monkeypatch):
    def mid_migration(*args: object) -> None:
        raise ProgrammingError('relation "tools_idempotencykey" does not exist')

    monkeypatch.setattr(tools.selectors, "key_records", mid_migration)
    monkeypatch.setattr(tools.selectors, "ticket_get", mid_migration)
    assert toolside.key_states(["k1", "k2"]) == {
        "k1": toolside.UNAVAILABLE,
        "k2": toolside.UNAVAILABLE,
    }
    assert toolside.concerned_records({"to": "ada@example.com", "ticket_id": 3}) == {
        "customer": "ada@example.com",
        "ticket_id": 3,
    }


@pytest.mark.django_db
def test_a_tools_exception_text_is_on_the_transcript_for_staff_not_in_the_api(api, groups):
    from tests.tools import fixture_tools

    fixture_tools.register()
    try:
        run, _ = run_create(agent="support", input={}, actor="w")
        grant = run_lease_acquire(run_id=run.pk, worker="w", ttl_seconds=30, actor="w")
        args = {"customer": "bob@example.com"}
        key = step_intent_record(
            run_id=run.pk,
            epoch=grant.epoch,
            index=0,
            kind="tool",
            name="test.explode",
            effect="write",
            enforced_by="ledger",
            arguments=args,
            actor="w",
        ).step.idempotency_key
        failed = api.post(
            "/api/v1/tools/test.explode/invoke",
            {"arguments": args},
            format="json",
            HTTP_IDEMPOTENCY_KEY=key,
        )
    finally:
        fixture_tools.unregister()
    assert failed.status_code == 502
    assert "relay fell over" not in failed.content.decode()
    client = Client()
    client.force_login(user_in(AUDITORS))
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert "RuntimeError: the upstream relay fell over mid-request" in page
