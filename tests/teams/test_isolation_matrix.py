"""The isolation matrix: team A's token and people against every object of team B.

Two teams, `billing` (A) and `returns` (B), each hold a full set of objects: runs with a step
awaiting approval and a maybe-sent step on the desk, an approval request, a budget policy, an
approval rule, a webhook, a worker token, an MCP tool report, an export job, an incident, audit
entries, an escalation, a free-form idempotency key.

- Every operation of the worker API and the gateway, taken from the OpenAPI schema, is called
  with A's token on B's objects (B's run id, step index, idempotency keys...). An operation with
  no request in API_CALLS fails the suite, naming it.
- Every dashboard URL, taken from the URL configuration, is requested (GET, and POST with a
  plausible body) with B's object ids in its path, by a person holding every role (supervisor,
  admin, auditor) in A only. A URL with no row in PAGES fails the suite, naming it.

Each answer is a 404 (`not_found` in the API), or A's own scope with nothing of B in it; no
identifier of B (run ids, external id, idempotency keys, token, policy and webhook names, agent,
MCP tool and incident names) appears in any body or header unless the request itself carried it;
and B's rows (every team-owned table, read under every team) and B's people are unchanged after
every call. An org admin gets every page without a server error.

docs/team-isolation.md is the matrix's table, generated here and compared with the committed file
(as docs/scopes.md is by tests/runs/test_scopes_table.py). Regenerate it after a deliberate change:

    UPDATE_DOCS=1 .venv/bin/python -m pytest -p no:cacheprovider tests/teams/test_isolation_matrix.py

(the only way this test writes a tracked file).
"""

import difflib
import io
import json
import os
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from audit.models import ChainAlert, ExportJob, Incident, IncidentRun
from audit.signing import private_key_generate
from dashboard.audit import audit_record
from review.models import Escalation, EscalationWebhook
from runs.models import ApprovalRule, BudgetPolicy, Run, Step, WorkerToken
from runs.tokens import worker_token_create
from teams.models import Team
from teams.scope import every_team, team_scope
from teams.services import grant_role
from tests.review.factories import UnknownStep, killed_support_run
from tests.teams.conftest import team_owned_models, world_of
from tools.models import IdempotencyKey, McpTool

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parent.parent.parent
MATRIX_DOC = ROOT / "docs" / "team-isolation.md"
SIGNING_KEY = private_key_generate()
EMAIL = {"to": "alice@example.com", "subject": "Refund", "body": "Sent to your IBAN."}


@dataclass
class Side:
    """One team's objects, with the strings that identify them."""

    team: Team
    raw_token: str  # unscoped, with `tools:direct`
    token: WorkerToken
    approval_run: Run  # leased, step 0 `refund.issue` awaiting approval
    item: UnknownStep  # a run in review, step 2 `email.send` maybe sent
    journal_key: str  # the idempotency key of a write step of the team's
    free_key: str  # a free-form gateway key the team's desk used
    policy: BudgetPolicy
    rule: ApprovalRule
    webhook: EscalationWebhook
    mcp_tool: McpTool
    export: ExportJob
    incident: Incident
    alert: ChainAlert  # an alert about this team's chain (alerts are org-wide rows)
    person: User  # A: every role in the team; B: its supervisor, with an address
    agent: str
    external_id: str

    def identifiers(self) -> dict[str, str]:
        return {
            "approval run id": str(self.approval_run.pk),
            "item run id": str(self.item.run_id),
            "external id": self.external_id,
            "journal idempotency key": self.journal_key,
            "free-form idempotency key": self.free_key,
            "token name": self.token.name,
            "policy name": self.policy.name,
            "approval rule pattern": self.rule.tool_pattern,
            "webhook url": self.webhook.url,
            "agent": self.agent,
            "MCP server": self.mcp_tool.server,
            "incident title": self.incident.title,
            "export job id": str(self.export.pk),
            "supervisor's address": self.person.email or f"<{self.person.username}>",
        }


