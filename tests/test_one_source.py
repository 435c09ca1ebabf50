"""One source per rule: event types and status reasons are named by their enums, never by literals.

A search for `EventType.RUN_COMPLETED` must find every place that writes or reads a completed
run's event; a bare `"run_completed"` (or `f"run_{to}"`) hides from it. This test reads the
product's Python (not migrations, which are history) and names every literal that spells an
event type or a status reason outside `runs/vocabulary.py`, where the enums live.

Some values are also ordinary words of other vocabularies: `needs_review` is a run status and an
error code, `steps` and `cost_usd` are limit names and usage keys, `resolved` is a word. Those are
flagged only where the code compares or filters an event's `type` or a run's `status_reason`
with them; the unambiguous ones (`step_intent`, `lease_expired`, …) are flagged anywhere but as a
dict key (a count named after the events it counts).
"""

import ast
import re
from pathlib import Path

from runs.constants import RunStatus
from runs.vocabulary import BUDGET_LIMITS, EventType, StatusReason

ROOT = Path(__file__).resolve().parents[1]
# sdk/src/intentledger/ is the worker SDK: httpx-only, it speaks the HTTP contract (run statuses, error
# codes), never event types, and imports nothing of the server; it is searched all the same.
PRODUCT = (
    "runs",
    "tools",
    "dashboard",
    "review",
    "audit",
    "celery_agents",
    "support_agent",
    "sdk/src/intentledger",
    "config",
    "console",
)
VOCABULARY = Path("runs/vocabulary.py")

AMBIGUOUS = set(RunStatus.values) | set(BUDGET_LIMITS)
ALL_VALUES = {e.value for e in EventType} | {r.value for r in StatusReason if r.value}
ANYWHERE = {e.value for e in EventType if e.value not in AMBIGUOUS} | {
    r.value for r in StatusReason if "_" in r.value and r.value not in AMBIGUOUS
}
# names and keywords through which code compares or filters events' types and status reasons
EVENT_NAMES = {"type", "event_type", "status_reason", "why", "reason"}
EVENT_KEYWORDS = {"type", "type__in", "status_reason", "status_reason__in", "why"}
EVENT_PREFIX = re.compile(r"^(run|step|lease|approval)_$")


def _strings(node: ast.AST) -> list[ast.Constant]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [c for elt in node.elts for c in _strings(elt)]
    return []


