"""docs/api.md stays in step with the code: every operation, every error code, no outside links.

The operations come from the OpenAPI schema generated in-process (as `manage.py spectacular`
does); the error codes from the source of runs/ and tools/. Each operation is documented under a
heading of the form "### `POST /api/v1/runs/{id}/lease`" (the run's path parameter, `run_id` in
the schema, is written `{id}`).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator

from runs.api_errors import _DRF_CODES

ROOT = Path(__file__).resolve().parent.parent
API_DOC = ROOT / "docs" / "api.md"
HTTP_METHODS = ("get", "post", "put", "patch", "delete")
# "### `POST /api/v1/runs/{id}/lease`"
OPERATION_HEADING = re.compile(r"^#{2,4} `(GET|POST|PUT|PATCH|DELETE) (/api/[^`\s]*)`\s*$", re.M)
# the code of every refusal the services and views raise or build by hand
CODE_SOURCES = (ROOT / "runs", ROOT / "tools", ROOT / "config")
CODE_PATTERNS = (
    re.compile(r"\b(?:ApplicationError|ToolError)\(\s*\"([a-z_]+)\""),
    re.compile(r"\b(?:error_response|error_body)\(\s*\"([a-z_]+)\""),
    re.compile(r"[\"']code[\"']\s*:\s*\"([a-z_]+)\""),
)


def _api_doc() -> str:
    assert API_DOC.is_file(), "docs/api.md, the API contract, is missing"
    return API_DOC.read_text(encoding="utf-8")


def _normalise(path: str) -> str:
    return path.replace("{run_id}", "{id}")


def schema_operations() -> set[str]:
    schema: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
    return {
        f"{method.upper()} {_normalise(path)}"
        for path, item in schema["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def documented_operations(text: str) -> set[str]:
    return {f"{method} {path}" for method, path in OPERATION_HEADING.findall(text)}


def error_codes_in_source() -> set[str]:
    codes = set(_DRF_CODES.values())
    for folder in CODE_SOURCES:
        for source in sorted(folder.rglob("*.py")):
            if "migrations" in source.parts:
                continue
            text = source.read_text(encoding="utf-8")
            for pattern in CODE_PATTERNS:
                codes.update(pattern.findall(text))
    return codes


def test_every_operation_of_the_schema_has_its_section() -> None:
    operations = schema_operations()
    assert "POST /api/v1/runs/{id}/lease" in operations  # the generator and normalising work
    missing = sorted(operations - documented_operations(_api_doc()))
    assert not missing, f"operations served but not documented in docs/api.md: {missing}"


def test_every_documented_operation_is_served() -> None:
    extra = sorted(documented_operations(_api_doc()) - schema_operations())
    assert not extra, f"docs/api.md documents operations the schema does not have: {extra}"


def test_every_error_code_the_code_can_produce_is_documented() -> None:
    codes = error_codes_in_source()
    assert {"stale_epoch", "idempotency_key_reused", "tool_failed", "malformed_json"} <= codes
    text = _api_doc()
    missing = sorted(code for code in codes if f"`{code}`" not in text)
    assert not missing, f"error codes missing from docs/api.md: {missing}"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_inside_the_api_doc_resolve() -> None:
    text = _api_doc()
    anchors = {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}
    broken = sorted(a for a in re.findall(r"\]\(#([^)]+)\)", text) if a not in anchors)
    assert not broken, f"links to missing sections of docs/api.md: {broken}"


def _markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


OUTSIDE = re.compile(r"\.\./|DESIGN\.md|/work/|/home/|file://", re.I)
LINK_TARGET = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


@pytest.mark.parametrize("doc", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_point_nowhere_outside_the_repository(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    outside = [
        f"line {n}: {line.strip()}"
        for n, line in enumerate(text.splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not outside, f"{doc.name} refers to files outside the repository: {outside}"
    for target in LINK_TARGET.findall(text):
        if re.match(r"[a-z]+:|#", target):
            continue
        resolved = (doc.parent / target.split("#")[0]).resolve()
        assert resolved.is_relative_to(ROOT), f"{doc.name} links outside the repository: {target}"
        assert resolved.exists(), f"{doc.name} links to a missing file: {target}"


def _mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


@pytest.mark.slow
def test_the_manual_builds_strict_and_a_broken_link_fails_it(tmp_path: Path) -> None:
    assert _mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site").returncode == 0
    # the same manual with one link to a page that does not exist
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    (tmp_path / "mkdocs.yml").write_text((ROOT / "mkdocs.yml").read_text())
    (tmp_path / "README.md").write_text((ROOT / "README.md").read_text())  # getting started's
    page = tmp_path / "docs" / "architecture.md"
    page.write_text(page.read_text() + "\nSee [the missing page](missing.md).\n")
    broken = _mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "broken-site")
    assert broken.returncode != 0
    assert "missing.md" in broken.stderr + broken.stdout


def test_the_readme_is_a_front_page() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300
