"""docs/settings.md, the table of every environment variable, agrees with what the code reads.

The code's reads are found in the source with `ast`: `os.environ.get("X")`, `os.environ["X"]`,
`os.getenv("X")`, `os.environ.setdefault("X", …)`, `"X" in os.environ`, and calls of a helper
that hands its first argument to one of those (`env_int("X", 5)` in config/settings.py). A read
whose name is not a literal, outside such a helper, is an error of its own: the table could not be
checked against it. The demo's shell scripts are read for `${X:-…}` and `${X:?…}`.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SETTINGS_DOC = ROOT / "docs" / "settings.md"
# the product: every process the server, its workers and the demo run, and the SDK
PYTHON_SOURCES = (
    "config",
    "runs",
    "tools",
    "dashboard",
    "review",
    "audit",
    "console",
    "celery_agents",
    "support_agent",
    "demo",
    "traces",
    "sdk/src/intentledger",
    "manage.py",
)
SHELL_SOURCES = ("scripts/demo", "scripts/_env.sh")
SHELL_READ = re.compile(r"\$\{([A-Z][A-Z0-9_]*):[-?]")
# "| `DATABASE_URL` | default | what it changes |": one variable a row
TABLE_ROW = re.compile(r"^\|\s*`([A-Z][A-Z0-9_]*)`\s*\|", re.M)


def _is_os_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _read_name(node: ast.AST) -> ast.expr | None:
    """The expression naming the variable when `node` reads one from os.environ, else None."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
        func = node.func
        environ_call = func.attr in ("get", "setdefault") and _is_os_environ(func.value)
        getenv = (
            func.attr == "getenv" and isinstance(func.value, ast.Name) and func.value.id == "os"
        )
        if environ_call or getenv:
            return node.args[0]
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Load)
        and _is_os_environ(node.value)
    ):
        return node.slice
    if (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.In | ast.NotIn)
        and _is_os_environ(node.comparators[0])
    ):
        return node.left
    return None


def _helpers(tree: ast.Module) -> dict[str, str]:
    """Functions of the module that read the variable their first parameter names."""
    found = {}
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef) and func.args.args:
            first = func.args.args[0].arg
            for node in ast.walk(func):
                name = _read_name(node)
                if isinstance(name, ast.Name) and name.id == first:
                    found[func.name] = first
    return found


def environment_reads(source: str, where: str) -> tuple[set[str], list[str]]:
    """(the variables `source` reads, the reads whose name is not a literal)."""
    tree = ast.parse(source)
    helpers = _helpers(tree)
    inside_helpers = {
        id(node)
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef) and func.name in helpers
        for node in ast.walk(func)
    }
    names: set[str] = set()
    unnamed: list[str] = []
    for node in ast.walk(tree):
        name = _read_name(node)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in helpers
            and node.args
        ):
            name = node.args[0]
        if name is None or not isinstance(node, ast.expr):  # a read is a call, item or `in`
            continue
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            names.add(name.value)
        elif id(node) not in inside_helpers:
            unnamed.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return names, unnamed


def product_reads() -> tuple[dict[str, list[str]], list[str]]:
    """{variable: the files that read it}, and every read the table cannot be checked against."""
    files = []
    for source in PYTHON_SOURCES:
        path = ROOT / source
        assert path.exists(), f"{source} is gone: the list above is out of date"
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    readers: dict[str, list[str]] = {}
    unnamed: list[str] = []
    for path in files:
        where = str(path.relative_to(ROOT))
        names, loose = environment_reads(path.read_text(encoding="utf-8"), where)
        unnamed += loose
        for name in names:
            readers.setdefault(name, []).append(where)
    for source in SHELL_SOURCES:
        for name in SHELL_READ.findall((ROOT / source).read_text(encoding="utf-8")):
            readers.setdefault(name, []).append(source)
    return readers, unnamed


def documented() -> list[str]:
    assert SETTINGS_DOC.is_file(), "docs/settings.md, the table of settings, is missing"
    return TABLE_ROW.findall(SETTINGS_DOC.read_text(encoding="utf-8"))


def test_every_variable_the_product_reads_is_in_the_table() -> None:
    readers, _ = product_reads()
    assert {"DATABASE_URL", "SECRET_KEY", "INTENTLEDGER_TOKEN", "AGENT_CRASH_AFTER_STEP"} <= set(
        readers
    )
    missing = {name: where for name, where in readers.items() if name not in documented()}
    assert missing == {}, f"read by the code, missing from docs/settings.md: {missing}"


def test_every_variable_in_the_table_is_read_and_listed_once() -> None:
    readers, _ = product_reads()
    rows = documented()
    assert len(rows) > 50
    assert sorted(name for name in set(rows) if rows.count(name) > 1) == []
    assert sorted(set(rows) - set(readers)) == [], "documented, but nothing reads them"


def test_every_read_names_its_variable_with_a_literal() -> None:
    _, unnamed = product_reads()
    assert unnamed == []


def test_the_search_finds_each_form_of_read() -> None:
    source = (
        "import os\n"
        "def env_flag(name, default):\n"
        "    return os.environ.get(name, default)\n"
        "a = os.environ.get('A_GET', '1')\n"
        "b = os.environ['B_ITEM']\n"
        "c = os.getenv('C_GETENV')\n"
        "os.environ.setdefault('D_SETDEFAULT', 'x')\n"
        "e = 'E_IN' in os.environ\n"
        "f = env_flag('F_HELPER', False)\n"
        "os.environ['G_WRITTEN'] = '1'\n"
        "h = os.environ.get(some_name)\n"
        "env = {**os.environ, 'I_PASSED_ON': '1'}\n"
    )
    names, unnamed = environment_reads(source, "x.py")
    assert names == {"A_GET", "B_ITEM", "C_GETENV", "D_SETDEFAULT", "E_IN", "F_HELPER"}
    assert unnamed == ["x.py:11: os.environ.get(some_name)"]
    assert SHELL_READ.findall('port="${DEMO_PORT:-8000}" "${X:?}" "$VENV" ${Y}') == [
        "DEMO_PORT",
        "X",
    ]
