"""PydanticAI under the ledger, with real processes: SIGKILLed after and inside a write tool."""

from typing import Annotated, Any

import pytest

from runs.models import Run as RunRow
from runs.services import step_resolve
from tests.integrations._agent_kit import NEEDS_REVIEW_EXIT
from tests.integrations.conftest import SIGKILLED, Desk, policy_for

pytestmark = pytest.mark.slow

AGENT = "pai-support"
SCRIPT = "pydantic_ai_agent"
STEPS = 5  # model, lookup (read), model, append (write), model
TOKENS = 3 * 110


@pytest.fixture(autouse=True)
def policy(desk: Desk) -> Any:
    return policy_for(AGENT)


def test_clean_run_journals_every_model_response_and_tool_call(desk: Desk) -> None:
    run = desk.new_run(AGENT)
    result = run.start(SCRIPT)
    assert result.returncode == 0, result.stderr
    assert result.summary["output"] == "Refunded."
    row = run.row
    assert row.status == "completed"
    steps = list(row.steps.order_by("index").values_list("kind", "name", "effect", "state"))
    assert steps == [
        ("model", "model:function:scripted:", "read", "done"),
        ("tool", "lookup", "read", "done"),
        ("model", "model:function:scripted:", "read", "done"),
        ("tool", "append", "write", "done"),
        ("model", "model:function:scripted:", "read", "done"),
    ]
    assert run.step("append").enforced_by == "nobody"
    assert run.effects == ["refund T-1"]
    assert run.model_calls == 3
    assert row.used_tokens == TOKENS


def test_agent_killed_after_the_write_tool_resumes_with_one_effect_and_no_model_recall(
    desk: Desk,
) -> None:
    run = desk.new_run(AGENT)
    killed = run.start(SCRIPT, CRASH_AFTER="append", SYSTEM_PROMPT="Today is Monday.")
    assert killed.returncode == SIGKILLED, killed.stderr
    assert run.row.step_count == 4
    assert run.effects == ["refund T-1"]
    assert run.model_calls == 2

    resumed = run.start(SCRIPT, SYSTEM_PROMPT="Today is Tuesday.")  # not part of the digest
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.summary["replayed"] == 4 and resumed.summary["executed"] == 1
    row = run.row
    assert row.status == "completed" and row.output == "Refunded."
    assert run.effects == ["refund T-1"]  # exactly one effect
    assert run.model_calls == 3  # the two recorded responses were not asked for again
    assert row.used_tokens == TOKENS  # tokens counted once
    assert row.used_steps == STEPS
    assert not row.steps.filter(executions__gt=1).exists()


def test_kill_inside_an_unenforced_write_goes_to_review_and_sent_resumes_it(desk: Desk) -> None:
    run = desk.new_run(AGENT)
    killed = run.start(SCRIPT, CRASH_INSIDE="append")
    assert killed.returncode == SIGKILLED, killed.stderr
    assert run.effects == ["refund T-1"]
    assert run.step("append").state == "intent"

    held = run.start(SCRIPT)
    assert held.returncode == NEEDS_REVIEW_EXIT, held.stderr
    row = run.row
    assert row.status == "needs_review"
    assert run.step("append").state == "unknown"

    step_resolve(
        run_id=row.pk, index=run.step("append").index, action="sent", note="in the file", by="sup"
    )
    resumed = run.start(SCRIPT)
    assert resumed.returncode == 0, resumed.stderr
    assert run.row.status == "completed"
    assert run.effects == ["refund T-1"]  # the supervisor's "sent" was not a second effect
    assert run.model_calls == 3
    assert run.row.used_tokens == TOKENS


def test_kill_inside_a_key_honouring_tool_re_executes_it_under_the_same_key(desk: Desk) -> None:
    run = desk.new_run(AGENT)
    killed = run.start(SCRIPT, CRASH_INSIDE="append", APPEND_ENFORCED_BY="tool")
    assert killed.returncode == SIGKILLED, killed.stderr
    resumed = run.start(SCRIPT, APPEND_ENFORCED_BY="tool")
    assert resumed.returncode == 0, resumed.stderr
    step = run.step("append")
    assert step.enforced_by == "tool" and step.executions == 2
    assert run.effects == [f"refund T-1 {step.idempotency_key}"]  # the tool refused the repeat
    assert run.row.status == "completed"


