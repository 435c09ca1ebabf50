"""A run its budget stopped two hours ago spends no more time: its wall-clock bar stands at the
time it ran, and says so, however long the page is looked at later."""

import re
from datetime import timedelta
from typing import Any

import pytest

from dashboard.roles import SUPERVISORS
from runs import clock
from tests.review.test_stopped_run_page import stopped_by_its_token_budget

pytestmark = pytest.mark.django_db


def test_a_run_stopped_by_its_budget_hours_ago_has_a_wall_clock_that_stands_still(
    client_for: Any,
) -> None:
    run = stopped_by_its_token_budget(hours_ago=2)
    assert clock.now() - run.created_at > timedelta(hours=1)  # made two hours ago, as told

    client = client_for(SUPERVISORS)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    wall = re.search(r'title="wall clock s \(when it stopped\): (\d+) of 3600"', page)
    assert wall, "the bar says it stands where the run stopped"
    assert int(wall.group(1)) < 60, "the time it ran, not the two hours since"
