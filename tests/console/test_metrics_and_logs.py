"""/metrics scraped and parsed with prometheus_client's own parser; JSON logs name run and step."""

import io
import json
import logging
from typing import Any

import pytest
from django.db.models import Sum
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from console.logs import JsonFormatter
from runs.constants import RunStatus, StepState
from runs.models import BudgetPolicy, Event, Run, Step
from runs.services.actions import run_cancel
from runs.tokens import worker_token_create
from teams.scope import team_scope
from teams.services import team_create
from tests.console.factories import evicted_at_step_12, journalled_run
from tests.review.factories import killed_support_run

pytestmark = pytest.mark.django_db

TOKEN = "scrape-me-9f2c"
DEFAULT = ("team", "default")


@pytest.fixture
def metrics_token(settings: Any) -> str:
    settings.METRICS_TOKEN = TOKEN
    return TOKEN


def scrape(token: str = TOKEN) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def test_a_scrape_parsed_with_prometheus_client_matches_the_database(metrics_token: str) -> None:
    evicted_at_step_12()
    cancelled, _ = journalled_run(3, agent="triage")
    run_cancel(run_id=cancelled.pk, by="ada", note="stop")
    journalled_run(2, agent="triage")
    killed_support_run(agent="mailer")

    samples = scrape()

    # one team: every series is the default team's
    for status in RunStatus.values:
        assert (
            samples["intentledger_runs"][(("status", status), DEFAULT)]
            == Run.objects.filter(status=status).count()
        )
    assert samples["intentledger_runs"][(("status", "cancelled"), DEFAULT)] == 1
    for agent in ("support", "triage", "mailer"):
        runs = Run.objects.filter(agent=agent)
        totals = runs.aggregate(steps=Sum("step_count"), tokens=Sum("used_tokens"))
        assert samples["intentledger_steps_total"][(("agent", agent), DEFAULT)] == totals["steps"]
        assert samples["intentledger_tokens_total"][(("agent", agent), DEFAULT)] == totals["tokens"]
        assert samples["intentledger_recoveries_total"][(("agent", agent), DEFAULT)] == sum(
            runs.values_list("used_recoveries", flat=True)
        )
    assert samples["intentledger_steps_total"][(("agent", "support"), DEFAULT)] == 20
    assert samples["intentledger_recoveries_total"][(("agent", "support"), DEFAULT)] == 1
    duplicates = samples["intentledger_duplicates_prevented_total"]
    assert duplicates[(("kind", "replayed_steps"), DEFAULT)] == 13
    assert duplicates[(("kind", "reconciled"), DEFAULT)] == 0
    expiries = Event.objects.filter(type="lease_expired").count()
    assert samples["intentledger_lease_expiries_total"][(DEFAULT,)] == expiries == 1
    assert samples["intentledger_review_queue_depth"][(DEFAULT,)] == 1
    assert Step.objects.filter(state=StepState.UNKNOWN).count() == 1
    assert samples["intentledger_review_queue_oldest_age_seconds"][(DEFAULT,)] >= 0
    assert samples["intentledger_chain_alerts_open"][()] == 0


def test_a_worker_token_inventing_agent_names_cannot_grow_the_series_without_bound(
    metrics_token: str, settings: Any
) -> None:
    settings.METRICS_AGENT_LABELS_MAX = 5
    _, token = worker_token_create(name="inventive")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    for n in range(40):  # runs under 40 made-up agent names, through the API
        created = api.post("/api/v1/runs/", {"agent": f"made-up-{n}", "input": {}}, format="json")
        assert created.status_code == 201
    BudgetPolicy.objects.create(
        name="billing",
        agent="billing",
        max_steps=100,
        max_tokens=10**6,
        max_wall_seconds=600,
        max_recoveries=3,
    )
    journalled_run(1, agent="billing")  # an agent an admin named: a policy of its own
    journalled_run(4, agent="made-up-7")  # the busiest invented one

    samples = scrape()

    for metric in ("intentledger_steps_total", "intentledger_tokens_total"):
        agents = {dict(labels)["agent"] for labels in samples[metric]}
        assert len(agents) <= 5 + 1  # the cap, and "other"
        assert {"billing", "made-up-7", "other"} <= agents
    steps = samples["intentledger_steps_total"]
    assert steps[(("agent", "billing"), DEFAULT)] == 1
    assert steps[(("agent", "made-up-7"), DEFAULT)] == 4
    assert sum(steps.values()) == Run.objects.aggregate(n=Sum("step_count"))["n"]  # none lost


def test_two_teams_runs_show_under_two_team_labels_each_with_its_own_figures(
    metrics_token: str,
) -> None:
    billing = team_create(slug="billing", name="Billing", actor="tests")
    returns = team_create(slug="returns", name="Returns", actor="tests")
    with team_scope(billing.pk):
        journalled_run(3, agent="triage")
        journalled_run(2, agent="triage")
    with team_scope(returns.pk):
        journalled_run(4, agent="triage")

    samples = scrape()

    steps = samples["intentledger_steps_total"]
    assert steps[(("agent", "triage"), ("team", "billing"))] == 5
    assert steps[(("agent", "triage"), ("team", "returns"))] == 4
    runs = samples["intentledger_runs"]
    assert runs[(("status", "running"), ("team", "billing"))] == 2
    assert runs[(("status", "running"), ("team", "returns"))] == 1
    teams = {dict(labels)["team"] for labels in steps}
    assert {"billing", "returns"} <= teams and "other" not in teams
    assert sum(steps.values()) == Run.objects.aggregate(n=Sum("step_count"))["n"]


