"""The agents' Celery wiring, read from the live objects (the real worker tests exercise it)."""

import pytest

from runs.signals import run_resumable
from support_agent.apps import redispatch_resumable_run
from support_agent.registry import agent_runner, is_registered
from support_agent.tasks import run_agent


def test_agent_task_is_safe_to_redeliver() -> None:
    assert run_agent.acks_late is True
    assert run_agent.reject_on_worker_lost is True
    assert run_agent.name == "agents.run_agent"


def test_resumable_runs_are_redispatched_by_the_agents_app() -> None:
    receivers = [
        entry[1]() for entry in run_resumable.receivers if entry[0][0] == "support_agent.redispatch"
    ]
    assert receivers == [redispatch_resumable_run]


def test_registry_knows_the_support_agent_and_refuses_others() -> None:
    assert is_registered("support") and not is_registered("nope")
    assert callable(agent_runner("support"))
    with pytest.raises(LookupError, match="no agent 'nope'"):
        agent_runner("nope")
