"""An admin who makes a policy the default is told which one it replaces, and the old default's
change is an audit entry of its own; a policy can be deleted, after a question, audited with its
limits, while runs keep the limits they copied."""

from typing import Any

import pytest
from django.test import Client

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS
from runs.api_errors import ApplicationError
from runs.models import BudgetPolicy
from runs.services.creation import run_create
from tests.review.factories import user_in

pytestmark = pytest.mark.django_db


def admin() -> Client:
    client = Client()
    client.force_login(user_in(ADMINS, "ada"))
    return client


def policy_values(**overrides: Any) -> dict[str, str]:
    return {
        "name": "strict",
        "agent": "",
        "is_default": "on",
        "max_steps": "10",
        "max_tokens": "1000",
        "max_wall_seconds": "600",
        "max_cost_usd": "",
        "max_recoveries": "1",
        **overrides,
    }


def test_a_new_default_warns_asks_before_it_replaces_the_old_and_the_change_is_audited() -> None:
    old = BudgetPolicy.objects.get(is_default=True)  # seeded by the migration
    client = admin()
    form = client.get("/policies/new").content.decode()
    assert f"The default policy now is “{old.name}”" in form

    # a tick on "Default policy" alone is a question, not a replacement
    asked = client.post("/policies/new", policy_values())
    said = asked.content.decode()
    assert asked.status_code == 400 and "Tick “Replace the default” to confirm." in said
    assert f"Replace the default: “{old.name}” then applies to no agent" in said
    old.refresh_from_db()
    assert old.is_default and not BudgetPolicy.objects.filter(name="strict").exists()
    assert not AuditEntry.objects.filter(action__startswith="policy.").exists()

    saved = client.post("/policies/new", policy_values(replace_default="on"), follow=True)

    assert "new runs of agents without a policy of their own use it" in saved.content.decode()
    old.refresh_from_db()
    assert not old.is_default
    entry = AuditEntry.objects.get(action="policy.update", target=f"policy:{old.pk}")
    assert entry.details["before"]["is_default"] is True
    assert entry.details["after"]["is_default"] is False
    assert "“strict” is" in entry.note and entry.actor_name == "ada"
    assert AuditEntry.objects.filter(action="policy.create").count() == 1


def test_a_policy_is_deleted_only_after_the_question_and_runs_keep_their_limits() -> None:
    policy = BudgetPolicy.objects.create(
        name="billing",
        agent="billing",
        max_steps=7,
        max_tokens=700,
        max_wall_seconds=70,
        max_recoveries=0,
    )
    run, _ = run_create(agent="billing", input={}, actor="worker:w-1")
    client = admin()
    asked = client.get(f"/policies/{policy.pk}/delete")
    assert asked.status_code == 200 and "Delete policy “billing”?" in asked.content.decode()
    not_confirmed = client.post(f"/policies/{policy.pk}/delete", {})
    assert not_confirmed.status_code == 200 and BudgetPolicy.objects.filter(pk=policy.pk).exists()

    done = client.post(
        f"/policies/{policy.pk}/delete", {"confirm": "yes", "note": "billing moved"}, follow=True
    )

    assert "Policy “billing” deleted" in done.content.decode()
    assert not BudgetPolicy.objects.filter(pk=policy.pk).exists()
    entry = AuditEntry.objects.get(action="policy.delete")
    assert entry.details["before"]["max_steps"] == 7 and entry.note == "billing moved"
    run.refresh_from_db()
    assert (run.policy_id, run.limit_steps) == (None, 7)
    default = BudgetPolicy.objects.get(is_default=True)
    later, _ = run_create(agent="billing", input={}, actor="worker:w-1")
    assert later.limit_steps == default.max_steps  # the default's limits from now on


def test_deleting_the_default_says_new_runs_without_a_policy_are_refused() -> None:
    default = BudgetPolicy.objects.get(is_default=True)
    client = admin()
    asked = client.get(f"/policies/{default.pk}/delete").content.decode()
    assert "no_budget_policy" in asked and "default" in asked

    client.post(f"/policies/{default.pk}/delete", {"confirm": "yes"})

    with pytest.raises(ApplicationError, match="no budget policy"):
        run_create(agent="nobody-has-this", input={}, actor="worker:w-1")
