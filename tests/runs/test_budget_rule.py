"""The budget rule has one copy, the kernel's `ledger_exceeded_limit`; the services ask it
through `kernel.exceeded_limit` about the saved row. This table is what it answers: the first
limit reached, as the payload of the run's budget_exceeded event."""

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from runs import clock, kernel
from runs.models import Run
from runs.services.creation import run_create

STEPS = {"limit": "steps", "limit_value": 10, "used": 10}
TOKENS_AT = {"limit": "tokens", "limit_value": 1000, "used": 1000}
Answer = dict[str, Any] | str | None  # "wall": the wall_seconds payload of the run's deadline
CASES: list[tuple[str, dict[str, Any], Answer, Answer]] = [
    # name, columns, answer for an outcome (next_step false), answer for the next intent
    ("room left", {}, None, None),
    ("steps at the limit", {"used_steps": 10}, None, STEPS),
    ("tokens at the limit", {"used_tokens": 1000}, None, TOKENS_AT),
    (
        "tokens over the limit",
        {"used_tokens": 1001},
        {"limit": "tokens", "limit_value": 1000, "used": 1001},
        {"limit": "tokens", "limit_value": 1000, "used": 1001},
    ),
    (
        "cost at the limit",
        {"limit_cost_usd": Decimal("0.5"), "used_cost_usd": Decimal("0.5")},
        None,
        {"limit": "cost_usd", "limit_value": "0.500000", "used": "0.500000"},
    ),
    (
        "cost over the limit",
        {"limit_cost_usd": Decimal("0.5"), "used_cost_usd": Decimal("0.7")},
        {"limit": "cost_usd", "limit_value": "0.500000", "used": "0.700000"},
        {"limit": "cost_usd", "limit_value": "0.500000", "used": "0.700000"},
    ),
    ("no cost limit", {"limit_cost_usd": None, "used_cost_usd": Decimal("99")}, None, None),
    ("past the deadline", {"deadline_in": -1, "used_steps": 10}, "wall", "wall"),
    (
        "all at once",
        {"used_steps": 10, "used_tokens": 5000, "used_cost_usd": Decimal("9")},
        {"limit": "tokens", "limit_value": 1000, "used": 5000},
        STEPS,
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize("next_step", [False, True], ids=["outcome", "next intent"])
@pytest.mark.parametrize(
    ("name", "columns", "outcome", "intent"), CASES, ids=[name for name, *_ in CASES]
)
def test_the_kernel_names_the_first_limit_reached(name, columns, outcome, intent, next_step):
    run, _ = run_create(agent="budgeted", input={}, actor="test")
    now = clock.now()
    columns = dict(columns)
    deadline = now + timedelta(seconds=columns.pop("deadline_in", 60))
    values = {"limit_steps": 10, "limit_tokens": 1000, "limit_cost_usd": Decimal("1"), **columns}
    if "used_steps" in values:  # the journal's count of steps (run_steps_used_match_journal)
        values["step_count"] = values["used_steps"]
    Run.objects.filter(pk=run.pk).update(deadline=deadline, **values)
    run.refresh_from_db()

    expected = intent if next_step else outcome
    if expected == "wall":
        expected = {
            "limit": "wall_seconds",
            "limit_value": run.limit_wall_seconds,
            "deadline": run.deadline.isoformat(),
        }
    limit = kernel.exceeded_limit(run.pk, now=now, next_step=next_step)
    if expected is None:
        assert limit is None
        return
    assert limit is not None
    assert limit.details == expected and limit.name == expected["limit"]
    # the event payload is the canonical text of the same
    assert limit.text == json.dumps(expected, sort_keys=True, separators=(",", ":"))
