"""The budget rule is written twice, in PL/pgSQL (ledger_exceeded_limit: the hot calls) and in
runs.services.budgets._exceeded_limit (recovery, limit raises); this table proves they say the same."""

import json
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.db import connection

from runs import clock
from runs.models import Run
from runs.services.budgets import _exceeded_limit
from runs.services.creation import run_create

CASES: list[tuple[str, dict[str, Any]]] = [
    ("room left", {}),
    ("steps at the limit", {"used_steps": 10}),
    ("tokens at the limit", {"used_tokens": 1000}),
    ("tokens over the limit", {"used_tokens": 1001}),
    ("cost at the limit", {"limit_cost_usd": Decimal("0.5"), "used_cost_usd": Decimal("0.5")}),
    ("cost over the limit", {"limit_cost_usd": Decimal("0.5"), "used_cost_usd": Decimal("0.7")}),
    ("no cost limit", {"limit_cost_usd": None, "used_cost_usd": Decimal("99")}),
    ("past the deadline", {"deadline_in": -1, "used_steps": 10}),
    ("all at once", {"used_steps": 10, "used_tokens": 5000, "used_cost_usd": Decimal("9")}),
]


@pytest.mark.django_db
@pytest.mark.parametrize("next_step", [False, True], ids=["outcome", "next intent"])
@pytest.mark.parametrize(("name", "columns"), CASES, ids=[name for name, _ in CASES])
def test_the_sql_and_the_python_budget_rule_agree(name, columns, next_step):
    run, _ = run_create(agent="budgeted", input={}, actor="test")
    now = clock.now()
    columns = dict(columns)
    deadline = now + timedelta(seconds=columns.pop("deadline_in", 60))
    values = {"limit_steps": 10, "limit_tokens": 1000, "limit_cost_usd": Decimal("1"), **columns}
    if "used_steps" in values:  # the journal's count of steps (run_steps_used_match_journal)
        values["step_count"] = values["used_steps"]
    Run.objects.filter(pk=run.pk).update(deadline=deadline, **values)
    run.refresh_from_db()

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT ledger_exceeded_limit(r, %s, %s) FROM runs_run r WHERE id = %s",
            [now, next_step, run.pk],
        )
        (sql,) = cursor.fetchone()

    python = _exceeded_limit(run, now=now, next_step=next_step)
    assert (None if sql is None else json.loads(sql)) == python
