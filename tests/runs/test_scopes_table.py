"""docs/scopes.md: every API operation against every kind of token, as the API answers it.

The table is generated here by calling each operation with each token on a fresh run of agent
`support`, and compared with the committed file; a difference fails with the diff. The
operations come from the OpenAPI schema, so a new endpoint without a row here fails too.
Regenerate after a deliberate change with

    UPDATE_DOCS=1 .venv/bin/python -m pytest -p no:cacheprovider tests/runs/test_scopes_table.py

(the only way this test writes a tracked file).
"""

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from runs.tokens import worker_token_create
from tools.models import IdempotencyKey

pytestmark = pytest.mark.django_db(transaction=True)  # ?wait= readers see committed rows only

ROOT = Path(__file__).resolve().parent.parent.parent
SCOPES_DOC = ROOT / "docs" / "scopes.md"
EMAIL = {"to": "alice@example.com", "subject": "Refund", "body": "Sent to your IBAN."}
FREE_FORM_KEY = "support-desk-2026-12-03-1"

# the kinds of token: (agents, scopes)
TOKENS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "unscoped": ((), ()),
    "scoped to the run's agent": (("support",), ()),
    "scoped to another agent": (("triage",), ()),
    "`tools:direct`, scoped to the run's agent": (("support",), ("tools:direct",)),
    "`tools:direct`, scoped to another agent": (("triage",), ("tools:direct",)),
}


@dataclass
class Scene:
    """A run of agent `support` (pending, or leased with a done read step 0 and, when `open_write`,
    an open email.send intent at step 1), and a free-form key the support desk's direct token made."""

    run: str
    epoch: int
    step_key: str


@dataclass(frozen=True)
class Call:
    operation: str  # the schema's operationId
    request: str  # what the row says was asked
    send: Callable[[APIClient, Scene], Any]
    leased: bool = True
    open_write: bool = True
    listed: bool = False  # the answer is a runs list: say whether the scene's run is in it


def _step(index: int, **extra: Any) -> dict[str, Any]:
    return {
        "index": index,
        "kind": "model",
        "name": "model.chat",
        "effect": "read",
        "arguments": {"n": index},
        "outcome": {"status": "ok", "result": {"n": index}},
        **extra,
    }


def _invoke(name: str, args: Any, key: str | None = None) -> Callable[[APIClient, Scene], Any]:
    def send(client: APIClient, scene: Scene) -> Any:
        chosen = {
            "step": scene.step_key,
            "free": FREE_FORM_KEY,
            "new": f"new-free-form-key-{scene.run}",  # each cell's run is new, so is this key
        }.get(key or "", key)
        headers = {"Idempotency-Key": chosen} if chosen else {}
        return client.post(f"/api/v1/tools/{name}/invoke", {"arguments": args}, headers=headers)

    return send


