"""After a decision the item page says who takes the run up, truthfully (issue 36): the ledger's
Celery workers for a `celery` run; for an `external` run nobody in the ledger (its own process,
named, or whatever restarts it), never just "now running" as if a worker were on it."""

import re
from html import unescape
from typing import Any

import pytest

from dashboard.roles import SUPERVISORS
from tests.review.factories import killed_support_run

pytestmark = pytest.mark.django_db


def resolved_page(client: Any, run_id: str, index: int, **data: str) -> str:
    answer = client.post(f"/queue/{run_id}/{index}/resolve", data, follow=True)
    assert answer.status_code == 200
    item = client.get(f"/queue/{run_id}/{index}/").content.decode()
    said = re.search(r'<span id="resumed-by">([^<]*)</span>', item)
    assert said, item[:3000]
    return unescape(said.group(1))


def test_an_external_run_resolved_as_sent_is_resumed_by_nobody_in_the_ledger(
    client_for: Any,
) -> None:
    item = killed_support_run()
    said = resolved_page(
        client_for(SUPERVISORS), item.run_id, item.index, action="sent", note="in the SMTP log"
    )
    assert said == (
        "Nobody in the ledger resumes this run: it is run by its own worker process (w-7), and "
        "it goes on only when that process, or the deployment that restarts it, attaches to it "
        "again. Until then it waits without a worker, and its wall-clock budget keeps running."
    )


def test_a_celery_run_sent_back_for_retry_is_offered_to_the_celery_workers(
    client_for: Any,
) -> None:
    item = killed_support_run(runner="celery")
    said = resolved_page(
        client_for(SUPERVISORS),
        item.run_id,
        item.index,
        action="retry",
        note="not in the SMTP log",
        confirm_repeat="on",
    )
    assert said == "A Celery worker of the ledger takes it up: the run is offered to them now."


def test_an_abandoned_run_says_nothing_more_runs(client_for: Any) -> None:
    item = killed_support_run()
    said = resolved_page(
        client_for(SUPERVISORS), item.run_id, item.index, action="abandon", note="duplicate"
    )
    assert said == "The run is abandoned: nothing more runs."
