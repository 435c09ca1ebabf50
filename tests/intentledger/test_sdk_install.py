"""An agent author installs the SDK from its built wheel into a fresh virtualenv, as they would
from the package index: non-editable, next to the real frameworks, without the server.

Before the SDK was its own distribution, `pip install 'agent-ledger[openai-agents]'` put our
Django app `agents` on top of the OpenAI Agents SDK (`from agents import Agent` failed) and
brought Django, Celery and gunicorn into the agent's process. The wheel is built from a copy of
sdk/ (no build folder of the checkout can leak stale files into it); pip installs with the
machine's cache and package configuration.
"""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.pg_connections(0)]

VERSION = (ROOT / "sdk" / "VERSION").read_text(encoding="utf-8").strip()
FRAMEWORKS = ("agents", "pydantic_ai", "langgraph", "mcp")
INTEGRATIONS = tuple(
    f"intentledger.integrations.{name}"
    for name in ("openai_agents", "pydantic_ai", "langgraph", "mcp")
)
SERVER_ONLY = {
    "django",
    "djangorestframework",
    "celery",
    "granian",
    "gunicorn",
    "psycopg",
    "whitenoise",
}


def clean_env() -> dict[str, str]:
    """This process's environment without what points Python at the checkout or its venv (and
    scripts/test's shared bytecode cache, which would put pip's .pyc files outside the venv)."""
    dropped = {
        "PYTHONPATH",
        "PYTHONHOME",
        "VIRTUAL_ENV",
        "DJANGO_SETTINGS_MODULE",
        "PYTHONPYCACHEPREFIX",
    }
    return {k: v for k, v in os.environ.items() if k not in dropped}


def run(args: list[str | Path], cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("sdk-wheel")
    source = work / "sdk"
    shutil.copytree(
        ROOT / "sdk",
        source,
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"),
    )
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", work / "dist", source], work
    )
    (built,) = (work / "dist").glob("intentledger-*.whl")
    assert built.name == f"intentledger-{VERSION}-py3-none-any.whl"
    return built


def fresh_venv(where: Path, requirement: str) -> Path:
    """A virtualenv of this interpreter's base Python with `requirement` installed (by this
    environment's pip, `--python`: the new one needs no pip of its own)."""
    base = (
        Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    )
    run([base, "-m", "venv", "--without-pip", where], where.parent)
    python = where / "bin" / "python"
    run(
        [sys.executable, "-m", "pip", "--python", python, "install", "-q", requirement],
        where.parent,
    )
    return python


@pytest.fixture(scope="module")
def with_every_extra(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_venv(tmp_path_factory.mktemp("venv-all") / "venv", f"{wheel}[all]")


@pytest.fixture(scope="module")
def sdk_only(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_venv(tmp_path_factory.mktemp("venv-sdk") / "venv", str(wheel))


def installed(python: Path) -> set[str]:
    listed = run([sys.executable, "-m", "pip", "--python", python, "list", "--format=json"], ROOT)
    return {p["name"].lower().replace("_", "-") for p in json.loads(listed)}


def test_the_wheel_holds_intentledger_and_its_metadata_and_requires_urllib3_alone(
    wheel: Path,
) -> None:
    with zipfile.ZipFile(wheel) as archive:
        dist_info = f"intentledger-{VERSION}.dist-info"
        record = archive.read(f"{dist_info}/RECORD").decode()
        metadata = archive.read(f"{dist_info}/METADATA").decode()
    top_level = {line.split(",")[0].split("/")[0] for line in record.splitlines() if line}
    assert top_level == {"intentledger", dist_info}
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    unconditional = [line for line in requires if "extra ==" not in line]
    assert unconditional == ["Requires-Dist: urllib3>=2"]


PROBE = """
import importlib, importlib.util, json, sys
from agents import Agent
import pydantic_ai, langgraph, mcp
modules = [importlib.import_module(name) for name in sys.argv[1:]]
print(json.dumps({
    # a namespace package (langgraph) has no __file__: its folders say where it lives
    "files": {m.__name__: m.__file__ or list(m.__path__)[0] for m in modules},
    "agent": Agent.__module__,
    "django": importlib.util.find_spec("django") is not None,
    "site": [p for p in sys.path if p.endswith("site-packages")],
}))
"""


@pytest.mark.parametrize("where", ["a neutral folder", "the checkout's root"])
def test_every_framework_and_integration_imports_beside_the_sdk(
    with_every_extra: Path, tmp_path: Path, where: str
) -> None:
    cwd = ROOT if where == "the checkout's root" else tmp_path
    out = json.loads(run([with_every_extra, "-c", PROBE, *FRAMEWORKS, *INTEGRATIONS], cwd))
    (site,) = out["site"]
    assert out["agent"].startswith("agents.")  # the OpenAI Agents SDK's own `agents`
    for name, file in out["files"].items():  # from the venv, none from the checkout
        assert Path(file).is_relative_to(site), f"{name} imported from {file}"
    assert out["django"] is False


def test_every_extra_brings_the_frameworks_and_no_server_package(with_every_extra: Path) -> None:
    names = installed(with_every_extra)
    assert {
        "intentledger",
        "urllib3",
        "openai-agents",
        "pydantic-ai-slim",
        "langgraph",
        "mcp",
    } <= names
    assert names & SERVER_ONLY == set()
    assert "agent-ledger-server" not in names


def test_nothing_of_ours_but_intentledger_lands_in_site_packages(with_every_extra: Path) -> None:
    code = (
        "import importlib.metadata, json; "
        "print(json.dumps([str(f) for f in importlib.metadata.distribution('intentledger').files]))"
    )
    files = json.loads(run([with_every_extra, "-c", code], ROOT))
    in_site = {f.split("/")[0] for f in files if not f.startswith("../")}
    assert in_site == {"intentledger", f"intentledger-{VERSION}.dist-info"}
    assert [f for f in files if f.startswith("../")] == ["../../../bin/intentledger"]


@pytest.mark.parametrize(
    "command",
    [
        ["intentledger", "--help"],
        ["python", "-m", "intentledger", "--help"],
        ["intentledger", "mcp", "proxy", "--help"],
    ],
    ids=" ".join,
)
def test_the_command_line_answers_help_from_the_sdk_alone(
    sdk_only: Path, tmp_path: Path, command: list[str]
) -> None:
    out = run([sdk_only.parent / command[0], *command[1:]], tmp_path)
    assert out.startswith("usage: intentledger")
    names = installed(sdk_only)
    assert "intentledger" in names and names & SERVER_ONLY == set()
    assert names.isdisjoint({"openai-agents", "mcp", "langgraph", "pydantic-ai-slim"})
