"""The span model of docs/traces.md, made from committed journal rows (events, their steps and
runs): which event ends which span, and what the span says. No network, no cursor.

An event is final once committed (the chain is append-only), and the events that end a span
each happen once: a step's `step_done` / `step_error` / `reconciled` (terminal states), a run's
final event, a person's decision, a recovering lease, a budget stop. So each span is made from
exactly one event and its ids (traces.context) never change. A replayed intent writes no event:
it is no span. Open intents, live runs: nothing yet; their spans come with the events that end
them.
"""

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as SpanEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from runs.constants import EventType, StatusReason, StepKind, StepState
from traces.context import derived_trace_id, span_id_of

SCOPE = InstrumentationScope("agent_ledger.journal")
# the GenAI operations a model step's arguments may name ("operation"); otherwise `chat`
MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "embeddings"})

RUN_ENDS = {
    EventType.RUN_COMPLETED: StatusCode.UNSET,
    EventType.RUN_FAILED: StatusCode.ERROR,
    EventType.RUN_ABANDONED: StatusCode.ERROR,
    EventType.RUN_CANCELLED: StatusCode.UNSET,
}
STEP_ENDS = frozenset({EventType.STEP_DONE, EventType.STEP_ERROR, EventType.RECONCILED})
# a person's decision on a step or a run, and the action docs/traces.md names it by
DECISIONS = {
    EventType.STEP_RESOLVED: None,  # the payload's action: sent, retry, abandon
    EventType.APPROVAL_GIVEN: "approve",
    EventType.STEP_DENIED: "deny",  # or "expire": nobody decided in time
    # a crash-looped run a person resumed from review (why "resumed"; a run resumed because its
    # last unknown step was resolved is that resolution's consequence, no decision of its own)
    EventType.RUN_RESUMED: "resume",
}


@dataclass(frozen=True)
class JournalEvent:
    id: int
    xact: int
    run_id: UUID
    journal_month: Any
    seq: int
    type: str
    payload: dict[str, Any]
    actor: str
    at: datetime


@dataclass(frozen=True)
class RunRow:
    id: UUID
    agent: str
    status: str
    created_at: datetime
    trace_id: str | None
    trace_parent_span_id: str | None
    used_tokens: int
    used_cost_usd: Decimal
    used_recoveries: int


@dataclass(frozen=True)
class StepRow:
    run_id: UUID
    index: int
    kind: str
    name: str
    effect: str
    enforced_by: str | None
    arguments: Any
    result: Any
    state: str
    epoch: int
    intent_at: datetime
    usage_input_tokens: int
    usage_output_tokens: int
    usage_cost_usd: Decimal


def content_captured() -> bool:
    """Arguments, results and notes in spans: only when asked, as the GenAI conventions say."""
    value = os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "")
    return value.strip().lower() == "true"


def needs_step(event: JournalEvent) -> bool:
    return event.type in STEP_ENDS


def _abandoned_in_review(event: JournalEvent) -> bool:
    """A person abandoned the run itself (a crash loop in review); a step's abandon is its
    `step_resolved` decision, and its run_abandoned names the step."""
    return event.actor.startswith("user:") and "index" not in event.payload


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


