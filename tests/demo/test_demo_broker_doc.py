"""The demo's broker is a local Redis's database of its own, which `scripts/demo --reset` flushes:
the manual and the script's help say which one, so nobody keeps their own data there."""

import subprocess

from demo.embedded import REDIS_DB
from tests.processes import ROOT


def test_the_demo_says_which_redis_database_it_uses_and_that_reset_flushes_it() -> None:
    manual = (ROOT / "docs" / "demo.md").read_text()
    assert f"database {REDIS_DB}" in manual and "`--reset` flushes it" in manual
    told = subprocess.run(
        [str(ROOT / "scripts" / "demo"), "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert f"flush the local Redis's database {REDIS_DB}" in " ".join(told.split())
    assert "set -euo pipefail" not in told
