"""The journal exported as traces, to a real OTLP/HTTP receiver (tests/traces/receiver.py):
one trace per run joined to its caller's, the span model of docs/traces.md, nothing private,
each span once whatever happens to the collector."""

from collections import Counter
from typing import Any

import psycopg
import pytest
from rest_framework.test import APIClient

from runs.models import ApprovalRule
from runs.services.approvals import step_approve, step_deny
from runs.services.decisions import step_resolve
from tests.processes import test_database_url
from tests.runs.journal_client import JournalClient
from tests.runs.test_recovery_rules import run_with_open_intents
from tests.traces.receiver import OtlpReceiver, ReceivedSpan
from tests.traces.story import CALLER_SPAN, CALLER_TRACE, SECRET, Story, told
from traces.context import derived_trace_id, span_id_of
from traces.exporter import EXPORTER_LOCK, export_pending
from traces.models import TraceCursor
from traces.tasks import export_traces

pytestmark = pytest.mark.django_db(transaction=True)


def of_run(spans: list[ReceivedSpan], run_id: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.attributes["agent_ledger.run.id"] == run_id]


def named(spans: list[ReceivedSpan], prefix: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


@pytest.fixture
def story(transactional_db: Any, api: APIClient, fake_clock: Any, worker_token: str) -> Story:
    return told(api, fake_clock, worker_token)


def test_the_story_is_one_trace_per_run_under_the_callers_span(
    receiver: OtlpReceiver, story: Story
) -> None:
    report = export_pending()

    assert not report.failed and report.spans == len(receiver.spans) > 0
    run_spans = of_run(receiver.spans, story.run_id)
    # the caller's trace; the run's span a child of the caller's span, the rest children of it
    assert {s.trace_id for s in run_spans} == {CALLER_TRACE}
    (agent,) = named(run_spans, "invoke_agent")
    assert agent.name == "invoke_agent support"
    assert agent.parent_span_id == CALLER_SPAN
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert agent.attributes["gen_ai.agent.name"] == "support"
    assert {s.parent_span_id for s in run_spans if s is not agent} == {agent.span_id}
    assert agent.resource["service.name"] == "agent-ledger"

    # one execute_tool span per executed tool step: the ticket once (its replay is no span),
    # the comment once (made again after the crash), the failed close with status ERROR
    tools = named(run_spans, "execute_tool")
    assert sorted((s.attributes["agent_ledger.step.index"], s.name) for s in tools) == [
        (1, "execute_tool tickets.create"),
        (2, "execute_tool tickets.comment"),
        (4, "execute_tool tickets.close"),
    ]
    by_index = {s.attributes["agent_ledger.step.index"]: s for s in tools}
    assert by_index[4].status_code == 2  # ERROR
    assert by_index[1].status_code == by_index[2].status_code == 0
    assert by_index[1].attributes["agent_ledger.lease.epoch"] == 1
    assert by_index[2].attributes["agent_ledger.lease.epoch"] == 2  # the recovering worker's
    assert by_index[1].attributes["gen_ai.tool.name"] == "tickets.create"

    # the model call: an inference span with its model and usage, its cost in our namespace
    (chat,) = named(run_spans, "chat")
    assert chat.name == "chat gpt-4o-mini"
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "gpt-4o-mini"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 120
    assert chat.attributes["gen_ai.usage.output_tokens"] == 30
    assert chat.attributes["agent_ledger.usage.cost_usd"] == pytest.approx(0.0042)

    # the crash is visible: a recovery by worker 2; the person's decision, with who
    (recovery,) = named(run_spans, "recovery")
    assert recovery.attributes["agent_ledger.recovery.worker"] == "w-2"
    # the second crash left the email maybe sent: the recovery sent the run to a person
    (review,) = named(run_spans, "needs_review")
    assert review.attributes["agent_ledger.review.reason"] == "unknown_step"
    (decision,) = named(run_spans, "review")
    assert decision.name == "review sent"
    assert decision.attributes["agent_ledger.review.action"] == "sent"
    assert decision.attributes["agent_ledger.review.by"] == "alice"
    assert decision.attributes["agent_ledger.step.index"] == 3

    # the other run: a trace of its own, its span a root
    other = of_run(receiver.spans, story.other_run_id)
    assert {s.trace_id for s in other} == {f"{derived_trace_id(story.other_run_id):032x}"}
    (other_agent,) = named(other, "invoke_agent")
    assert other_agent.parent_span_id == ""
    assert [s.name for s in other if s is not other_agent] == ["chat"]

    # every span once, with the id its run and step give it
    assert not [i for i, n in Counter(receiver.span_ids()).items() if n > 1]
    assert by_index[1].span_id == f"{span_id_of(story.run_id, 'step', 1):016x}"


def test_no_argument_result_key_or_token_in_any_span_by_default(
    receiver: OtlpReceiver, story: Story
) -> None:
    export_pending()

    assert receiver.spans
    for span in receiver.spans:
        said = span.text()
        assert SECRET not in said, span
        assert not [key for key in story.keys if key in said], span
        assert not [name for name in span.attributes if "idempotency" in name]


def test_content_is_captured_only_when_asked_and_keys_never(
    receiver: OtlpReceiver, story: Story, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    export_pending()

    (chat,) = named(of_run(receiver.spans, story.run_id), "chat")
    assert SECRET in chat.attributes["gen_ai.input.messages"]
    assert SECRET in chat.attributes["gen_ai.output.messages"]
    for span in receiver.spans:
        assert not [key for key in story.keys if key in span.text()], span


def test_a_second_export_sends_nothing(receiver: OtlpReceiver, story: Story) -> None:
    first = export_pending()
    requests = receiver.requests

    again = export_pending()

    assert first.spans > 0
    assert (again.spans, again.batches) == (0, 0)
    assert receiver.requests == requests


def test_while_the_collector_is_down_nothing_is_lost_and_the_backlog_shows(
    receiver: OtlpReceiver,
    story: Story,
    client: Any,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.METRICS_TOKEN = "metrics-secret"
    receiver.refuse = True  # the collector answers 503 to everything

    down = export_pending()

    assert down.failed and down.spans == 0 and receiver.spans == []
    assert TraceCursor.objects.get().event_id == 0  # the cursor did not move
    assert client.get("/readyz").status_code == 200
    waiting = metric(client, "intentledger_trace_export_backlog_events")
    assert waiting > 0

    receiver.refuse = False
    up = export_pending()

    assert not up.failed and up.spans == len(receiver.spans) > 0
    assert Counter(receiver.span_ids()).most_common(1)[0][1] == 1
    assert len(named(of_run(receiver.spans, story.run_id), "execute_tool")) == 3
    assert metric(client, "intentledger_trace_export_backlog_events") == 0
    assert metric(client, "intentledger_trace_spans_exported_total") == len(receiver.spans)


def metric(client: Any, name: str) -> float:
    page = client.get("/metrics", HTTP_AUTHORIZATION="Bearer metrics-secret")
    assert page.status_code == 200, page.content
    for line in page.content.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not on /metrics")


def test_each_persons_decision_and_a_budget_stop_are_spans_of_the_runs_trace(
    receiver: OtlpReceiver,
    transactional_db: Any,
    api: APIClient,
    fake_clock: Any,
    make_policy: Any,
) -> None:
    journal = JournalClient(api)
    ApprovalRule.objects.create(agent="desk", tool_pattern="refund.*")
    desk = journal.create(agent="desk")["id"]
    epoch = journal.lease(desk).json()["epoch"]
    assert journal.intent(desk, epoch, 0, name="refund.issue").status_code == 202
    step_approve(run_id=desk, index=0, by="bob")
    assert journal.intent(desk, epoch, 0, name="refund.issue").json()["state"] == "intent"
    assert journal.outcome(desk, epoch, 0).status_code == 200
    assert (
        journal.intent(desk, epoch, 1, name="refund.issue", arguments={"n": 9}).status_code == 202
    )
    step_deny(run_id=desk, index=1, by="carol", note="too much")

    def unknown_step(agent: str) -> str:
        run_id = journal.create(agent=agent)["id"]
        epoch = journal.lease(run_id, worker="w-1").json()["epoch"]
        assert journal.intent(run_id, epoch, 0, enforced_by="nobody").status_code == 201
        fake_clock.advance(seconds=31)
        assert journal.lease(run_id, worker="w-2").status_code == 409  # needs_review
        return run_id

    retried = unknown_step("retrying")
    step_resolve(run_id=retried, index=0, action="retry", note="not sent", by="dave")
    abandoned = unknown_step("abandoning")
    step_resolve(run_id=abandoned, index=0, action="abandon", note="customer gone", by="erin")

    make_policy("tiny", max_steps=1)
    tiny = journal.create(agent="tiny")["id"]
    epoch = journal.lease(tiny).json()["epoch"]
    journal.write_step(tiny, epoch, 0)
    assert journal.intent(tiny, epoch, 1).json()["error"]["code"] == "budget_exceeded"

    export_pending()

    decisions = {
        (s.attributes["agent_ledger.run.id"], s.name, s.attributes["agent_ledger.review.by"])
        for s in named(receiver.spans, "review")
    }
    assert decisions == {
        (desk, "review approve", "bob"),
        (desk, "review deny", "carol"),
        (retried, "review retry", "dave"),
        (abandoned, "review abandon", "erin"),
    }
    (stop,) = named(receiver.spans, "budget_exceeded")
    assert stop.attributes["agent_ledger.run.id"] == tiny
    assert stop.attributes["agent_ledger.budget.limit"] == "steps"
    assert stop.status_code == 2
    # the abandoned run ended: its span, status ERROR, in the same trace as its decision
    (ended,) = [s for s in named(receiver.spans, "invoke_agent") if s.name.endswith("abandoning")]
    assert ended.status_code == 2
    assert {s.trace_id for s in of_run(receiver.spans, abandoned)} == {ended.trace_id}
    # "note" is a person's free text: content, left out by default
    assert not [s for s in receiver.spans if "too much" in s.text()]


@pytest.mark.pg_connections(3)
@pytest.mark.parametrize("lock_on", ["the default database", "DATABASE_LISTEN_URL"])
def test_beats_round_exports_and_skips_while_another_exporter_holds_the_lock(
    receiver: OtlpReceiver, story: Story, settings: Any, lock_on: str
) -> None:
    # behind a transaction pooler the lock's session is the direct connection's
    settings.DATABASE_LISTEN_URL = test_database_url() if lock_on == "DATABASE_LISTEN_URL" else ""
    with psycopg.connect(test_database_url()) as other_exporter:
        other_exporter.execute("SELECT pg_advisory_lock(%s)", [EXPORTER_LOCK])
        export_traces()  # beat's round while a foreground exporter runs
        assert receiver.requests == 0

    export_traces()

    assert len(named(of_run(receiver.spans, story.run_id), "execute_tool")) == 3


def test_a_write_found_done_at_recovery_is_one_execution_marked_reconciled(
    receiver: OtlpReceiver, transactional_db: Any, api: APIClient, fake_clock: Any, settings: Any
) -> None:
    """The email went out before the worker died; recovery found its key completed on the tool
    side and copied the result: it ran once, and its span says how the ledger knows."""
    settings.LEDGER_KEY_STATE_LOOKUP = "tests.runs.test_recovery_rules.key_state_for_test"
    run_id = run_with_open_intents(api, [("ledger.completed", "write", "ledger", "done")])
    fake_clock.advance(seconds=31)
    assert JournalClient(api).lease(run_id, worker="w-9").status_code == 200

    export_pending()

    (sent,) = named(of_run(receiver.spans, run_id), "execute_tool")
    assert sent.name == "execute_tool ledger.completed"
    assert sent.attributes["agent_ledger.step.reconciled"] is True
    assert sent.status_code == 0
