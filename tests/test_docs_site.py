"""The manual as a newcomer meets it: a way in, the README's own sections inside it (included, so
they cannot drift), Home pointing at every page a deployer needs, the tool to build it in the venv
the README's commands make, and what the SDK needs said where its install is."""

import html
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(text: str, heading: str) -> str:
    body = text.split(f"\n{heading}\n", 1)[1]
    return body.split("\n## ", 1)[0]


def page_text(site: Path, name: str) -> str:
    """A built page as a reader sees it: no tags, entities decoded, spaces collapsed."""
    raw = (site / f"{name}.html").read_text(encoding="utf-8")
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", raw)))


def test_getting_started_is_the_readmes_install_ways_to_run_and_sdk_example(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    assert built.returncode == 0, built.stderr
    page = page_text(site, "getting-started")
    for heading in ("## The two commands", "## Three ways to run it", "## Using the worker SDK"):
        # every line of the README's section is on the page, as the README has it now
        for line in section(README, heading).splitlines():
            if line.lstrip().startswith(("```", "![")):
                continue
            words = re.sub(r"\[([^]]*)\]\([^)]*\)", r"\1", line)  # a link reads as its text
            words = re.sub(r"<(https?://[^>]+)>", r"\1", words)  # an autolink too
            words = re.sub(r"[`*]|^\s*\d+\.\s", "", words).strip()
            if words:
                assert re.sub(r"\s+", " ", words) in page, (heading, words)
    # the README's links into docs/ work inside the manual
    raw = (site / "getting-started.html").read_text(encoding="utf-8")
    assert 'href="deploy.html"' in raw and 'href="sdk.html"' in raw
    assert 'href="docs/' not in raw
    # the README's third way stays "3." after the second's code block, as GitHub shows it
    assert '<ol start="3">' in raw


def test_home_is_a_way_in_to_every_page_a_deployer_needs() -> None:
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([a-z-]+\.md)", home))
    assert {"getting-started.md", "deploy.md", "sso.md", "settings.md"} <= linked
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "Getting started: getting-started.md" in nav


def test_the_readmes_commands_can_make_a_venv_with_mkdocs() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(d.startswith("mkdocs-material") for d in extras["docs"])
    assert "agent-ledger-server[docs]" in extras["dev"]  # scripts/test's venv builds the manual
    assert "pip install '.[docs]' && .venv/bin/mkdocs serve" in section(README, "## Read on")


def test_the_sdks_python_is_said_where_it_is_installed() -> None:
    required = tomllib.loads((ROOT / "sdk" / "pyproject.toml").read_text())["project"][
        "requires-python"
    ]
    version = required.removeprefix(">=")
    assert required == f">={version}"
    sdk_page = (ROOT / "docs" / "sdk.md").read_text(encoding="utf-8")
    assert f"Python {version} or newer" in section(README, "## Using the worker SDK")
    assert f"Python {version} or newer" in sdk_page.split("```")[0]
    sdk_readme = (ROOT / "sdk" / "README.md").read_text(encoding="utf-8")  # the wheel's page
    assert f"Python {version} or newer" in section(sdk_readme, "## Install")


def test_the_settings_say_when_the_provider_is_asked() -> None:
    settings = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    [issuer] = [line for line in settings.splitlines() if line.startswith("| `OIDC_ISSUER`")]
    assert "read at start " not in issuer and "when a sign-in starts" in issuer
    deploy = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    for cited in re.findall(r"the README's (?:table )?\(\"([^\"]+)\"\)", deploy):
        assert f"## {cited}" in README, cited