def test_past_the_team_bound_the_quieter_teams_are_summed_as_other(
    metrics_token: str, settings: Any
) -> None:
    settings.METRICS_TEAM_LABELS_MAX = 2
    for n, slug in enumerate(("north", "south", "east", "west")):
        team = team_create(slug=slug, name=slug.title(), actor="tests")
        with team_scope(team.pk):
            for _ in range(4 - n):  # north has the most runs, west the fewest
                journalled_run(1 + n, agent="triage")

    samples = scrape()

    for metric in ("intentledger_runs", "intentledger_steps_total", "intentledger_cost_usd_total"):
        teams = {dict(labels)["team"] for labels in samples[metric]}
        assert teams == {"north", "south", "other"}  # the cap, and "other"
    steps = samples["intentledger_steps_total"]
    assert steps[(("agent", "triage"), ("team", "north"))] == 4 * 1
    assert steps[(("agent", "triage"), ("team", "south"))] == 3 * 2
    # east, west and the default team summed: none lost
    assert steps[(("agent", "triage"), ("team", "other"))] == 2 * 3 + 1 * 4
    assert sum(steps.values()) == Run.objects.aggregate(n=Sum("step_count"))["n"]
    runs = samples["intentledger_runs"]
    assert sum(runs.values()) == Run.objects.count() == 4 + 3 + 2 + 1
    assert runs[(("status", "running"), ("team", "other"))] == 3


def test_the_hot_calls_are_timed_by_call_and_answer_code(metrics_token: str) -> None:
    _, raw = worker_token_create(name="pod-m")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    before = scrape().get("intentledger_step_call_seconds_count", {})
    run = api.post("/api/v1/runs/", {"agent": "metered", "input": {}}, format="json").json()
    epoch = api.post(
        f"/api/v1/runs/{run['id']}/lease", {"worker": "w", "ttl_seconds": 30}, format="json"
    ).json()["epoch"]
    for index in range(3):
        step = {
            "epoch": epoch,
            "index": index,
            "kind": "model",
            "name": "m",
            "effect": "read",
            "arguments": {"i": index},
            "outcome": {"status": "ok", "result": {}},
        }
        assert api.post(f"/api/v1/runs/{run['id']}/steps/", step, format="json").status_code == 201
    stale = {
        "epoch": epoch + 5,
        "index": 3,
        "kind": "model",
        "name": "m",
        "effect": "read",
        "arguments": {},
    }
    assert api.post(f"/api/v1/runs/{run['id']}/steps/", stale, format="json").status_code == 409
    done = {"epoch": epoch, "output": {"answer": 42}}
    assert api.post(f"/api/v1/runs/{run['id']}/complete", done, format="json").status_code == 200

    after = scrape()["intentledger_step_call_seconds_count"]

    def grew(call: str, code: str) -> float:
        key = (("call", call), ("code", code))
        return after.get(key, 0) - before.get(key, 0)

    assert grew("intent", "ok") == 3
    assert grew("intent", "stale_epoch") == 1
    assert grew("lease", "ok") == 1
    assert grew("create", "ok") == 1
    assert grew("complete", "ok") == 1


def test_metrics_without_the_credential_are_refused(settings: Any) -> None:
    settings.METRICS_TOKEN = TOKEN
    anonymous = Client().get("/metrics")
    assert anonymous.status_code == 401 and anonymous["WWW-Authenticate"].startswith("Bearer")
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert Client().get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 401
    settings.METRICS_TOKEN = ""
    disabled = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ")
    assert disabled.status_code == 403 and b"METRICS_TOKEN" in disabled.content


def test_json_logs_carry_run_id_and_step_index_of_the_call(settings: Any) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    calls = logging.getLogger("intentledger.calls")
    calls.addHandler(handler)
    previous = calls.level
    calls.setLevel(logging.INFO)
    try:
        _, raw = worker_token_create(name="pod-l")
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        run = api.post("/api/v1/runs/", {"agent": "logged", "input": {}}, format="json").json()
        epoch = api.post(
            f"/api/v1/runs/{run['id']}/lease", {"worker": "w", "ttl_seconds": 30}, format="json"
        ).json()["epoch"]
        step = {
            "epoch": epoch,
            "index": 0,
            "kind": "tool",
            "name": "t",
            "effect": "write",
            "enforced_by": "tool",
            "arguments": {},
        }
        api.post(f"/api/v1/runs/{run['id']}/steps/", step, format="json")
        api.post(
            f"/api/v1/runs/{run['id']}/steps/0/outcome",
            {"epoch": epoch, "status": "ok", "result": {"ok": 1}},
            format="json",
        )
    finally:
        calls.removeHandler(handler)
        calls.setLevel(previous)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["call"], line["step_index"]) for line in lines] == [
        ("create", None),  # named by the run it made, once made
        ("lease", None),
        ("intent", 0),
        ("outcome", 0),
    ]
    assert {line["run_id"] for line in lines} == {run["id"]}
    assert all(line["level"] == "INFO" and "duration_ms" in line for line in lines)


def test_log_format_json_is_what_the_settings_install() -> None:
    import subprocess
    import sys

    code = (
        "import django, logging; django.setup(); "
        "from django.conf import settings; "
        "print(type(logging.getLogger().handlers[0].formatter).__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={
            **__import__("os").environ,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "LOG_FORMAT": "json",
        },
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "JsonFormatter"