def _side(slug: str, *, every_role: bool) -> Side:
    world = world_of(slug)
    now = timezone.now()
    agent = f"{slug}-refunder"
    with team_scope(world.team.pk):
        token, raw = worker_token_create(name=f"{slug}-desk-token", scopes=("tools:direct",))
        policy = BudgetPolicy.objects.create(
            name=f"{slug}-refund-policy",
            agent=agent,
            max_steps=20,
            max_tokens=100_000,
            max_wall_seconds=3600,
            max_recoveries=3,
        )
        rule = ApprovalRule.objects.create(
            tool_pattern=f"{slug}_payout.*", agent=agent, created_by="tests"
        )
        external_id = f"{slug}-ticket-88123"
        item = killed_support_run(
            agent=agent, external_id=external_id, customer=f"customer@{slug}.example"
        )
        journal_key = Step.objects.get(run_id=item.run_id, index=2).idempotency_key
        assert journal_key
        free_key = f"{slug}-desk-2026-12-03-1"
        IdempotencyKey.objects.create(
            key=free_key,
            tool="email.send",
            request_hash="1" * 64,
            state="completed",
            status_code=200,
            response={"sent": True},
            locked_at=now,
            created_at=now,
            completed_at=now,
            owner_token=token,
        )
        webhook = EscalationWebhook.objects.create(
            url=f"https://hooks.{slug}.example/escalations", secret="s", created_by="tests"
        )
        mcp_tool = McpTool.objects.create(
            server=f"{slug}-files", name="read_ledger", first_seen=now, last_seen=now
        )
        export = ExportJob.objects.create(created_by_name=f"{slug}-auditor", format="jsonl")
        incident = Incident.objects.create(
            title=f"{slug} refunds sent twice",
            severity="serious",
            aware_at=now,
            report_due_at=now + timedelta(days=15),
            opened_by="tests",
            opened_at=now,
            updated_at=now,
        )
        IncidentRun.objects.create(incident=incident, run_id=item.run_id)
        Escalation.objects.create(run_id=item.run_id, step=item.step, sent_at=now)
        audit_record(actor="tests", action="test.note", target=f"run:{item.run_id}")
    alert = ChainAlert.objects.create(
        fingerprint=f"{slug}-{'0' * 40}"[:64],
        created_at=now,
        last_seen_at=now,
        message=f"Checkpoint refused: 1 break(s) in the hash chains, first in run {item.run_id}"
        " at event 2 (hash mismatch).",
        breaks=[{"run": str(item.run_id), "event": 2, "problem": "hash mismatch"}],
    )
    if every_role:
        person = User.objects.create_user(
            username=f"{slug}-everything", email=f"all@{slug}.example"
        )
        for role in ("supervisor", "admin", "auditor"):
            grant_role(person, world.team, role, actor="tests")
    else:
        person = User.objects.get(username=f"{slug}-supervisor")
        person.email = f"supervisor@{slug}.example"
        person.save(update_fields=["email"])
    return Side(
        team=world.team,
        raw_token=raw,
        token=token,
        approval_run=world.run,
        item=item,
        journal_key=journal_key,
        free_key=free_key,
        policy=policy,
        rule=rule,
        webhook=webhook,
        mcp_tool=mcp_tool,
        export=export,
        incident=incident,
        alert=alert,
        person=person,
        agent=agent,
        external_id=external_id,
    )


@dataclass
class Sides:
    a: Side
    b: Side


@pytest.fixture
def two(transactional_db: Any, settings: Any, tmp_path: Path) -> Sides:
    """Both teams' objects, committed: the gateway's writes commit their key before the tool
    runs and the `?wait=` reader reads in a connection of its own, so the matrix cannot run in
    one test transaction (a module-wide one included); each of the module's few tests builds
    them anew."""
    settings.AUDIT_SIGNING_KEY = SIGNING_KEY
    settings.AUDIT_EXPORT_DIR = str(tmp_path / "exports")
    settings.METRICS_TOKEN = "matrix-metrics-token"
    return Sides(a=_side("billing", every_role=True), b=_side("returns", every_role=False))


# -- what is compared: B's rows, and B's identifiers in an answer ------------------------------


def rows_of(side: Side) -> dict[str, str]:
    """A digest of each team-owned table's rows of the team, read under every team, of the
    team's own row and of the team's people's accounts."""
    tables = [m._meta.db_table for m in team_owned_models()]
    sql = " UNION ALL ".join(
        f"SELECT '{t}', md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), ''))"  # noqa: S608
        f" FROM {t} x WHERE x.team_id = %s"
        for t in tables
    )
    with every_team("tests"), connection.cursor() as cursor:
        cursor.execute(sql, [side.team.pk] * len(tables))
        digests = dict(cursor.fetchall())
        cursor.execute(
            "SELECT u.username, u.is_active, u.is_staff, u.is_superuser, u.email, u.password"
            " FROM auth_user u WHERE u.id IN (SELECT user_id FROM teams_membership"
            " WHERE team_id = %s) ORDER BY u.id",
            [side.team.pk],
        )
        digests["people"] = repr(cursor.fetchall())
        # the team's own row (its queue settings: /team/settings)
        cursor.execute("SELECT t::text FROM teams_team t WHERE t.id = %s", [side.team.pk])
        digests["teams_team"] = repr(cursor.fetchall())
        # the chain alert about the team's runs (alerts are org-wide rows)
        cursor.execute("SELECT a::text FROM audit_chainalert a WHERE a.id = %s", [side.alert.pk])
        digests["audit_chainalert"] = repr(cursor.fetchall())
    return digests