class SpanMaker:
    """Spans for a batch of events, with the runs and steps they name already read."""

    def __init__(
        self,
        *,
        resource: Resource,
        runs: dict[UUID, RunRow],
        steps: dict[tuple[UUID, int], StepRow],
        capture_content: bool,
    ) -> None:
        self.resource = resource
        self.runs = runs
        self.steps = steps
        self.capture_content = capture_content

    def spans(self, events: Iterable[JournalEvent]) -> list[ReadableSpan]:
        made: list[ReadableSpan] = []
        for event in events:
            run = self.runs.get(event.run_id)
            if run is None:  # purged since (retention): nothing left to say about it
                continue
            if event.type == EventType.RUN_ABANDONED and _abandoned_in_review(event):
                made.append(self._decision(event, run, "abandon"))
            span = self._span(event, run)
            if span is not None:
                made.append(span)
        return made

    # --- one event, one span at most (and a run abandoned in review, its decision too) --------

    def _span(self, event: JournalEvent, run: RunRow) -> ReadableSpan | None:
        kind = event.type
        if kind in RUN_ENDS:
            return self._run_span(event, run)
        if kind in STEP_ENDS:
            step = self.steps.get((event.run_id, int(event.payload["index"])))
            return None if step is None else self._step_span(event, run, step)
        if kind in DECISIONS and event.actor.startswith("user:"):
            action = DECISIONS[EventType(kind)]
            if kind == EventType.STEP_RESOLVED:
                action = str(event.payload.get("action"))
            elif kind == EventType.STEP_DENIED and event.payload.get("expired"):
                return None  # nobody decided: no person's decision
            elif kind == EventType.RUN_RESUMED and event.payload.get("why") != StatusReason.RESUMED:
                return None
            return self._decision(event, run, action or "")
        if kind == EventType.LEASE_ACQUIRED and event.payload.get("recovery") is True:
            return self._recovery(event, run)
        if kind == EventType.BUDGET_EXCEEDED:
            return self._budget_stop(event, run)
        if kind == EventType.LEASE_EXPIRED:  # the reaper found the holder gone: a crash
            return self._mark(event, run, "lease_expired", {})
        if kind == EventType.NEEDS_REVIEW:  # a person must decide before the run goes on
            reason = str(event.payload.get("reason") or "")
            return self._mark(event, run, "needs_review", {"agent_ledger.review.reason": reason})
        return None

    def _mark(
        self,
        event: JournalEvent,
        run: RunRow,
        name: str,
        attributes: dict[str, Any],
        status: Status | None = None,
    ) -> ReadableSpan:
        """A moment of the run's story (one event), as a span without duration under the run's
        span: a recovery, a decision, a stop."""
        return self._made(
            name,
            run=run,
            span_id=span_id_of(run.id, "event", event.seq),
            parent=self._run_context(run),
            start=event.at,
            end=event.at,
            attributes=attributes,
            status=status,
        )

    def _context(self, run: RunRow, span_id: int) -> SpanContext:
        trace_id = int(run.trace_id, 16) if run.trace_id else derived_trace_id(run.id)
        return SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(1))

    def _run_context(self, run: RunRow) -> SpanContext:
        return self._context(run, span_id_of(run.id, "run"))

    def _made(
        self,
        name: str,
        *,
        run: RunRow,
        span_id: int,
        parent: SpanContext | None,
        start: datetime,
        end: datetime,
        attributes: dict[str, Any],
        kind: SpanKind = SpanKind.INTERNAL,
        status: Status | None = None,
        events: tuple[SpanEvent, ...] = (),
    ) -> ReadableSpan:
        return ReadableSpan(
            name=name,
            context=self._context(run, span_id),
            parent=parent,
            resource=self.resource,
            attributes={"agent_ledger.run.id": str(run.id), **attributes},
            events=events,
            kind=kind,
            status=status or Status(StatusCode.UNSET),
            start_time=_ns(start),
            end_time=_ns(max(start, end)),
            instrumentation_scope=SCOPE,
        )

    def _run_span(self, event: JournalEvent, run: RunRow) -> ReadableSpan:
        parent = None
        if run.trace_id and run.trace_parent_span_id:
            parent = SpanContext(
                int(run.trace_id, 16),
                int(run.trace_parent_span_id, 16),
                is_remote=True,
                trace_flags=TraceFlags(1),
            )
        code = RUN_ENDS[EventType(event.type)]
        return self._made(
            f"invoke_agent {run.agent}",
            run=run,
            span_id=span_id_of(run.id, "run"),
            parent=parent,
            start=run.created_at,
            end=event.at,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": run.agent,
                "agent_ledger.run.status": event.type.removeprefix("run_"),
                "agent_ledger.usage.tokens": run.used_tokens,
                "agent_ledger.usage.cost_usd": float(run.used_cost_usd),
                "agent_ledger.run.recoveries": run.used_recoveries,
            },
            status=Status(code, event.type if code is StatusCode.ERROR else None),
        )

    def _step_span(self, event: JournalEvent, run: RunRow, step: StepRow) -> ReadableSpan:
        attributes: dict[str, Any] = {
            "agent_ledger.step.index": step.index,
            "agent_ledger.lease.epoch": step.epoch,
            "agent_ledger.step.effect": step.effect,
        }
        if step.enforced_by:
            attributes["agent_ledger.step.enforced_by"] = step.enforced_by
        if event.type == EventType.RECONCILED:
            # the tool ran before a crash; its outcome came from the tool side at recovery
            attributes["agent_ledger.step.reconciled"] = True
        if step.usage_cost_usd:
            attributes["agent_ledger.usage.cost_usd"] = float(step.usage_cost_usd)
        arguments = step.arguments if isinstance(step.arguments, dict) else {}
        if step.kind == StepKind.MODEL:
            operation = arguments.get("operation")
            operation = operation if operation in MODEL_OPERATIONS else "chat"
            model = arguments.get("model")
            name = f"{operation} {model}" if isinstance(model, str) and model else operation
            attributes["gen_ai.operation.name"] = operation
            if isinstance(model, str) and model:
                attributes["gen_ai.request.model"] = model
            if isinstance(arguments.get("provider"), str):
                attributes["gen_ai.provider.name"] = arguments["provider"]
            attributes["gen_ai.usage.input_tokens"] = step.usage_input_tokens
            attributes["gen_ai.usage.output_tokens"] = step.usage_output_tokens
            if self.capture_content:
                attributes["gen_ai.input.messages"] = _json(arguments.get("messages", arguments))
                attributes["gen_ai.output.messages"] = _json(step.result)
            kind = SpanKind.CLIENT
        else:
            name = f"execute_tool {step.name}"
            attributes["gen_ai.operation.name"] = "execute_tool"
            attributes["gen_ai.tool.name"] = step.name
            attributes["gen_ai.tool.type"] = "function"
            if step.usage_input_tokens or step.usage_output_tokens:
                attributes["gen_ai.usage.input_tokens"] = step.usage_input_tokens
                attributes["gen_ai.usage.output_tokens"] = step.usage_output_tokens
            if self.capture_content:
                attributes["gen_ai.tool.call.arguments"] = _json(step.arguments)
                attributes["gen_ai.tool.call.result"] = _json(step.result)
            kind = SpanKind.INTERNAL
        failed = event.type == EventType.STEP_ERROR or step.state == StepState.ERROR
        return self._made(
            name,
            run=run,
            span_id=span_id_of(run.id, "step", step.index),
            parent=self._run_context(run),
            start=step.intent_at,
            end=event.at,
            attributes=attributes,
            kind=kind,
            status=Status(StatusCode.ERROR, "step_error") if failed else None,
        )

    def _decision(self, event: JournalEvent, run: RunRow, action: str) -> ReadableSpan:
        by = event.payload.get("by") or event.actor.removeprefix("user:")
        if isinstance(by, list):  # step_approved names everyone; approval_given one person
            by = ",".join(str(b) for b in by)
        attributes: dict[str, Any] = {
            "agent_ledger.review.action": action,
            "agent_ledger.review.by": str(by),
        }
        if "index" in event.payload:
            attributes["agent_ledger.step.index"] = int(event.payload["index"])
        if self.capture_content and event.payload.get("note"):
            attributes["agent_ledger.review.note"] = str(event.payload["note"])
        return self._mark(event, run, f"review {action}", attributes)

    def _recovery(self, event: JournalEvent, run: RunRow) -> ReadableSpan:
        payload = event.payload
        return self._mark(
            event,
            run,
            "recovery",
            {
                "agent_ledger.lease.epoch": int(payload.get("epoch") or 0),
                "agent_ledger.recovery.worker": str(payload.get("worker") or ""),
                "agent_ledger.recovery.replayable_steps": int(payload.get("replayable_steps") or 0),
            },
        )

    def _budget_stop(self, event: JournalEvent, run: RunRow) -> ReadableSpan:
        return self._mark(
            event,
            run,
            "budget_exceeded",
            {"agent_ledger.budget.limit": str(event.payload.get("limit") or "")},
            Status(StatusCode.ERROR, "budget_exceeded"),
        )
