"""The code blocks of the README and the manual in docs/, for the tests that run them.

A test module takes the block it executes with `doc_example(doc, heading)` (at import, as a
module constant), which records it in EXECUTED; tests/test_docs_examples.py imports every module
that calls it and fails on a python block nobody took. Shell blocks are read by
`our_command` (which lines are entry points of this repository) and `documented_commands` (the
argv of each entry point's `--help`, which tests/demo/test_demo.py runs).
"""

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHELL_LANGS = frozenset({"bash", "sh", "shell", "console", ""})
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
HEADING = re.compile(r"^#{1,6} \S")


@dataclass(frozen=True)
class Block:
    doc: str  # the page's path from the repository root, e.g. "docs/tools.md"
    heading: str  # the nearest heading above the block, with its #s
    lang: str
    line: int  # of the opening fence, 1-based
    code: str

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line} ({self.lang or 'no language'}, under {self.heading!r})"


EXECUTED: set[tuple[str, int]] = set()  # (doc, line) of every block a test module took


def doc_pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def doc_blocks(page: Path, root: Path = ROOT) -> list[Block]:
    """Every fenced block of a page, in order, each with the heading it sits under."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    heading = ""
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            if HEADING.match(lines[i]):
                heading = lines[i].strip()
            i += 1
            continue
        indent, fence, start = len(opening["indent"]), opening["fence"], i + 1
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            kept = lines[i][:indent]
            body.append(lines[i][indent:] if not kept.strip() else lines[i].lstrip())
            i += 1
        code = "\n".join(body) + "\n"
        doc = str(page.relative_to(root))
        blocks.append(Block(doc, heading, opening["lang"].lower(), start, code))
        i += 1
    return blocks


def doc_example(doc: str, heading: str, *, lang: str = "python", index: int = 0) -> Block:
    """The `index`-th `lang` block under the heading that starts with `heading` (e.g. "## LangGraph"
    for "## LangGraph (`pip install …`)"); recorded as executed, so call it only to run it."""
    blocks = [b for b in doc_blocks(ROOT / doc) if b.lang == lang]
    headings = {b.heading for b in blocks if b.heading.startswith(heading)}
    assert len(headings) == 1, f"{doc}: {len(headings)} headings start with {heading!r}"
    under = [b for b in blocks if b.heading in headings]
    assert index < len(under), f"{doc}: no {lang} block {index} under {heading!r}"
    EXECUTED.add((doc, under[index].line))
    return under[index]


# --- shell: the project's own commands ----------------------------------------------------------

_ASSIGNMENT = re.compile(r"^(?:export\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)+")


def our_command(segment: str) -> str | None:
    """The entry point of ours a shell command starts with, or None: `scripts/NAME`,
    `[python] manage.py NAME`, `python -m M` for a package M of this repository, `intentledger`.
    Leading `VAR=value`s and a `.venv/bin/` are skipped; other programs are not ours."""
    words = _ASSIGNMENT.sub("", segment.strip().removeprefix("$ ")).split()
    if not words:
        return None
    program = words[0].removeprefix(".venv/bin/").removeprefix("./")
    if program.startswith("scripts/"):
        return program
    if program == "intentledger":
        return "intentledger"
    if re.fullmatch(r"python[\d.]*", program):
        words = words[1:]
        if len(words) >= 2 and words[0] == "-m":
            package = words[1].split(".")[0]
            return f"python -m {words[1]}" if (ROOT / package).is_dir() else None
        program = words[0] if words else ""
    if program.endswith("manage.py") and len(words) >= 2:
        return f"manage.py {words[1]}"
    return None


def shell_commands(root: Path = ROOT) -> dict[str, list[str]]:
    """Each command of ours in a shell block of the README or docs/, with where it is written."""
    found: dict[str, list[str]] = {}
    for page in doc_pages(root):
        for block in doc_blocks(page, root):
            if block.lang not in SHELL_LANGS:
                continue
            for line in block.code.splitlines():
                for segment in re.split(r"&&|\|\||;|\|", line.split(" #", 1)[0]):
                    command = our_command(segment)
                    places = found.setdefault(command, []) if command else []
                    if command and block.where not in places:
                        places.append(block.where)
    return found


def documented_commands(root: Path = ROOT) -> dict[str, list[str]]:
    """The `--help` argv of every command of ours the README and docs/ name: in shell blocks,
    inline (`scripts/…`, `manage.py …`, `python -m …`) and in the management-commands table.
    A name with no entry point in this repository (a script that is not there) is left out."""
    text = "\n".join(page.read_text(encoding="utf-8") for page in doc_pages(root))
    named = set(shell_commands(root))
    named |= {f"scripts/{name}" for name in re.findall(r"(?<![\w/])scripts/([\w-]+)", text)}
    named |= {f"manage.py {name}" for name in re.findall(r"manage\.py\s+([a-z_]+)", text)}
    table = (root / "docs" / "commands.md").read_text(encoding="utf-8")
    named |= {f"manage.py {n}" for n in re.findall(r"^\|\s*`([a-z_]+)", table, re.MULTILINE)}
    named |= {f"python -m {module}" for module in re.findall(r"python -m ([a-z_][\w.]*)", text)}
    commands: dict[str, list[str]] = {}
    for name in sorted(named):
        kind, _, rest = name.partition(" ")
        if kind.startswith("scripts/") and (ROOT / kind).is_file():
            commands[name] = [str(ROOT / kind), "--help"]
        elif kind == "manage.py":
            commands[name] = [sys.executable, str(ROOT / "manage.py"), rest, "--help"]
        elif kind == "python" and (ROOT / rest.removeprefix("-m ").split(".")[0]).is_dir():
            commands[name] = [sys.executable, *rest.split(), "--help"]
        elif kind == "intentledger":
            commands[name] = [sys.executable, "-m", "intentledger", "--help"]
    return commands
