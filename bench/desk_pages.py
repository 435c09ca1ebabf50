"""The review desk at size: queue and item pages with thousands of waiting items, and the runs
search at 100k runs, p50 (issue 15's "Measure").

    BENCH_DB=bench_ledger python -m bench.datagen --runs 100000 --steps 2 --unknown 5000
    BENCH_DB=bench_ledger python -m bench.desk_pages [--samples 20]

Runs in-process against the bench database through Django's test client (a logged-in admin, no
HTTP server): it isolates what the desk's own queries and templates cost from the web server and the
network, which `python -m bench dashboard` measures over HTTP. Prints one markdown table; also
prints EXPLAIN's choice of index for each search, so a missing index shows as a Seq Scan.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any


def _setup() -> None:
    from bench.common import BENCH_DB, pg_url

    os.environ["DATABASE_URL"] = pg_url(BENCH_DB)  # as the served ledger: bound by its policies
    os.environ.setdefault("SECRET_KEY", "bench-only-secret")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    import django

    django.setup()
    from teams.scope import every_team_scope, set_current

    # the served role sees no team's row until the transaction names some: the counts and the
    # items picked here are every team's (the pages are fetched as their signed-in person)
    set_current(every_team_scope("operator command"))


def _client() -> Any:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client

    from dashboard.roles import groups_ensure_now

    groups_ensure_now()
    user, _ = get_user_model()._default_manager.get_or_create(username="bench-desk")
    user.groups.add(*Group.objects.filter(name__in=["admins", "supervisors"]))
    from teams.models import default_team
    from teams.services import grant_role

    for role in ("admin", "supervisor"):
        grant_role(user, default_team(), role, actor="bench")
    client = Client(HTTP_HOST="localhost")  # a host the settings allow
    client.force_login(user)
    return client


def _p50(client: Any, path: str, samples: int) -> tuple[float, int, int]:
    first = client.get(path)
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    return statistics.median(times), first.status_code, len(first.content)


def _plan(q: str) -> str:
    from django.db import connection

    from review.selectors import RunFilters, runs_filtered

    sql, params = runs_filtered(RunFilters(q=q))[:26].query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        lines = [row[0] for row in cursor.fetchall()]
    used = sorted({part.split(" on ")[1].split()[0] for part in lines if "Index Scan on" in part})
    seq = any("Seq Scan" in line for line in lines)
    return ", ".join(used) + (" + seq scan" if seq else "") if used else "seq scan"


def _query_p50(q: str, samples: int) -> float:
    """The search's own query (one page of runs), without the page around it."""
    from review.selectors import RunFilters, runs_page

    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        runs_page(RunFilters(q=q), page=1)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.desk_pages", description=__doc__)
    parser.add_argument("--samples", type=int, default=20)
    args = parser.parse_args(argv)
    _setup()
    from runs.constants import StepState
    from runs.models import Run, Step

    runs = Run.objects.count()
    waiting = Step.objects.filter(
        state__in=(StepState.UNKNOWN, StepState.AWAITING_APPROVAL)
    ).count()
    oldest = Step.objects.filter(state=StepState.UNKNOWN).order_by("intent_at").first()
    middle = Run.objects.order_by("created_at")[runs // 2]
    number = str(middle.external_id).rsplit("-", 1)[-1]
    client = _client()
    pages = {"review queue": "/queue/"}
    if oldest is not None:
        pages["review item (oldest unknown step)"] = f"/queue/{oldest.run_id}/{oldest.index}/"
    searches = {
        "search: short id": str(middle.pk)[:8],
        "search: part of an external id": f"ticket-{number}",
        "search: part of a customer address": f"customer-{number}@exa",
    }
    print(f"{runs:,} runs, {waiting:,} waiting items; p50 of {args.samples} in-process GETs\n")
    print("| page | page p50 ms | query p50 ms | bytes | index used |")
    print("|---|---:|---:|---:|---|")
    for title, path in pages.items():
        p50, _, size = _p50(client, path, args.samples)
        print(f"| {title} | {p50:.1f} | | {size:,} | |")
    for title, q in searches.items():
        p50, _, size = _p50(client, f"/?q={q}", args.samples)
        query = _query_p50(q, args.samples)
        print(f"| {title} (`{q}`) | {p50:.1f} | {query:.1f} | {size:,} | {_plan(q)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
