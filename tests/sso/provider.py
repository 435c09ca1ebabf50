"""A real OpenID provider for the tests: npm's `oidc-provider`, run by node (tests/sso/oidc_provider.mjs).

The package is installed (once, `npm install`) outside the tracked tree, in
$AGENTLEDGER_OIDC_CACHE (default ~/.cache/agentledger-oidc), so a clean CI machine with node and
the npm registry gets it on the first run; a test run never writes into the checkout.
"""

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.processes import LOGS, free_port, spawn, stop_process, wait_for_http

OIDC_PROVIDER_VERSION = "9.13.3"
SCRIPT = Path(__file__).with_name("oidc_provider.mjs")
CLIENT_ID = "agent-ledger-dashboard"
CLIENT_SECRET = "test-client-secret-9f2c"
ISSUER_PATH = "/realms/agents"  # an issuer with a path, as Keycloak's


def cache_dir() -> Path:
    default = Path.home() / ".cache" / "agentledger-oidc"
    return Path(os.environ.get("AGENTLEDGER_OIDC_CACHE") or default)


def node_modules() -> Path:
    """oidc-provider@OIDC_PROVIDER_VERSION installed under the cache (installing it if missing;
    under a lock, as two pytest workers may both get there first on a clean machine)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("node and npm are needed to run the OpenID provider of the SSO tests")
    root = cache_dir() / OIDC_PROVIDER_VERSION
    package = root / "node_modules" / "oidc-provider" / "package.json"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".install-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (
            not package.exists()
            or json.loads(package.read_text())["version"] != OIDC_PROVIDER_VERSION
        ):
            subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--no-save", "--prefix", str(root),
                 f"oidc-provider@{OIDC_PROVIDER_VERSION}"],
                check=True,
                capture_output=True,
                timeout=300,
            )  # fmt: skip
    return root / "node_modules"


class OidcProvider:
    """The running provider: its issuer, and the test's levers (users' groups, tampering)."""

    def __init__(self, port: int, users: dict[str, Any]) -> None:
        self.port = port
        self.issuer = f"http://localhost:{port}{ISSUER_PATH}"
        self.control = f"http://127.0.0.1:{port}/control"
        self.users = users

    def groups_set(self, user: str, groups: list[str]) -> None:
        httpx.post(f"{self.control}/users/{user}", json={"groups": groups}).raise_for_status()

    def tamper(self, **change: Any) -> None:
        """The next ID tokens come out changed (aud=…, iss=…, expired=True, foreign_key=True);
        no argument: as the provider issues them."""
        httpx.post(f"{self.control}/tamper", json=change).raise_for_status()


@contextmanager
def oidc_provider(redirect_uri: str, users: dict[str, Any]) -> Iterator[OidcProvider]:
    """A provider listening on a port of its own. A start that does not answer within 30 s is
    given up and started once more on another port: on loaded CI runs the provider twice printed
    its first start-up line and then did not listen for 30 s, while the same script starts in
    under a second here. The stalled process writes a Node diagnostic report (its JS and native
    stacks) beside its log before it is stopped, so the next such stall can be read."""
    modules = node_modules()
    for attempt in (1, 2):
        port = free_port()
        env = {
            **os.environ,
            "OIDC_NODE_MODULES": str(modules),
            "OIDC_PORT": str(port),
            "OIDC_PATH": ISSUER_PATH,
            "OIDC_CLIENT_ID": CLIENT_ID,
            "OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "OIDC_REDIRECT_URI": redirect_uri,
            "OIDC_USERS": json.dumps(users),
        }
        node = ["node", "--report-on-signal", f"--report-directory={LOGS}", str(SCRIPT)]
        proc = spawn(node, log_name=f"oidc-provider-{port}", env=env)
        provider = OidcProvider(port, users)
        try:
            wait_for_http(f"{provider.control}/health", proc=proc, timeout=30)
        except TimeoutError:
            _report_and_stop(proc)
            if attempt == 2:
                raise
            continue
        try:
            yield provider
        finally:
            stop_process(proc)
        return


def _report_and_stop(proc: subprocess.Popen[Any]) -> None:
    """SIGUSR2: Node writes its diagnostic report (--report-on-signal), then it is stopped."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGUSR2)
        time.sleep(2)
    stop_process(proc)
