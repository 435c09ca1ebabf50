"""An agent with OpenTelemetry configured (intentledger[otel]) and the ledger's trace exporter end
up in one trace: the run's span is a child of the agent's span that was current when the run
was created, and the agent's own spans and the ledger's sit in the same trace. On HTTP (the
`traceparent` header) and in-process alike."""

from collections.abc import Iterator
from typing import Any

import pytest
from intentledger import Ledger
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runs.inprocess import InProcessTransport
from tests.traces.receiver import OtlpReceiver
from traces.exporter import export_pending

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=[pytest.param("http", marks=pytest.mark.slow), "inprocess"])
def ledger(
    request: pytest.FixtureRequest, transactional_db: Any, worker_token: str
) -> Iterator[Ledger]:
    if request.param == "http":
        url = request.getfixturevalue("ledger_server")
        opened = Ledger(url, worker_token, retries=2, backoff=0.05)
    else:
        opened = Ledger(transport=InProcessTransport(worker_token))
    yield opened
    opened.close()


def test_the_agents_spans_and_the_ledgers_are_one_trace(
    ledger: Ledger, receiver: OtlpReceiver
) -> None:
    agent_spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(agent_spans))
    tracer = provider.get_tracer("support-agent")

    with (
        tracer.start_as_current_span("handle ticket") as handling,
        ledger.run("support", {"ticket": 7}, worker="w-1") as run,
    ):
        with tracer.start_as_current_span("think"):
            run.tool("kb.lookup", {"q": "refund"}, effect="read", fn=lambda q: [q])
        run.output = {"ok": True}
    export_pending()

    (handle_ticket, think) = sorted(agent_spans.get_finished_spans(), key=lambda s: s.name)
    trace_id = f"{handling.get_span_context().trace_id:032x}"
    assert {s.trace_id for s in receiver.spans} == {trace_id}
    (agent,) = [s for s in receiver.spans if s.name == "invoke_agent support"]
    assert agent.parent_span_id == f"{handling.get_span_context().span_id:016x}"
    assert agent.attributes["agent_ledger.run.id"] == run.id
    (tool,) = [s for s in receiver.spans if s.name == "execute_tool kb.lookup"]
    assert tool.parent_span_id == agent.span_id
    assert think.context.trace_id == handle_ticket.context.trace_id == int(trace_id, 16)


def test_without_a_current_span_the_run_has_a_trace_of_its_own(
    ledger: Ledger, receiver: OtlpReceiver
) -> None:
    with ledger.run("support", {"ticket": 8}, worker="w-1") as run:
        run.output = {}
    export_pending()

    (agent,) = [s for s in receiver.spans if s.attributes["agent_ledger.run.id"] == run.id]
    assert agent.parent_span_id == ""