CALLS = [
    Call(
        "runs_create",
        "`POST /api/v1/runs/` for agent `support`",
        lambda c, s: c.post("/api/v1/runs/", {"agent": "support", "input": {}}),
        leased=False,
    ),
    Call(
        "runs_list",
        "`GET /api/v1/runs/?agent=support`",
        lambda c, s: c.get("/api/v1/runs/", {"agent": "support"}),
        listed=True,
    ),
    Call("runs_retrieve", "`GET /api/v1/runs/{id}/`", lambda c, s: c.get(f"/api/v1/runs/{s.run}/")),
    Call(
        "runs_retrieve",
        "`GET /api/v1/runs/{id}/?wait=0`",
        lambda c, s: c.get(f"/api/v1/runs/{s.run}/", {"wait": 0}),
    ),
    Call(
        "runs_retrieve",
        "`GET /api/v1/runs/{id}/?wait=soon` (malformed)",
        lambda c, s: c.get(f"/api/v1/runs/{s.run}/", {"wait": "soon"}),
    ),
    Call(
        "runs_lease",
        "`POST …/lease` (a pending run)",
        lambda c, s: c.post(f"/api/v1/runs/{s.run}/lease", {"worker": "w-2"}),
        leased=False,
    ),
    Call(
        "runs_heartbeat",
        "`POST …/heartbeat`",
        lambda c, s: c.post(f"/api/v1/runs/{s.run}/heartbeat", {"epoch": s.epoch}),
    ),
    Call(
        "runs_steps_create",
        "`POST …/steps/` (a read step with its outcome)",
        lambda c, s: c.post(f"/api/v1/runs/{s.run}/steps/", {"epoch": s.epoch, **_step(2)}),
    ),
    Call(
        "runs_steps_create",
        '`POST …/steps/` with `"invoke": true` (`kb.search`)',
        lambda c, s: c.post(
            f"/api/v1/runs/{s.run}/steps/",
            {
                "epoch": s.epoch,
                "index": 1,
                "kind": "tool",
                "name": "kb.search",
                "effect": "read",
                "arguments": {"query": "refund"},
                "invoke": True,
            },
        ),
        open_write=False,
    ),
    Call(
        "runs_steps_retrieve",
        "`GET …/steps/1/`",
        lambda c, s: c.get(f"/api/v1/runs/{s.run}/steps/1/"),
    ),
    Call(
        "runs_steps_retrieve",
        "`GET …/steps/1/?wait=1`",
        lambda c, s: c.get(f"/api/v1/runs/{s.run}/steps/1/", {"wait": 1}),
    ),
    Call(
        "runs_steps_retrieve",
        "`GET …/steps/7/` (no such step)",
        lambda c, s: c.get(f"/api/v1/runs/{s.run}/steps/7/"),
    ),
    Call(
        "runs_steps_outcome",
        "`POST …/steps/1/outcome`",
        lambda c, s: c.post(
            f"/api/v1/runs/{s.run}/steps/1/outcome", {"epoch": s.epoch, "result": {"sent": 1}}
        ),
    ),
    Call(
        "runs_complete",
        "`POST …/complete` (every write answered)",
        lambda c, s: c.post(f"/api/v1/runs/{s.run}/complete", {"epoch": s.epoch, "output": 1}),
        open_write=False,
    ),
    Call(
        "runs_complete",
        "`POST …/complete` (a write still open)",
        lambda c, s: c.post(f"/api/v1/runs/{s.run}/complete", {"epoch": s.epoch, "output": 1}),
    ),
    Call(
        "runs_fail",
        "`POST …/fail` (every write answered)",
        lambda c, s: c.post(f"/api/v1/runs/{s.run}/fail", {"epoch": s.epoch, "error": "x"}),
        open_write=False,
    ),
    Call(
        "runs_journal",
        "`GET …/journal`",
        lambda c, s: c.get(f"/api/v1/runs/{s.run}/journal"),
    ),
    Call("tools_list", "`GET /api/v1/tools/`", lambda c, s: c.get("/api/v1/tools/")),
    Call(
        "tools_invoke",
        "`POST /api/v1/tools/kb.search/invoke` (read, no key)",
        _invoke("kb.search", {"query": "refund"}),
    ),
    Call(
        "tools_invoke",
        "`POST /api/v1/tools/email.send/invoke`, the open step's key",
        _invoke("email.send", EMAIL, "step"),
    ),
    Call(
        "tools_invoke",
        "`POST /api/v1/tools/email.send/invoke`, the support desk's free-form key",
        _invoke("email.send", EMAIL, "free"),
    ),
    Call(
        "tools_invoke",
        "`POST /api/v1/tools/email.send/invoke`, a new free-form key",
        _invoke("email.send", EMAIL, "new"),
    ),
    Call(
        "idempotency_retrieve",
        "`GET /api/v1/idempotency/{key}`, the open step's key",
        lambda c, s: c.get(f"/api/v1/idempotency/{s.step_key}"),
    ),
    Call(
        "idempotency_retrieve",
        "`GET /api/v1/idempotency/{key}`, the support desk's free-form key",
        lambda c, s: c.get(f"/api/v1/idempotency/{FREE_FORM_KEY}"),
    ),
    Call(
        "idempotency_retrieve",
        "`GET /api/v1/idempotency/{key}`, a key nobody made",
        lambda c, s: c.get("/api/v1/idempotency/nobody-made-this"),
    ),
    Call(
        "mcp_tools_report",
        "`POST /api/v1/mcp/tools/`",
        lambda c, s: c.post("/api/v1/mcp/tools/", {"server": "files", "tools": []}),
    ),
]


