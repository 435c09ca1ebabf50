"""PydanticAI specifics: values the journal cannot store, tool retries (the shared kill and
review tests for every framework are in test_frameworks.py)."""

from typing import Annotated, Any

import pytest

from runs.models import Run as RunRow
from tests.integrations.conftest import Crash

pytestmark = pytest.mark.slow


class Opaque:
    """A value a tool may validate its argument into, that no journal can store."""

    def __init__(self, value: Any) -> None:
        self.value = value


def test_an_argument_the_journal_cannot_store_fails_the_step_before_any_effect(
    ledger_server: str, worker_token: str, transactional_db: Any
) -> None:
    from intentledger import Ledger
    from intentledger.integrations import JournalError
    from intentledger.integrations.pydantic_ai import LedgerDurability
    from pydantic import AfterValidator
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

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


def test_a_tool_that_asked_for_a_retry_replays_the_retry_after_a_crash(
    ledger_server: str, worker_token: str, transactional_db: Any
) -> None:
    from intentledger import Ledger, Run, StepInfo
    from intentledger.integrations.pydantic_ai import LedgerDurability
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

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


def test_a_read_tool_that_asks_for_a_retry_is_a_recorded_error_step_then_found(
    ledger_server: str, worker_token: str, transactional_db: Any
) -> None:
    from intentledger import Ledger
    from intentledger.integrations.pydantic_ai import LedgerDurability
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def scripted(messages: list[Any], info: Any) -> ModelResponse:
        turn = sum(1 for m in messages if m.kind == "response")
        if turn < 2:  # the first ticket is refused with a retry, the second is found
            return ModelResponse(parts=[ToolCallPart("find", {"ticket": f"T-{turn + 1}"})])
        return ModelResponse(parts=[TextPart("Found.")])

    agent = Agent(FunctionModel(scripted))
    lookups: list[str] = []

    @agent.tool_plain(metadata={"effect": "read"})
    def find(ticket: str) -> dict[str, str]:
        lookups.append(ticket)
        if ticket == "T-1":
            raise ModelRetry("no T-1, try T-2")
        return {"ticket": ticket}

    with (
        Ledger(ledger_server, worker_token, retries=1) as ledger,
        ledger.run("pai-read", {}, worker="w-read") as run,
    ):
        result = agent.run_sync("find", capabilities=[LedgerDurability(run)])
        run.output = result.output

    assert result.output == "Found."
    assert lookups == ["T-1", "T-2"]  # each ran once
    steps = list(
        RunRow.objects.get(pk=run.id)
        .steps.order_by("index")
        .values_list("name", "effect", "state", "result")
    )
    assert [step[:3] for step in steps] == [
        ("model:function:scripted:", "read", "done"),
        ("find", "read", "error"),
        ("model:function:scripted:", "read", "done"),
        ("find", "read", "done"),
        ("model:function:scripted:", "read", "done"),
    ]
    assert steps[1][3] is not None and steps[1][3]["error"] == "ToolRetryError"
    assert steps[3][3] == {"ticket": "T-2"}
