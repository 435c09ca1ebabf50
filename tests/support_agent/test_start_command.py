"""`manage.py start_agent_run`: creates the run once and queues it (on Redis DB 2 here)."""

from io import StringIO
from typing import Any

import pytest
import redis
from django.core.management import CommandError, call_command

from config.celery import app
from runs.models import Run
from tests.support_agent.conftest import REDIS_URL


@pytest.fixture
def broker_db2() -> Any:
    previous = app.conf.broker_url
    app.conf.update(broker_url=REDIS_URL)
    assert app.conf.broker_url == REDIS_URL
    app._after_fork()  # type: ignore[attr-defined]
    client = redis.Redis.from_url(REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()
    app.conf.update(broker_url=previous)
    app._after_fork()  # type: ignore[attr-defined]


def test_start_agent_run_creates_the_run_once_and_queues_it(
    transactional_db: Any, broker_db2: Any
) -> None:
    out = StringIO()
    call_command("start_agent_run", "--ticket", "T-1002", stdout=out, stderr=StringIO())
    run = Run.objects.get(agent="support", external_id="ticket:T-1002")
    assert out.getvalue().strip() == str(run.pk)
    assert run.input["ticket"]["customer"] == "grace@example.com"
    assert broker_db2.llen("celery") == 1

    call_command("start_agent_run", "--ticket", "T-1002", stdout=StringIO(), stderr=StringIO())
    assert Run.objects.filter(external_id="ticket:T-1002").count() == 1
    assert broker_db2.llen("celery") == 2  # still pending, so queued again; the lease dedupes


def test_start_agent_run_refuses_an_unknown_ticket_and_writes_nothing(
    transactional_db: Any,
) -> None:
    with pytest.raises(CommandError, match="not in the demo inbox"):
        call_command("start_agent_run", "--ticket", "T-0", stdout=StringIO(), stderr=StringIO())
    assert not Run.objects.exists()
