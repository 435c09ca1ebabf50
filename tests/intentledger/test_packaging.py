"""What installing our software puts beside other packages, checked in the project's virtualenv.

The SDK (`intentledger`, sdk/) brings urllib3 and nothing else into an agent process; the server
and the SDK carry one version (sdk/VERSION); and no top-level package of ours has the import name
of someone else's distribution, as our Django app `agents` had the OpenAI Agents SDK's: installed
side by side, one of the two `agents/__init__.py` files overwrote the other.
(tests/intentledger/test_sdk_install.py installs the built wheel in a fresh virtualenv.)
"""

import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib

from drf_spectacular.generators import SchemaGenerator
from packaging.requirements import Requirement

from tests.conftest import ROOT

OUR_DISTRIBUTIONS = {"agent-ledger-server", "intentledger"}
VERSION_FILE = ROOT / "sdk" / "VERSION"


def normalised(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def our_top_level_names() -> set[str]:
    """Every name `import X` finds in this checkout: the root's packages and modules (the server
    runs from here) and the SDK's package."""
    names = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    names |= {p.stem for p in ROOT.glob("*.py")}
    names |= {p.name for p in (ROOT / "sdk" / "src").iterdir() if (p / "__init__.py").is_file()}
    return names


def claimed_by_others(names: set[str]) -> dict[str, list[str]]:
    """The names that another installed distribution also installs as a top-level module."""
    owners = importlib.metadata.packages_distributions()
    claimed = {}
    for name in sorted(names):
        others = {d for d in owners.get(name, []) if normalised(d) not in OUR_DISTRIBUTIONS}
        if others:
            claimed[name] = sorted(others)
    return claimed


def test_no_top_level_name_of_ours_is_the_import_name_of_another_installed_distribution() -> None:
    names = our_top_level_names()
    assert {"runs", "support_agent", "config", "intentledger", "manage"} <= names
    assert claimed_by_others(names) == {}


def test_the_collision_check_names_our_old_app_name_and_the_distribution_it_shadowed() -> None:
    # the Django app was `agents` until the SDK's extras met the OpenAI Agents SDK (installed in
    # this virtualenv by the dev extra, intentledger[all])
    assert claimed_by_others({"agents", "support_agent"}) == {"agents": ["openai-agents"]}


# urllib3 imports these when they are installed, to decode a response or speak HTTP/2 or SOCKS
URLLIB3_OPTIONAL = ("brotli", "zstd", "h2", "socks")


def requirement_closure(distribution: str, extras: dict[str, tuple[str, ...]]) -> set[str]:
    """`distribution` and everything it requires on this interpreter, with `extras` of some."""
    seen: set[str] = set()
    todo = [distribution]
    while todo:
        name = normalised(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:  # an optional one not installed here
            continue
        for line in requires:
            req = Requirement(line)
            wanted = ("", *extras.get(name, ()))
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in wanted):
                todo.append(req.name)
    return seen


PROBE = """
import json, sys
before = set(sys.modules)
import intentledger
on_import = {m.split(".")[0] for m in set(sys.modules) - before}
intentledger.Ledger("http://127.0.0.1:9", "token")  # builds the client: urllib3 is imported now
on_client = {m.split(".")[0] for m in set(sys.modules) - before}
print(json.dumps([sorted(on_import), sorted(on_client)]))
"""


def test_the_sdk_loads_nothing_but_the_standard_library_until_a_client_then_urllib3_and_its_own(
    tmp_path,
) -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    on_import, on_client = (
        {m for m in modules if m not in sys.stdlib_module_names}
        for modules in json.loads(out.stdout)
    )
    assert on_import == {"intentledger"}  # not even urllib3 (nor Django, Celery, ...)
    assert "urllib3" in on_client
    assert "httpx" not in on_client
    allowed = requirement_closure("intentledger", {"urllib3": URLLIB3_OPTIONAL})
    owners = importlib.metadata.packages_distributions()
    foreign = {
        module: owners.get(module)
        for module in on_client
        if not {normalised(d) for d in owners.get(module, [])} & allowed
    }
    assert foreign == {}, f"modules from outside intentledger's requirements: {foreign}"


def test_the_server_and_the_sdk_take_their_version_from_sdk_version() -> None:
    version = VERSION_FILE.read_text(encoding="utf-8").strip()
    server = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    sdk = tomllib.loads((ROOT / "sdk" / "pyproject.toml").read_text(encoding="utf-8"))
    assert server["tool"]["setuptools"]["dynamic"]["version"] == {"file": "sdk/VERSION"}
    assert sdk["tool"]["setuptools"]["dynamic"]["version"] == {"file": "VERSION"}
    assert importlib.metadata.version("intentledger") == version
    assert importlib.metadata.version("agent-ledger-server") == version
    schema = SchemaGenerator().get_schema(request=None, public=True)
    assert schema["info"]["version"] == version