def _client(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    client.default_format = "json"
    return client


def _scene(owner: APIClient, desk: APIClient, call: Call) -> Scene:
    run = owner.post("/api/v1/runs/", {"agent": "support", "input": {}}).json()["id"]
    if not call.leased:
        return Scene(run=run, epoch=0, step_key="")
    epoch = owner.post(f"/api/v1/runs/{run}/lease", {"worker": "w-1"}).json()["epoch"]
    assert owner.post(f"/api/v1/runs/{run}/steps/", {"epoch": epoch, **_step(0)}).status_code == 201
    key = ""
    if call.open_write:
        step = owner.post(
            f"/api/v1/runs/{run}/steps/",
            {
                "epoch": epoch,
                "index": 1,
                "kind": "tool",
                "name": "email.send",
                "effect": "write",
                "enforced_by": "ledger",
                "arguments": EMAIL,
            },
        )
        assert step.status_code == 201, step.content
        key = step.json()["idempotency_key"]
    if not IdempotencyKey.objects.filter(key=FREE_FORM_KEY).exists():
        made = desk.post(
            "/api/v1/tools/email.send/invoke",
            {"arguments": EMAIL},
            headers={"Idempotency-Key": FREE_FORM_KEY},
        )
        assert made.status_code == 200, made.content
    return Scene(run=run, epoch=epoch, step_key=key)


def _cell(call: Call, response: Any, scene: Scene) -> str:
    text = str(response.status_code)
    body: Any = response.json() if response.content else None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        text += f" `{body['error']['code']}`"
    if call.listed and response.status_code == 200:
        seen = any(r["id"] == scene.run for r in body["runs"])
        text += ", the run listed" if seen else ", the run not listed"
    return text


def _table() -> str:
    _, owner_raw = worker_token_create(name="scopes-owner")
    _, desk_raw = worker_token_create(
        name="support-desk", agents=("support",), scopes=("tools:direct",)
    )
    owner, desk = _client(owner_raw), _client(desk_raw)
    clients = {
        kind: _client(worker_token_create(name=f"scopes-{i}", agents=agents, scopes=scopes)[1])
        for i, (kind, (agents, scopes)) in enumerate(TOKENS.items())
    }
    lines = [
        "# Scopes: every API operation against every kind of token",
        "",
        "Generated by `tests/runs/test_scopes_table.py`, which calls each operation with each kind",
        "of token on a fresh run of agent `support` and compares the answers with this file; do not",
        "edit it by hand (`UPDATE_DOCS=1` regenerates it, see the test's docstring). A cell is the",
        "HTTP status and the error code. The run is leased, with a done read step 0 and an open",
        "`email.send` intent at step 1, unless the request says otherwise; the support desk's",
        "free-form key was made by a `tools:direct` token limited to agent `support`.",
        "",
        "A token that may not see the run gets the same 404 `not_found` as for a run that does not",
        "exist, on every operation (the `?wait=` forms and a malformed request included); see",
        "[the API's authentication section](api.md#authentication).",
        "",
        "| operation | request | " + " | ".join(TOKENS) + " |",
        "|---|---|" + "---|" * len(TOKENS),
    ]
    for call in CALLS:
        cells = []
        for client in clients.values():
            scene = _scene(owner, desk, call)
            cells.append(_cell(call, call.send(client, scene), scene))
        lines.append(f"| `{call.operation}` | {call.request} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _schema_operations() -> set[str]:
    schema: dict[str, Any] = SchemaGenerator().get_schema(request=None, public=True)
    return {
        operation["operationId"]
        for methods in schema["paths"].values()
        for operation in methods.values()
        if isinstance(operation, dict) and "operationId" in operation
    }


def test_every_operation_of_the_schema_has_a_row() -> None:
    missing = _schema_operations() - {call.operation for call in CALLS}
    assert not missing, f"add a Call to CALLS in {__file__} for: {sorted(missing)}"


def test_docs_scopes_md_is_what_the_api_answers(tmp_path: Path) -> None:
    generated = tmp_path / "scopes.md"
    generated.write_text(_table())
    if os.environ.get("UPDATE_DOCS") == "1":
        SCOPES_DOC.write_text(generated.read_text())
    committed = SCOPES_DOC.read_text() if SCOPES_DOC.exists() else ""
    diff = "".join(
        difflib.unified_diff(
            committed.splitlines(keepends=True),
            generated.read_text().splitlines(keepends=True),
            "docs/scopes.md (committed)",
            "what the API answers now",
        )
    )
    assert not diff, (
        f"docs/scopes.md is not what the API answers:\n{diff}\n"
        "If the change is deliberate, regenerate it: UPDATE_DOCS=1 .venv/bin/python -m pytest "
        "-p no:cacheprovider tests/runs/test_scopes_table.py"
    )
