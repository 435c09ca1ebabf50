"""The README's integration examples are real code: each runs as written against the ledger."""

import re
from typing import Any

import pytest

from runs.models import Run
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def readme_example(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text[
        text.index("## Framework integrations") : text.index("<!-- section: integrations -->")
    ]
    part = section[section.index(heading) :]
    match = re.search(r"```python\n(.*?)```", part, re.S)
    assert match, f"no python example under {heading}"
    return match.group(1)


def run_example(heading: str, ledger_server: str, token: str) -> None:
    code = readme_example(heading)
    assert len(code.strip().splitlines()) <= 24
    code = code.replace("http://ledger:8000", ledger_server)
    exec(compile(code, "README.md", "exec"), {"token": token})  # noqa: S102


def test_pydantic_ai_example(ledger_server: str, worker_token: str, transactional_db: Any) -> None:
    run_example("### PydanticAI", ledger_server, worker_token)
    run = Run.objects.get(agent="refunds", external_id="order-A-1")
    assert run.status == "completed"
    steps = list(run.steps.order_by("index").values_list("kind", "name", "effect"))
    assert ("tool", "lookup", "read") in steps
    assert ("tool", "refund", "write") in steps
    assert steps[0][0] == "model" and steps[-1][0] == "model"
    assert run.steps.get(name="refund").enforced_by == "nobody"
