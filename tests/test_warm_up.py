"""A web process does its first requests' one-time work when it loads the app (config/warmup.py),
without a database connection: under `python -m config.serve` granian's workers fork from that
state."""

import json
import subprocess
import sys

from tests.processes import ROOT

LOADED_STATE = """
import json
import config.wsgi  # what config.serve imports before granian forks its workers
from django.db import connections
from django.template import engines
from django.urls import get_resolver

loader = engines["django"].engine.template_loaders[0]
print(json.dumps({
    "urls_populated": get_resolver()._populated,
    "templates_cached": sorted(loader.get_template_cache),
    "connections_open": [c.alias for c in connections.all() if c.connection is not None],
}))
"""


def test_loading_the_web_app_fills_the_url_resolver_and_template_cache_without_connecting() -> None:
    # a database nobody can reach: loading the app must not try it
    env = {
        "PATH": "/usr/bin:/bin",
        "SECRET_KEY": "warm-up-test",
        "DATABASE_URL": "postgres://nobody@127.0.0.1:1/none",
        "PYTHONPATH": str(ROOT),
    }
    result = subprocess.run(
        [sys.executable, "-c", LOADED_STATE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    state = json.loads(result.stdout.strip().splitlines()[-1])
    assert state["urls_populated"] is True
    assert {"review/queue.html", "console/run.html", "base.html"} <= set(state["templates_cached"])
    assert state["connections_open"] == []
