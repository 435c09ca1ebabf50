"""Rules the review services decide, whoever calls them: the forms only check shapes."""

from datetime import timedelta
from typing import Any

import pytest

from review.services.policies import budget_policy_save
from runs import clock
from runs.api_errors import ApplicationError
from runs.constants import StepState
from runs.models import BudgetPolicy, Step
from runs.services.decisions import step_resolve
from tests.review.factories import UnknownStep, user_in


def _policy(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "billing",
        "agent": "billing",
        "is_default": False,
        "max_steps": 30,
        "max_tokens": 5000,
        "max_wall_seconds": 600,
        "max_cost_usd": None,
        "max_recoveries": 2,
        **overrides,
    }


@pytest.mark.django_db
def test_an_observed_result_goes_only_with_sent_whoever_asks(unknown_step: UnknownStep):
    with pytest.raises(ApplicationError) as refused:
        step_resolve(
            run_id=unknown_step.run_id,
            index=unknown_step.index,
            action="retry",
            note="the customer says nothing came",
            by="sam",
            result={"email": "seen"},
        )
    assert (refused.value.code, list(refused.value.details)) == ("validation_error", ["result"])
    assert unknown_step.step.state == StepState.UNKNOWN


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("values", "message"),
    [
        (_policy(agent=None), "Assign the policy to an agent, or make it the default."),
        (_policy(agent="  "), "Assign the policy to an agent, or make it the default."),
        (_policy(is_default=True), "The default policy applies to every agent"),
    ],
    ids=["no agent", "blank agent", "default with an agent"],
)
def test_a_policy_belongs_to_an_agent_or_is_the_default_whoever_saves_it(values, message):
    admin = user_in("admins")
    before = list(BudgetPolicy.objects.values())

    with pytest.raises(ApplicationError) as refused:
        budget_policy_save(user=admin, policy=None, values=values)

    assert message in refused.value.details["agent"][0]
    assert list(BudgetPolicy.objects.values()) == before


@pytest.mark.django_db
def test_a_claim_is_live_until_it_runs_out(unknown_step: UnknownStep):
    step: Step = unknown_step.step
    now = clock.now()
    assert not step.claim_is_live(now) and not step.claim_has_expired(now)

    step.claimed_by = user_in("supervisors", "kim")
    step.claim_expires_at = now + timedelta(seconds=60)
    assert step.claim_is_live(now) and not step.claim_has_expired(now)
    assert not step.claim_is_live(now + timedelta(seconds=60))
    assert step.claim_has_expired(now + timedelta(seconds=60))