def _names_an_event(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr in EVENT_NAMES
    if isinstance(node, ast.Name):
        return node.id in EVENT_NAMES
    return False


def literals_in(source: str, where: str) -> list[str]:
    """`where:line: value` for every event-type or status-reason literal in `source`."""
    tree = ast.parse(source)
    found: set[tuple[int, str]] = set()
    dict_keys = {
        id(k) for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys if k is not None
    }
    exported = {  # `__all__` names functions, such as runs.kernel.step_intent
        id(c)
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
        for c in _strings(n.value)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in ANYWHERE and id(node) not in dict_keys | exported:
                found.add((node.lineno, node.value))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_an_event(side) for side in sides):
                for side in sides:
                    found |= {(c.lineno, c.value) for c in _strings(side) if c.value in ALL_VALUES}
        elif isinstance(node, ast.Dict):  # {"type": …} or {"status_reason": …}
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in EVENT_KEYWORDS:
                    found |= {(c.lineno, c.value) for c in _strings(value) if c.value in ALL_VALUES}
        elif isinstance(node, ast.keyword) and node.arg in EVENT_KEYWORDS:
            found |= {(c.lineno, c.value) for c in _strings(node.value) if c.value in ALL_VALUES}
        elif isinstance(node, ast.JoinedStr):
            head = node.values[0] if node.values else None
            if isinstance(head, ast.Constant) and EVENT_PREFIX.match(str(head.value)):
                found.add((node.lineno, ast.unparse(node)))
    return [f"{where}:{line}: {value!r}" for line, value in sorted(found)]


def product_literals(root: Path) -> list[str]:
    found: list[str] = []
    for package in PRODUCT:
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            if "migrations" in relative.parts or relative == VOCABULARY:
                continue
            found += literals_in(path.read_text(encoding="utf-8"), str(relative))
    return found


def test_product_code_names_event_types_and_status_reasons_by_their_enums():
    assert product_literals(ROOT) == []


def test_every_folder_the_searches_walk_exists():
    """A folder that moved (agents/ became support_agent/, agentledger/ sdk/src/intentledger/)
    would leave the searches above walking nothing and passing."""
    missing = [package for package in (*PRODUCT, "demo") if not (ROOT / package).is_dir()]
    assert missing == []


def test_the_search_finds_a_planted_literal_of_each_kind(tmp_path):
    # a product tree with one literal of each kind planted in a module: each must be named (the
    # test above walks the real tree)
    planted = tmp_path / "review" / "planted.py"
    planted.parent.mkdir()
    planted.write_text(
        "def f(run, event, to):\n"
        "    a = event.type == 'lease_acquired'\n"
        "    b = run.status_reason in ('resolved', 'resumed')\n"
        "    c = event.type == 'needs_review'\n"
        "    d = f'run_{to}'\n"
        "    e = Event.objects.filter(type__in=['step_done'])\n"
        "    g = {'status_reason': 'recoveries'}\n"
        "    return a, b, c, d, e, g\n",
        encoding="utf-8",
    )
    assert [line for line in product_literals(tmp_path) if "planted" in line] == [
        "review/planted.py:2: 'lease_acquired'",
        "review/planted.py:3: 'resolved'",
        "review/planted.py:3: 'resumed'",
        "review/planted.py:4: 'needs_review'",
        "review/planted.py:5: \"f'run_{to}'\"",
        "review/planted.py:6: 'step_done'",
        "review/planted.py:7: 'recoveries'",
    ]


def test_a_count_named_after_its_events_and_a_run_status_are_not_event_literals():
    source = (
        "counts = {'reconciled': 3}\n"
        "waiting = run.status == 'needs_review'\n"
        "usage = {'cost_usd': '0.1'}\n"
    )
    assert literals_in(source, "x.py") == []


def test_a_tools_refusal_is_an_application_error_in_the_one_envelope():
    from runs.api_errors import ApplicationError, error_body
    from tools.idempotency import ToolError

    refusal = ToolError("ticket_closed", "Ticket 3 is closed.", details={"ticket_id": 3})

    assert isinstance(refusal, ApplicationError)
    assert refusal.status_code == 422
    assert refusal.body() == error_body("ticket_closed", "Ticket 3 is closed.", {"ticket_id": 3})
    assert refusal.body() == {
        "error": {
            "code": "ticket_closed",
            "message": "Ticket 3 is closed.",
            "details": {"ticket_id": 3},
        }
    }


def references_to_the_test_tree(source: str, where: str) -> list[str]:
    """`where:line: what` for every import of the `tests` package and every dotted module path
    into it spelled as a string (an `AGENT_HOOKS=tests.…` value, an `importlib` name)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if TEST_MODULE.match(node.value) else []
        else:
            continue
        found += [f"{where}:{node.lineno}: {n}" for n in names if n.split(".")[0] == "tests"]
    return found


TEST_MODULE = re.compile(r"^tests(\.\w+)+$")


def test_product_code_and_the_demo_do_not_reach_into_the_test_tree():
    """A product command (the demo story) once armed its crash points from tests/agent_hooks.py:
    a checkout without tests/ could not tell the story. The crash points live in support_agent/ now."""
    found = []
    for package in (*PRODUCT, "demo"):
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            found += references_to_the_test_tree(path.read_text(encoding="utf-8"), relative)
    assert found == []


def test_the_test_tree_search_finds_an_import_and_a_module_path():
    source = (
        "import tests.processes\n"
        "from tests.support_agent import fixtures\n"
        "HOOKS = {'AGENT_HOOKS': 'tests.agent_hooks'}\n"
        "WORDS = 'tests pass'\n"
    )
    assert references_to_the_test_tree(source, "x.py") == [
        "x.py:1: tests.processes",
        "x.py:2: tests.support_agent",
        "x.py:3: tests.agent_hooks",
    ]
