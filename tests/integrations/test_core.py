"""What the integrations share, without a ledger: journalable values, tool effects, lazy imports."""

import subprocess
import sys
import threading
import time

import pytest
from intentledger.integrations import JournalError, _core, step_key
from intentledger.integrations._core import CallOrder, journalable, tool_effect

from tests.conftest import ROOT


def test_journalable_names_the_field_the_journal_cannot_store() -> None:
    assert journalable({"n": 1, "s": "x"}, what="arguments") == {"n": 1, "s": "x"}
    with pytest.raises(JournalError) as raised:
        journalable({"ok": 1, "when": object()}, what="arguments")
    assert raised.value.code == "validation_error"
    assert list(raised.value.details) == ["arguments.when"]
    with pytest.raises(JournalError):
        journalable({"x": float("nan")}, what="arguments")


def test_a_tool_is_a_write_enforced_by_nobody_unless_its_metadata_says_otherwise() -> None:
    assert tool_effect(None) == ("write", "nobody")
    assert tool_effect({"effect": "read"}) == ("read", None)
    assert tool_effect({"enforced_by": "tool"}) == ("write", "tool")
    with pytest.raises(ValueError):
        tool_effect({"effect": "maybe"})


def test_step_key_outside_a_write_tool_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        step_key()


def test_importing_the_sdk_and_integrations_package_imports_no_framework() -> None:
    code = (
        "import sys, intentledger, intentledger.integrations; "
        "print(sorted(m for m in ('pydantic_ai', 'pydantic', 'agents', 'langgraph', 'mcp', "
        "'httpx') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def run_calls(order: CallOrder, call_ids: list[str], *, start: list[str]) -> list[str]:
    """Start the calls in `start` order on threads; the order in which they got their turn."""
    turns: list[str] = []

    def call(call_id: str) -> None:
        order.wait_for(call_id)
        turns.append(call_id)
        time.sleep(0.01)
        order.done(call_id)

    order.expect(call_ids)
    threads = [threading.Thread(target=call, args=(call_id,)) for call_id in start]
    for thread in threads:
        thread.start()
        time.sleep(0.02)  # the later calls of the response start first
    for thread in threads:
        thread.join(timeout=10)
    return turns


def test_tool_calls_get_their_turn_in_the_order_the_model_asked() -> None:
    assert run_calls(CallOrder(), ["a", "b", "c"], start=["c", "b", "a"]) == ["a", "b", "c"]


def test_a_call_the_framework_never_starts_is_not_waited_for_forever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_core, "ORDER_WAIT_SECONDS", 0.2)
    # "a" needed an approval and never ran: "b" and "c" go ahead, in order, once it is given up
    assert run_calls(CallOrder(), ["a", "b", "c"], start=["c", "b"]) == ["b", "c"]