def changed(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(k for k in before if before[k] != after.get(k))


def body_of(response: Any) -> str:
    if getattr(response, "streaming", False):
        content = b"".join(response.streaming_content)
    else:
        content = response.content
    return content.decode("utf-8", "replace")


def _in_zip(content: bytes) -> str:
    with zipfile.ZipFile(io.BytesIO(content)) as pack:
        return "\n".join(pack.read(n).decode("utf-8", "replace") for n in pack.namelist())


def leaked(side: Side, response: Any, body: str, asked: str) -> list[str]:
    """B's identifiers in the answer's body or headers that the request did not itself carry,
    each with the text around it."""
    headers = "\n".join(f"{k}: {v}" for k, v in response.items())
    answer = body + "\n" + headers
    found = []
    for name, value in side.identifiers().items():
        if value and value in answer and value not in asked:
            at = answer.index(value)
            around = re.sub(r"\s+", " ", answer[max(at - 80, 0) : at + len(value) + 40])
            found.append(f"{name} ({around!r})")
    return sorted(found)


@dataclass
class Row:
    where: str  # "API" or "dashboard"
    name: str  # operationId or URL name
    request: str  # what was asked
    answer: str  # the cell: status (and error code) and what of B it showed
    problems: list[str] = field(default_factory=list)


def _error_code(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return str(data["error"].get("code", ""))
    return ""


# -- the worker API and the gateway ------------------------------------------------------------

HIDDEN = "hidden"  # answers 404 `not_found`, as for an object that does not exist
OWN = "own scope"  # answers for A's own team: B's objects absent
TAKEN = "taken"  # a free-form key is unique over every team (docs/teams.md): refused, no more
ABSENT = "absent"  # answers as for a key nobody made (an unscoped token's: 200, `absent`)
LIKE_NONE = "like none"  # answers as the same request about an object that does not exist
GHOST_RUN = "00000000-0000-4000-8000-00000000dead"


def _ghost_key(key: str) -> str:
    """A journal key of the same shape whose run does not exist."""
    return GHOST_RUN + key[len(GHOST_RUN) :]


@dataclass(frozen=True)
class ApiCall:
    operation: str  # the schema's operationId
    request: str
    send: Callable[[APIClient, Side], Any]
    expect: str = HIDDEN
    # the same request about an object that does not exist: when the operation's answer for one
    # is not a 404 (a gateway call names a key, not a run), B's object must get that answer
    like: Callable[[APIClient, Side], Any] | None = None


def _invoke(tool: str, args: Any, key: Callable[[Side], str] | None = None) -> Any:
    def send(client: APIClient, b: Side) -> Any:
        headers = {"Idempotency-Key": key(b)} if key else {}
        return client.post(f"/api/v1/tools/{tool}/invoke", {"arguments": args}, headers=headers)

    return send


def _item(b: Side, tail: str = "") -> str:
    return f"/api/v1/runs/{b.item.run_id}/{tail}"


def _step(index: int) -> dict[str, Any]:
    return {
        "epoch": 1,
        "index": index,
        "kind": "model",
        "name": "model.chat",
        "effect": "read",
        "arguments": {"n": index},
        "outcome": {"status": "ok", "result": {"n": index}},
    }


API_CALLS = [
    ApiCall("runs_list", "`GET /api/v1/runs/`", lambda c, b: c.get("/api/v1/runs/"), OWN),
    ApiCall(
        "runs_list",
        "`GET /api/v1/runs/?agent=` B's agent",
        lambda c, b: c.get("/api/v1/runs/", {"agent": b.agent}),
        OWN,
    ),
    ApiCall("runs_retrieve", "`GET …/runs/{B's run}/`", lambda c, b: c.get(_item(b))),
    ApiCall(
        "runs_retrieve",
        "`GET …/runs/{B's run}/?wait=0`",
        lambda c, b: c.get(_item(b), {"wait": 0}),
    ),
    ApiCall(
        "runs_retrieve",
        "`GET …/runs/{B's run}/?wait=1`",
        lambda c, b: c.get(_item(b), {"wait": 1}),
    ),
    ApiCall(
        "runs_lease",
        "`POST …/lease` on B's run in review",
        lambda c, b: c.post(_item(b, "lease"), {"worker": "billing-w"}),
    ),
    ApiCall(
        "runs_heartbeat",
        "`POST …/heartbeat` on B's leased run",
        lambda c, b: c.post(f"/api/v1/runs/{b.approval_run.pk}/heartbeat", {"epoch": 1}),
    ),
    ApiCall(
        "runs_steps_create",
        "`POST …/steps/` on B's run (index 3)",
        lambda c, b: c.post(_item(b, "steps/"), _step(3)),
    ),
    ApiCall(
        "runs_steps_retrieve",
        "`GET …/steps/2/` (B's maybe-sent step)",
        lambda c, b: c.get(_item(b, "steps/2/")),
    ),
    ApiCall(
        "runs_steps_retrieve",
        "`GET …/steps/2/?wait=1`",
        lambda c, b: c.get(_item(b, "steps/2/"), {"wait": 1}),
    ),
    ApiCall(
        "runs_steps_outcome",
        "`POST …/steps/0/outcome` (B's step awaiting approval)",
        lambda c, b: c.post(
            f"/api/v1/runs/{b.approval_run.pk}/steps/0/outcome", {"epoch": 1, "result": {}}
        ),
    ),
    ApiCall(
        "runs_complete",
        "`POST …/complete` on B's leased run",
        lambda c, b: c.post(f"/api/v1/runs/{b.approval_run.pk}/complete", {"epoch": 1}),
    ),
    ApiCall(
        "runs_fail",
        "`POST …/fail` on B's leased run",
        lambda c, b: c.post(
            f"/api/v1/runs/{b.approval_run.pk}/fail", {"epoch": 1, "error": "stop"}
        ),
    ),
    ApiCall("runs_journal", "`GET …/journal` of B's run", lambda c, b: c.get(_item(b, "journal"))),
    ApiCall("tools_list", "`GET /api/v1/tools/`", lambda c, b: c.get("/api/v1/tools/"), OWN),
    ApiCall(
        "tools_invoke",
        "`POST …/tools/kb.search/invoke` (a read, no key)",
        _invoke("kb.search", {"query": "refund"}),
        OWN,
    ),
    ApiCall(
        "tools_invoke",
        "`POST …/tools/email.send/invoke` with the key of B's open `email.send` step",
        _invoke("email.send", EMAIL, lambda b: b.journal_key),
        LIKE_NONE,
        like=_invoke("email.send", EMAIL, lambda b: _ghost_key(b.journal_key)),
    ),
    ApiCall(
        "tools_invoke",
        "`POST …/tools/email.send/invoke` with B's free-form key",
        _invoke("email.send", EMAIL, lambda b: b.free_key),
        TAKEN,
    ),
    ApiCall(
        "idempotency_retrieve",
        "`GET /api/v1/idempotency/{B's journal key}`",
        lambda c, b: c.get(f"/api/v1/idempotency/{b.journal_key}"),
        ABSENT,
    ),
    ApiCall(
        "idempotency_retrieve",
        "`GET /api/v1/idempotency/{B's free-form key}`",
        lambda c, b: c.get(f"/api/v1/idempotency/{b.free_key}"),
        ABSENT,
    ),
    # last: what these make in A carries B's names (two teams may use the same ones), which
    # A's later answers would then rightly show
    ApiCall(
        "runs_create",
        "`POST /api/v1/runs/` with B's agent and B's external id",
        lambda c, b: c.post(
            "/api/v1/runs/", {"agent": b.agent, "input": {}, "external_id": b.external_id}
        ),
        OWN,
    ),
    ApiCall(
        "mcp_tools_report",
        "`POST /api/v1/mcp/tools/` naming B's MCP server and tool",
        lambda c, b: c.post(
            "/api/v1/mcp/tools/",
            {"server": b.mcp_tool.server, "tools": [{"name": b.mcp_tool.name}]},
        ),
        OWN,
    ),
]


def schema_operations() -> set[str]:
    schema: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
    return {
        operation["operationId"]
        for methods in schema["paths"].values()
        for operation in methods.values()
        if isinstance(operation, dict) and "operationId" in operation
    }


class Recorder(APIClient):
    """An API client that remembers what it was last asked (path, query, body, headers)."""

    asked = ""

    def generic(self, method: str, path: str, data: Any = "", *args: Any, **extra: Any) -> Any:  # type: ignore[override]
        self.asked = f"{method} {path} {data!r} {extra!r}"
        return super().generic(method, path, data, *args, **extra)


def api_row(call: ApiCall, a: Side, b: Side) -> Row:
    client = Recorder()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {a.raw_token}")
    client.default_format = "json"
    before = rows_of(b)
    response = call.send(client, b)
    asked = client.asked
    body = body_of(response)
    code = _error_code(body)
    answer = f"{response.status_code}" + (f" `{code}`" if code else "")
    problems = []
    if call.expect == HIDDEN and (response.status_code, code) != (404, "not_found"):
        problems.append(f"expected 404 not_found, got {answer}: {body[:300]}")
    if call.expect == OWN:
        if response.status_code >= 300:
            problems.append(f"expected A's own answer, got {answer}: {body[:300]}")
        answer += ", for A's own team"
    if call.expect == TAKEN:
        if response.status_code < 400:
            problems.append(f"B's free-form key was reused: {answer}")
        answer += ": free-form keys are unique over every team"
    if call.expect == LIKE_NONE:
        assert call.like is not None
        nothing = call.like(client, b)
        like = f"{nothing.status_code} `{_error_code(body_of(nothing))}`"
        if like != answer:
            problems.append(f"{answer}, but {like} for no such object: {body[:300]}")
        answer += ", as for no such run"
    if call.expect == ABSENT:
        nobody = client.get("/api/v1/idempotency/a-key-nobody-made")
        if (response.status_code, response.json()["state"]) != (
            nobody.status_code,
            nobody.json()["state"],
        ):
            problems.append(f"not as a key nobody made ({nobody.status_code}): {body[:300]}")
        answer += f" `{response.json()['state']}`, as for a key nobody made"
    for name in leaked(b, response, body, asked):
        problems.append(f"B's {name} in the answer")
    for table in changed(before, rows_of(b)):
        problems.append(f"B's {table} changed")
    return Row("API", call.operation, call.request, answer, problems)


# -- the dashboard -----------------------------------------------------------------------------

NO_POST = None


@dataclass(frozen=True)
class Page:
    """A URL of the dashboard: its path parameters (by name; `pk` needs naming), whether it is
    fetched, and the body of a plausible POST (None: the view takes no POST, or a POST would end
    the session)."""

    get: bool = True
    post: Callable[[Side], dict[str, Any]] | None = NO_POST
    pk: Callable[[Side], Any] | None = None
    query: Callable[[Side], dict[str, Any]] | None = None


def _today(days: int = 0) -> str:
    return str((timezone.now() + timedelta(days=days)).date())


PAGES: dict[str, Page] = {
    "": Page(query=lambda b: {"q": b.external_id}),
    "runs/<uuid:run_id>/": Page(),
    "runs/<uuid:run_id>/verify": Page(),
    "runs/<uuid:run_id>/decide": Page(post=lambda b: {"action": "abandon", "note": "stop"}),
    "runs/<uuid:run_id>/limits": Page(post=lambda b: {"steps": "500", "note": "more"}),
    "queue/": Page(),
    "queue/count": Page(),
    "queue/bulk": Page(
        post=lambda b: {
            "items": [f"{b.item.run_id}#2", f"{b.approval_run.pk}#0"],
            "action": "abandon",
            "note": "bulk",
        }
    ),
    "queue/<uuid:run_id>/<int:index>/": Page(),
    "queue/<uuid:run_id>/<int:index>/resolve": Page(
        post=lambda b: {"action": "sent", "note": "in the mail log"}
    ),
    "queue/<uuid:run_id>/<int:index>/claim": Page(post=lambda b: {}),
    "queue/<uuid:run_id>/<int:index>/release": Page(post=lambda b: {}),
    "queue/<uuid:run_id>/<int:index>/approve": Page(post=lambda b: {"note": "ok"}),
    "queue/<uuid:run_id>/<int:index>/deny": Page(post=lambda b: {"note": "no"}),
    "queue/<uuid:run_id>/<int:index>/assign": Page(post=lambda b: {"assignee": b.person.username}),
    "console/": Page(),
    "console/runs/<uuid:run_id>/cancel": Page(post=lambda b: {"note": "stop"}),
    "console/runs/<uuid:run_id>/fork": Page(post=lambda b: {"index": "1", "note": "again"}),
    "console/bulk/": Page(
        query=lambda b: {"agent": b.agent, "action": "cancel"},
        post=lambda b: {"action": "cancel", "note": "stop all", "expected": "1"},
    ),
    "audit/exports/": Page(post=lambda b: {"format": "jsonl", "agent": ""}),
    "audit/exports/<uuid:job_id>/": Page(),
    "audit/exports/<uuid:job_id>/download": Page(),
    "audit/evidence/": Page(
        post=lambda b: {"period_from": _today(-1), "period_to": _today(), "agents": ""}
    ),
    "audit/runs/<uuid:run_id>/export": Page(),
    "audit/runs/<uuid:run_id>/legal-hold": Page(post=lambda b: {"hold": "on", "note": "court"}),
    "audit/checkpoints/": Page(),
    "audit/checkpoints/now": Page(post=lambda b: {}),
    "audit/alerts/<int:alert_id>/acknowledge": Page(post=lambda b: {"note": "seen"}),
    "audit/retention/": Page(),
    "audit/incidents/": Page(
        post=lambda b: {
            "title": "ours",
            "severity": "serious",
            "aware_at": timezone.now().strftime("%Y-%m-%dT%H:%M"),
            "runs": str(b.item.run_id),
        }
    ),
    "audit/incidents/<int:incident_id>/": Page(
        post=lambda b: {"status": "reported", "notes": "x", "note": "x"}
    ),
    "audit-log/": Page(query=lambda b: {"target": f"run:{b.item.run_id}"}),
    "notifications/": Page(
        post=lambda b: {"url": "https://hooks.billing.example/new", "secret": "s"}
    ),
    "notifications/<int:webhook_id>/active": Page(post=lambda b: {"active": ""}),
    "notifications/<int:webhook_id>/delete": Page(post=lambda b: {"confirm": "yes"}),
    "notifications/<int:webhook_id>/test": Page(post=lambda b: {}),
    "policies/": Page(),
    "policies/new": Page(),
    "policies/<int:pk>/": Page(
        pk=lambda b: b.policy.pk,
        post=lambda b: {
            "name": b.policy.name,
            "agent": b.agent,
            "max_steps": "1",
            "max_tokens": "1",
            "max_wall_seconds": "1",
            "max_recoveries": "0",
            "note": "x",
        },
    ),
    "policies/<int:pk>/delete": Page(pk=lambda b: b.policy.pk, post=lambda b: {"confirm": "yes"}),
    "approval-rules/": Page(),
    "approval-rules/new": Page(),
    "approval-rules/<int:pk>/": Page(
        pk=lambda b: b.rule.pk,
        post=lambda b: {"tool_pattern": "x.*", "agent": b.agent, "note": "x"},
    ),
    "tokens/": Page(),
    "tokens/<int:token_id>/revoke": Page(post=lambda b: {"confirm": "yes"}),
    "mcp-tools/": Page(),
    "mcp-tools/<int:tool_id>/mark": Page(post=lambda b: {"mark": "write", "note": "x"}),
    "people/": Page(),
    "people/new": Page(),
    "people/<int:user_id>/groups": Page(post=lambda b: {"groups": []}),
    "people/<int:user_id>/deactivate": Page(post=lambda b: {}),
    "people/<int:user_id>/reactivate": Page(post=lambda b: {}),
    # a role in A's own team for B's supervisor (of B only: out of A's admin's sight)
    "people/<int:user_id>/role": Page(post=lambda b: {"team": "billing", "role": "supervisor"}),
    "team/": Page(post=lambda b: {"team": b.team.slug, "next": "/queue/"}),
    "teams/": Page(post=lambda b: {"slug": f"{b.team.slug}-two", "name": "Two"}),
    "team/settings": Page(
        post=lambda b: {"review_sla_minutes": "5", "escalation_email": "desk@example.com"}
    ),
    "login/": Page(),
    "logout/": Page(get=False),  # any request there ends the session
    "password/": Page(),
    "sso/start/": Page(),
    "sso/callback/": Page(),
    "metrics": Page(),
    "favicon.ico": Page(),
    "api/v1/schema/": Page(),
    "api/v1/docs/": Page(),
}

# the worker API's views (API_CALLS covers them, from the schema) and the API's catch-all 404
API_VIEW_MODULES = ("runs.hotpath", "runs.apis", "runs.waiting", "tools.apis")
ADMIN = "django-admin/"  # the Django admin: staff (org admins) only; a team's people are not


def dashboard_routes() -> list[tuple[str, Any]]:
    """Every route of the URL configuration but the worker API's: (route, callback)."""
    found: list[tuple[str, Any]] = []

    def walk(patterns: Any, prefix: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                route = prefix + str(p.pattern)
                module = getattr(p.callback, "__module__", "")
                if module in API_VIEW_MODULES or route.startswith("^api/"):
                    continue
                found.append((route, p.callback))

    walk(get_resolver().url_patterns, "")
    return found


GHOST_ID = 2_000_000_000
GHOSTS: dict[str, Any] = {
    "run_id": GHOST_RUN,
    "job_id": GHOST_RUN,
    **dict.fromkeys(
        ("incident_id", "webhook_id", "token_id", "tool_id", "alert_id", "user_id", "pk"),
        GHOST_ID,
    ),
}


def _path_for(route: str, page: Page, b: Side, *, ghost: bool = False) -> str:
    """The route's path with B's objects in it (with `ghost`: objects that do not exist)."""
    values: dict[str, Any] = {
        "run_id": b.item.run_id,
        "index": 2,
        "job_id": b.export.pk,
        "incident_id": b.incident.pk,
        "webhook_id": b.webhook.pk,
        "token_id": b.token.pk,
        "tool_id": b.mcp_tool.pk,
        "alert_id": b.alert.pk,
        "user_id": b.person.pk,
    }
    if page.pk is not None:
        values["pk"] = page.pk(b)
    if "/approve" in route or "/deny" in route:  # B's step awaiting approval
        values.update(run_id=b.approval_run.pk, index=0)
    if ghost:
        values.update(GHOSTS)

    def fill(match: re.Match[str]) -> str:
        return str(values[match.group(2)])

    path = re.sub(r"<(?:(\w+):)?(\w+)>", fill, route)
    return "/" + path


def _admin_path(route: str, b: Side) -> str:
    path = re.sub(r"\^|\$|\(\?P<\w+>[^)]*\)", "", route)
    path = re.sub(r"<(?:\w+:)?(\w+)>", str(b.person.pk), path)
    return "/" + path


B_OBJECT_PARAMS = (
    "run_id",
    "job_id",
    "incident_id",
    "webhook_id",
    "token_id",
    "tool_id",
    "alert_id",
    "user_id",
    "pk",
)


def dashboard_rows(a: Side, b: Side, person: User) -> list[Row]:
    client = Client()
    client.force_login(person)
    rows = []
    previous = ""  # a page shows the previous request's flash message, which may echo it
    for route, _ in dashboard_routes():
        if route.startswith(ADMIN):
            page, path = Page(), _admin_path(route, b)
        else:
            page = PAGES[route]
            path = _path_for(route, page, b)
        names_b_object = any(f":{p}>" in route or f"<{p}>" in route for p in B_OBJECT_PARAMS)
        methods = (["GET"] if page.get else []) + (["POST"] if page.post else [])
        for method in methods:
            data = (page.query(b) if page.query else {}) if method == "GET" else page.post(b)  # type: ignore[misc]
            before = rows_of(b)
            response = client.get(path, data) if method == "GET" else client.post(path, data)
            body = body_of(response)
            asked = f"{path} {data!r} {previous}"
            previous = f"{path} {data!r}"
            answer = str(response.status_code)
            if response.status_code in (301, 302):
                answer += " to `" + _stable(response["Location"]) + "`"
            problems = []
            if names_b_object and not route.startswith(ADMIN):
                # B's object answers as one that does not exist
                ghost = _path_for(route, page, b, ghost=True)
                nothing = client.get(ghost, data) if method == "GET" else client.post(ghost, data)
                like = str(nothing.status_code)
                if nothing.status_code in (301, 302):
                    like += " to `" + _stable(nothing["Location"]) + "`"
                if like != answer:
                    problems.append(f"{method} {path}: {answer}, but {like} for no such object")
                elif response.status_code != 404:
                    answer += ", as for no such object"
            if response.status_code >= 500:
                problems.append(f"{method} {path}: server error")
            for name in leaked(b, response, body, asked):
                problems.append(f"{method} {path}: B's {name} in the page")
            for table in changed(before, rows_of(b)):
                problems.append(f"{method} {path}: B's {table} changed")
            shown = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route) if route else "/"
            request = f"{method} `{path if route.startswith(ADMIN) else shown}`"
            rows.append(Row("dashboard", route or "/", request, answer, problems))
    return rows


def _stable(location: str) -> str:
    """A redirect's target without its query and with a new object's id as `{id}`."""
    location = re.sub(r"\?.*", "", location)
    return re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "{id}", location)


# -- the tests ---------------------------------------------------------------------------------


def test_every_operation_of_the_schema_has_a_request_in_the_matrix() -> None:
    missing = schema_operations() - {call.operation for call in API_CALLS}
    assert not missing, f"add an ApiCall to API_CALLS in {__file__} for: {sorted(missing)}"


def test_every_dashboard_url_has_a_row_in_the_matrix() -> None:
    missing = [
        route
        for route, _ in dashboard_routes()
        if route not in PAGES and not route.startswith(ADMIN)
    ]
    assert not missing, f"add a Page to PAGES in {__file__} for: {missing}"


def test_team_a_reaches_nothing_of_team_b_and_the_doc_says_so(two: Sides, tmp_path: Path) -> None:
    a, b = two.a, two.b
    # the dashboard first: the API's last calls make rows in A with B's names (API_CALLS)
    pages = dashboard_rows(a, b, a.person)
    rows = [api_row(call, a, b) for call in API_CALLS] + pages
    problems = [f"{r.where} {r.name} {r.request}: {p}" for r in rows for p in r.problems]
    assert not problems, "\n".join(problems)
    _compare_doc(_table(rows, b), tmp_path)


def test_an_org_admin_gets_every_page(two: Sides) -> None:
    admin = User.objects.create_superuser(username="org-admin", password="x")
    client = Client()
    client.force_login(admin)
    failures = []
    for route, _ in dashboard_routes():
        if route.startswith(ADMIN) or not PAGES[route].get:
            continue
        page = PAGES[route]
        path = _path_for(route, page, two.b)
        response = client.get(path, page.query(two.b) if page.query else {})
        body_of(response)
        if response.status_code >= 500:
            failures.append(f"GET {path}: {response.status_code}")
    assert not failures, failures


def _table(rows: list[Row], b: Side) -> str:
    lines = [
        "# Team isolation: every operation and page, team A against team B",
        "",
        "Generated by `tests/teams/test_isolation_matrix.py`, which builds two teams, `billing` (A)",
        "and `returns` (B), each with a full set of objects (runs with a step awaiting approval and a",
        "maybe-sent step on the desk, an approval request, a budget policy, an approval rule, a",
        "webhook, a worker token, an MCP tool report, an export job, an incident, audit entries, an",
        "escalation, a free-form idempotency key), then calls every operation of the worker API and",
        "the gateway (from the OpenAPI schema) with A's token on B's objects, and requests every",
        "dashboard URL (from the URL configuration) with B's object ids as a person who holds every",
        "role (supervisor, admin, auditor) in A only. Do not edit this file by hand: `UPDATE_DOCS=1`",
        "regenerates it (see the test's docstring). In the dashboard's rows a path parameter",
        "(`{run_id}`, `{pk}`...) is B's object of that kind: a run in review (step 2 maybe sent;",
        "step 0 of another run awaits approval), B's policy or approval rule, webhook, token, MCP",
        "tool, export job, incident, chain alert, supervisor.",
        "",
        "Every row passed these checks: an answer about B's object is a 404 (`not_found` in the",
        "API), as for an object that does not exist; a list, count or export is A's own; no",
        "identifier of B (run ids, external id, idempotency keys, token, policy and webhook names,",
        "agent, MCP server, incident title, export id) is in any body or header; and none of B's",
        "rows (every team-owned table, read under every team) nor B's people changed. Where an",
        "answer is not a 404 (a form's redirect, a gateway refusal), the same request about an",
        "object that does not exist gets the same answer (`as for no such object`). A 403 answers",
        "what A's roles do not allow whatever the object (the Teams page is an org admin's; the",
        "people page's groups stand for roles in `default`). See [Teams](teams.md) for the",
        "boundary behind it.",
        "",
        "## The worker API and the gateway (team A's token)",
        "",
        "| operation | request | answer |",
        "|---|---|---|",
    ]
    for row in rows:
        if row.where == "API":
            lines.append(f"| `{row.name}` | {row.request} | {row.answer} |")
    lines += [
        "",
        "## The dashboard (a person with every role in team A)",
        "",
        "The Django admin's pages (`/django-admin/...`) are for org admins (staff) only: a team's",
        "people are sent to its login.",
        "",
        "| URL | request | answer |",
        "|---|---|---|",
    ]
    for row in rows:
        if row.where == "dashboard" and not row.name.startswith(ADMIN):
            lines.append(f"| `{row.name}` | {row.request} | {row.answer} |")
    admin = sorted({r.answer for r in rows if r.where == "dashboard" and r.name.startswith(ADMIN)})
    lines.append(f"| `django-admin/...` (every admin URL) | GET | {', '.join(admin)} |")
    return "\n".join(lines) + "\n"


def _compare_doc(text: str, tmp_path: Path) -> None:
    generated = tmp_path / "team-isolation.md"
    generated.write_text(text)
    if os.environ.get("UPDATE_DOCS") == "1":
        MATRIX_DOC.write_text(text)
    committed = MATRIX_DOC.read_text() if MATRIX_DOC.exists() else ""
    diff = "".join(
        difflib.unified_diff(
            committed.splitlines(keepends=True),
            text.splitlines(keepends=True),
            "docs/team-isolation.md (committed)",
            "what the matrix sees now",
        )
    )
    assert not diff, (
        f"docs/team-isolation.md is not what the matrix sees:\n{diff}\nIf the change is "
        "deliberate, regenerate it: UPDATE_DOCS=1 .venv/bin/python -m pytest -p no:cacheprovider "
        "tests/teams/test_isolation_matrix.py"
    )
