"""The README's sections in the manual, included rather than copied, so the two cannot drift.

A page line `<!-- README: ## The two commands -->` becomes that section of the repository's
README.md (its body, up to the next `## ` heading). The README links `docs/x.md` from the
repository's root; inside the manual the same page is `x.md`, so those links are rewritten. A
section the README no longer has fails the build (`mkdocs build --strict`, as scripts/test runs).
"""

import re
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

DIRECTIVE = re.compile(r"^<!-- README: (## .+?) -->$", re.M)
INTO_THE_MANUAL = re.compile(r"\]\(docs/")
NUMBERED = re.compile(r"(\d+)\. ")


def readme_section(readme: str, heading: str) -> str:
    """The body of `heading` (a `## ` line of the README), links rewritten for the manual."""
    lines = readme.splitlines()
    try:
        start = lines.index(heading) + 1
    except ValueError:
        raise PluginError(f"README.md has no section {heading!r} any more") from None
    end = next((n for n in range(start, len(lines)) if lines[n].startswith("## ")), len(lines))
    return INTO_THE_MANUAL.sub("](", "\n".join(_list_items_apart(lines[start:end])).strip("\n"))


def _list_items_apart(lines: list[str]) -> list[str]:
    """What GitHub reads one way and Python-Markdown another: an item may interrupt a paragraph
    (a blank line goes before it here), and a list may start at any number (the README's "3."
    after a code block; Python-Markdown would restart it at 1, so such an item is written as an
    `<ol start>` whose content is still Markdown, md_in_html)."""
    out: list[str] = []
    fenced = False
    item: list[str] | None = None
    for line in [*lines, ""]:
        if item is not None:
            if line.strip():
                item.append(line.strip())
                continue
            out += [f'<ol start="{item[0]}" markdown="1">', '<li markdown="1">', *item[1:]]
            out += ["</li>", "</ol>", ""]
            item = None
            continue
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (numbered := NUMBERED.match(line)):
            previous = next((o for o in reversed(out) if o.strip()), "")
            if out and out[-1].strip():
                out.append("")
            if numbered.group(1) != "1" and not NUMBERED.match(previous):
                item = [numbered.group(1), line[numbered.end() :]]
                continue
        out.append(line)
    return out[:-1]


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if "<!-- README: " not in markdown:
        return markdown
    readme = (Path(config.config_file_path).parent / "README.md").read_text(encoding="utf-8")
    return DIRECTIVE.sub(lambda m: readme_section(readme, m.group(1)), markdown)
