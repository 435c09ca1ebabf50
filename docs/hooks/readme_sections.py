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


def readme_section(readme: str, heading: str) -> str:
    """The body of `heading` (a `## ` line of the README), links rewritten for the manual."""
    lines = readme.splitlines()
    try:
        start = lines.index(heading) + 1
    except ValueError:
        raise PluginError(f"README.md has no section {heading!r} any more") from None
    end = next((n for n in range(start, len(lines)) if lines[n].startswith("## ")), len(lines))
    return INTO_THE_MANUAL.sub("](", "\n".join(lines[start:end]).strip("\n"))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if "<!-- README: " not in markdown:
        return markdown
    readme = (Path(config.config_file_path).parent / "README.md").read_text(encoding="utf-8")
    return DIRECTIVE.sub(lambda m: readme_section(readme, m.group(1)), markdown)
