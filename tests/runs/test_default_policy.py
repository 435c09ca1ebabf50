"""The default budget policy has one source, its data migration (runs/default_policy.py): a run
for an agent without a policy copies its limits, and without it the run is refused, never given
limits from somewhere else."""

from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from runs.default_policy import DEFAULT_POLICY
from runs.models import BudgetPolicy, Run


def test_a_run_of_an_agent_without_a_policy_copies_the_migrations_default(api: APIClient) -> None:
    created = api.post("/api/v1/runs/", {"agent": "no-policy-agent", "input": {}})

    assert created.status_code == 201, created.content
    run = Run.objects.get(pk=created.json()["id"])
    assert run.policy == BudgetPolicy.objects.get(is_default=True, name=DEFAULT_POLICY["name"])
    assert run.limit_steps == DEFAULT_POLICY["max_steps"]
    assert run.limit_recoveries == DEFAULT_POLICY["max_recoveries"]


def test_without_the_default_policy_a_run_is_refused_not_given_limits_from_settings(
    api: APIClient,
) -> None:
    BudgetPolicy.objects.filter(is_default=True).delete()

    refused = api.post("/api/v1/runs/", {"agent": "no-policy-agent", "input": {}})

    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "no_budget_policy"
    assert refused.json()["error"]["details"] == {"agent": "no-policy-agent"}
    assert not Run.objects.filter(agent="no-policy-agent").exists()
    assert not hasattr(settings, "LEDGER_FALLBACK_LIMITS")


@pytest.mark.django_db(transaction=True)
def test_a_transactional_test_finds_the_default_policy_after_another_flushed_the_tables(
    worker_token: str,
) -> None:
    # runs after other transactional tests in the session, whose flush took the migration's row
    assert BudgetPolicy.objects.filter(is_default=True).count() == 1


@pytest.mark.django_db(transaction=True)
def test_and_so_does_the_next_one(worker_token: str, make_policy: Any) -> None:
    assert BudgetPolicy.objects.get(is_default=True).max_steps == DEFAULT_POLICY["max_steps"]
