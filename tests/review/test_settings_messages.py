"""The admins' settings pages speak one language: an agent name is checked by one rule wherever
it is given, a live token's name is taken once, and messages read as sentences (no field names
from the code, no limit worded two ways)."""

from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.test import Client

from dashboard.roles import ADMINS
from dashboard.views.common import error_text, form_errors
from review.forms import DecideForm, LimitsForm, PolicyForm
from runs.api_errors import note_required
from runs.models import ApprovalRule, WorkerToken
from runs.tokens import worker_token_revoke
from tests.review.factories import user_in

pytestmark = pytest.mark.django_db


def admin() -> Client:
    client = Client()
    client.force_login(user_in(ADMINS, "ada"))
    return client


def test_an_approval_rule_refuses_the_agent_names_a_token_refuses() -> None:
    client = admin()
    rule = client.post(
        "/approval-rules/new",
        {"agent": "support team", "tool_pattern": "email.*", "approvals_required": 1},
    )
    token = client.post("/tokens/", {"name": "pods", "agents": "support team"})

    assert rule.status_code == 400 and token.status_code == 400
    said = "Not an agent name: support team"
    assert said in rule.content.decode() and said in token.content.decode()
    assert not ApprovalRule.objects.exists() and not WorkerToken.objects.exists()
    ok = client.post(
        "/approval-rules/new",
        {"agent": "support.v2", "tool_pattern": "email.*", "approvals_required": 1},
    )
    assert ok.status_code == 302  # the names a run may have, a rule may name


def test_a_second_live_token_of_a_name_is_refused_and_the_name_is_free_once_revoked() -> None:
    client = admin()
    assert client.post("/tokens/", {"name": "pod-1"}).status_code == 200

    again = client.post("/tokens/", {"name": "pod-1"})

    assert again.status_code == 400
    assert "A token named “pod-1” is in use already" in again.content.decode()
    assert WorkerToken.objects.filter(name="pod-1").count() == 1
    with pytest.raises(IntegrityError), transaction.atomic():  # the database says so too
        WorkerToken.objects.create(name="pod-1", prefix="alw_x", token_hash="0" * 64)
    worker_token_revoke(token_id=WorkerToken.objects.get(name="pod-1").pk)
    assert client.post("/tokens/", {"name": "pod-1"}).status_code == 200


def test_messages_name_no_field_of_the_code_and_say_nothing_twice() -> None:
    form = DecideForm({"action": "resume", "note": ""})
    assert not form.is_valid()
    assert form_errors(form) == "A note is required: say what you checked and why."
    with pytest.raises(Exception) as refused:
        note_required("")
    assert error_text(refused.value) == "A note is required."  # type: ignore[arg-type]
    limits = LimitsForm({"steps": "0", "note": "more room"})
    assert form_errors(limits) == "Steps: Must be at least 1."


@pytest.mark.parametrize("value", ["0", "-5"])
def test_a_limit_below_its_minimum_gets_one_message_whatever_the_value(value: str) -> None:
    values: dict[str, Any] = {
        "name": "p",
        "agent": "support",
        "max_steps": value,
        "max_tokens": value,
        "max_wall_seconds": value,
        "max_recoveries": "-1",
    }
    policy = PolicyForm(values)
    raised = LimitsForm({"steps": value, "tokens": value, "wall_seconds": value, "note": "n"})

    assert not policy.is_valid() and not raised.is_valid()
    for name in ("max_steps", "max_tokens", "max_wall_seconds"):
        assert policy.errors[name] == ["Must be at least 1."]
    for name in ("steps", "tokens", "wall_seconds"):
        assert raised.errors[name] == ["Must be at least 1."]
    assert policy.errors["max_recoveries"] == ["Must be 0 or more."]


def test_create_worker_token_refuses_an_agent_name_and_a_live_tokens_name() -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="Not an agent name: support team"):
        call_command("create_worker_token", "pods", "--agent", "support team")
    call_command("create_worker_token", "pods")
    with pytest.raises(CommandError, match="in use already"):
        call_command("create_worker_token", "pods")
    assert WorkerToken.objects.filter(name="pods").count() == 1
