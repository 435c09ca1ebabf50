"""Every example in the README and the manual in docs/ is executed by a test.

The rule: every ```python block is taken by a test module with `doc_example(doc, heading)`
(tests/doc_examples.py), which records it; this test imports each module that calls it and fails
on a python block none took. In a shell block (bash, sh, shell, console or none), each command of
ours — `scripts/NAME`, `[python] manage.py NAME`, `python -m M` for a package M of this
repository, `intentledger …` — must be an entry point whose `--help` tests/demo/test_demo.py runs
(`documented_commands`). Other programs (curl, podman, pip, gunicorn, celery, the `.env` recipe)
and json/yaml/ini bodies are not entry points of ours: the API's bodies are docs/api.md's, held
to the served schema by tests/test_docs_contract.py.
"""

import importlib
import shutil
from pathlib import Path

from tests.doc_examples import (
    EXECUTED,
    ROOT,
    Block,
    doc_blocks,
    doc_pages,
    documented_commands,
    shell_commands,
)


def _take_every_example() -> None:
    """Import every test module that takes a doc example: each records what it runs."""
    for source in sorted((ROOT / "tests").rglob("test_*.py")):
        if source != Path(__file__) and "doc_example(" in source.read_text(encoding="utf-8"):
            importlib.import_module(".".join(source.relative_to(ROOT).with_suffix("").parts))


def unexecuted_python_blocks(root: Path = ROOT) -> list[Block]:
    _take_every_example()
    return [
        block
        for page in doc_pages(root)
        for block in doc_blocks(page, root)
        if block.lang == "python" and (block.doc, block.line) not in EXECUTED
    ]


def commands_without_help_test(root: Path = ROOT) -> dict[str, list[str]]:
    helped = documented_commands(root)
    return {name: where for name, where in shell_commands(root).items() if name not in helped}


def test_every_python_example_is_executed_by_a_test() -> None:
    missing = [block.where for block in unexecuted_python_blocks()]
    assert not missing, f"python examples no test runs (take them with doc_example): {missing}"
    assert ("README.md", doc_example_line("README.md", "## Using the worker SDK")) in EXECUTED


def doc_example_line(doc: str, heading: str) -> int:
    blocks = doc_blocks(ROOT / doc)
    return next(b.line for b in blocks if b.lang == "python" and b.heading.startswith(heading))


def test_every_command_of_ours_in_a_shell_example_answers_help_in_a_test() -> None:
    commands = shell_commands()
    # the reader sees at least these, and each is an entry point the --help test runs
    assert {"scripts/demo", "scripts/test", "manage.py migrate", "python -m bench"} <= set(commands)
    missing = commands_without_help_test()
    assert not missing, f"commands in shell examples whose entry point no test runs: {missing}"


def _copy_of_the_docs(tmp_path: Path) -> Path:
    """The README and docs/ in a folder of their own (the code they name stays this checkout's)."""
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path


def test_a_new_python_example_no_test_runs_fails_the_check(tmp_path: Path) -> None:
    root = _copy_of_the_docs(tmp_path)
    assert unexecuted_python_blocks(root) == []  # the copy's examples are the ones tests take
    page = root / "docs" / "tools.md"
    page.write_text(page.read_text() + "\n## Another tool\n\n```python\nprint('untested')\n```\n")

    (new,) = unexecuted_python_blocks(root)
    assert (new.doc, new.heading, new.code) == (
        "docs/tools.md",
        "## Another tool",
        "print('untested')\n",
    )


def test_a_shell_example_naming_a_command_we_do_not_have_fails_the_check(tmp_path: Path) -> None:
    root = _copy_of_the_docs(tmp_path)
    assert commands_without_help_test(root) == {}
    page = root / "docs" / "operations.md"
    page.write_text(
        page.read_text()
        + "\n```bash\nscripts/rebuild --all      # not in scripts/\n"
        + "curl -sS http://ledger/healthz  # not ours: not checked\n```\n"
    )

    assert list(commands_without_help_test(root)) == ["scripts/rebuild"]