class Opaque:
    """A value a tool may validate its argument into, that no journal can store."""

    def __init__(self, value: Any) -> None:
        self.value = value


def test_an_argument_the_journal_cannot_store_fails_the_step_before_any_effect(
    ledger_server: str, worker_token: str, transactional_db: Any
) -> None:
    from pydantic import AfterValidator
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from agentledger import Ledger
    from agentledger.integrations import JournalError
    from agentledger.integrations.pydantic_ai import LedgerDurability

    shipped: list[Any] = []
    agent = Agent(
        FunctionModel(lambda _m, _i: ModelResponse(parts=[ToolCallPart("ship", {"to": "x"})]))
    )

    @agent.tool_plain
    def ship(to: Annotated[str, AfterValidator(Opaque)]) -> str:
        shipped.append(to)
        return "shipped"

    with Ledger(ledger_server, worker_token, retries=1) as ledger:
        run = ledger.run("pai-bad-input", {}, worker="w-bad")
        with pytest.raises(JournalError) as raised, run:
            agent.run_sync("ship it", capabilities=[LedgerDurability(run)])

    assert raised.value.code == "validation_error"
    assert "arguments.to" in raised.value.details
    assert shipped == []  # before any effect
    row = RunRow.objects.get(pk=run.id)
    assert row.status == "failed" and "arguments.to" in (row.error or {})["message"]
    assert list(row.steps.values_list("name", flat=True)) == ["model:function:<lambda>:"]


class Crash(BaseException):
    """What SIGKILL would be, in process: nothing after it runs (not even `except Exception`)."""


def test_a_tool_that_asked_for_a_retry_replays_the_retry_after_a_crash(
    ledger_server: str, worker_token: str, transactional_db: Any
) -> None:
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from agentledger import Ledger, Run, StepInfo
    from agentledger.integrations.pydantic_ai import LedgerDurability

    model_calls: list[int] = []
    attempts: list[str] = []

    def scripted(messages: list[Any], info: Any) -> ModelResponse:
        model_calls.append(1)
        turn = sum(1 for m in messages if m.kind == "response")
        if turn < 2:  # the first seat is refused with a retry, the second is booked
            return ModelResponse(parts=[ToolCallPart("book", {"seat": f"{turn + 1}A"})])
        return ModelResponse(parts=[TextPart("Booked.")])

    agent = Agent(FunctionModel(scripted))

    @agent.tool_plain
    def book(seat: str) -> str:
        attempts.append(seat)
        if seat == "1A":
            raise ModelRetry("1A is taken, pick another seat")
        return f"booked {seat}"

    def crash_after_booking(_run: Run, step: StepInfo) -> None:
        if step.name == "book" and step.state == "done" and not step.replayed:
            raise Crash

    with Ledger(ledger_server, worker_token, retries=1) as ledger:
        first = ledger.run("pai-retry", {}, external_id="r-1", worker="w-retry")
        first.on_step = crash_after_booking
        first.__enter__()
        with pytest.raises(BaseException) as crashed:
            agent.run_sync("book", capabilities=[LedgerDurability(first)])
        assert "Crash" in repr(crashed.value)
        first._heartbeat_stop.set()  # the process is gone: no complete, no heartbeat

        with ledger.run("pai-retry", {}, external_id="r-1", worker="w-retry") as again:
            result = agent.run_sync("book", capabilities=[LedgerDurability(again)])
            again.output = result.output

    assert result.output == "Booked."
    assert again.replayed == 4 and again.executed == 1  # the retry replayed as a retry
    assert attempts == ["1A", "2A"] and len(model_calls) == 3
    steps = list(
        RunRow.objects.get(pk=again.id).steps.order_by("index").values_list("name", "state")
    )
    assert steps == [
        ("model:function:scripted:", "done"),
        ("book", "error"),
        ("model:function:scripted:", "done"),
        ("book", "done"),
        ("model:function:scripted:", "done"),
    ]
