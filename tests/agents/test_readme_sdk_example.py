"""The README's SDK example is real code: run it against the ledger and check what it did."""

import re

import pytest

from runs.models import Run
from tests.agents.conftest import AgentDesk, effects_for
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Using the worker SDK") : text.index("<!-- section: sdk -->")]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "no python example in the SDK section"
    return match.group(1)


def test_readme_sdk_example_runs_once_even_when_run_twice(desk: AgentDesk) -> None:
    code = readme_example()
    assert len(code.strip().splitlines()) <= 22
    code = code.replace("http://ledger:8000", desk.url)
    exec(compile(code, "README.md", "exec"), {"token": desk.token})  # noqa: S102
    run = Run.objects.get(agent="support", external_id="ticket-42")
    assert run.status == "completed"
    assert effects_for(desk, "ada@example.com") == (1, 1, 1)

    # run again (an orchestrator retry): it attaches to the finished run and stops cleanly
    exec(compile(code, "README.md", "exec"), {"token": desk.token})  # noqa: S102
    assert Run.objects.filter(agent="support", external_id="ticket-42").count() == 1
    assert effects_for(desk, "ada@example.com") == (1, 1, 1)
