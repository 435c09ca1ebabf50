"""The generic agent runner's Celery wiring, read from the live objects (the real worker tests exercise it)."""

import pytest

from celery_agents.apps import redispatch_resumable_run
from celery_agents.registry import agent_register, agent_runner, is_registered
from celery_agents.tasks import run_agent
from runs.signals import run_resumable


def test_agent_task_is_safe_to_redeliver() -> None:
    assert run_agent.acks_late is True
    assert run_agent.reject_on_worker_lost is True
    assert run_agent.name == "agents.run_agent"


def test_resumable_runs_are_redispatched_by_the_agents_app() -> None:
    receivers = [
        entry[1]() for entry in run_resumable.receivers if entry[0][0] == "celery_agents.redispatch"
    ]
    assert receivers == [redispatch_resumable_run]


def test_the_support_agent_registered_itself_and_others_are_refused() -> None:
    assert is_registered("support") and not is_registered("nope")
    assert callable(agent_runner("support"))
    with pytest.raises(LookupError, match="no agent 'nope'"):
        agent_runner("nope")


def test_a_second_app_cannot_claim_a_registered_agent_name() -> None:
    agent_register(agent="support", runner="support_agent.runners.resume_support")  # again: no-op
    with pytest.raises(ValueError, match="registered already"):
        agent_register(agent="support", runner="elsewhere.resume")
    assert agent_runner("support").__module__ == "support_agent.runners"
