"""What the integrations share, without a ledger: journalable values, tool effects, lazy imports."""

import subprocess
import sys

import pytest

from agentledger.integrations import JournalError, step_key
from agentledger.integrations._core import journalable, tool_effect
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
        "import sys, agentledger, agentledger.integrations; "
        "print(sorted(m for m in ('pydantic_ai', 'pydantic', 'agents', 'langgraph', 'mcp', "
        "'httpx') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
