"""Hostile input, hand-written: every refusal names its code and writes nothing at all.

Each case asserts the status, the error code, and a snapshot of the journal (rows of every
table, the run's counters, its chain head) taken before and after: no Step, no Event, no usage.
"""

import json
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from runs.models import Run, Step
from tests.reliability.helpers import snapshot
from tests.runs.journal_client import JournalClient

HOSTILE_STRINGS = [
    "'; DROP TABLE runs_step; --",
    '" OR 1=1 --',
    "Robert'); DELETE FROM runs_event WHERE ('1'='1",
    "<script>alert('x')</script>",
    '<img src=x onerror="alert(1)">',
    "{{ 7*7 }} {% debug %}",
    "../../../../etc/passwd",
    "%00%27%22",
    "日本語 ✓ émoji 🦆",
]


@pytest.fixture
def leased(api: APIClient) -> dict[str, Any]:
    """A leased run with one write step open (intent recorded, outcome pending)."""
    journal = JournalClient(api)
    run = journal.create(external_id="hostile")
    epoch = journal.lease(run["id"]).json()["epoch"]
    assert journal.intent(run["id"], epoch, 0).status_code == 201
    return {"id": run["id"], "epoch": epoch}


def _valid_bodies(epoch: int) -> dict[str, dict[str, Any]]:
    return {
        "create": {"agent": "support", "input": {}},
        "lease": {"worker": "w-2", "ttl_seconds": 30},
        "heartbeat": {"epoch": epoch},
        "intent": {
            "epoch": epoch,
            "index": 1,
            "kind": "model",
            "name": "model.chat",
            "effect": "read",
            "arguments": {"q": 1},
            "outcome": {"status": "ok", "result": {}, "usage": {"input_tokens": 1}},
        },
        "outcome": {"epoch": epoch, "status": "ok", "result": {}, "usage": {"input_tokens": 1}},
        "complete": {"epoch": epoch, "output": {"ok": True}},
        "fail": {"epoch": epoch, "error": {"why": "x"}},
    }


def _paths(run_id: str) -> dict[str, str]:
    return {
        "create": "/api/v1/runs/",
        "lease": f"/api/v1/runs/{run_id}/lease",
        "heartbeat": f"/api/v1/runs/{run_id}/heartbeat",
        "intent": f"/api/v1/runs/{run_id}/steps/",
        "outcome": f"/api/v1/runs/{run_id}/steps/0/outcome",
        "complete": f"/api/v1/runs/{run_id}/complete",
        "fail": f"/api/v1/runs/{run_id}/fail",
    }


OPERATIONS = ["create", "lease", "heartbeat", "intent", "outcome", "complete", "fail"]


def _refused(
    api: APIClient,
    run_id: str,
    path: str,
    raw: bytes,
    *,
    status: int,
    code: str,
    content_type: str = "application/json",
) -> dict[str, Any]:
    before = snapshot(run_id)
    response = api.generic("POST", path, raw, content_type=content_type)  # type: ignore[arg-type]
    assert response.status_code == status, (path, response.status_code, response.content[:300])
    body = response.json()
    assert body["error"]["code"] == code, body
    assert set(body["error"]) == {"code", "message", "details"}
    assert snapshot(run_id) == before, f"{path} wrote something while refusing"
    return body


def _everywhere(body: dict[str, Any], poison: Any) -> dict[str, Any]:
    """`body` with every JSON-valued field (input, arguments, result, output, error) poisoned."""
    poisoned = {**body, "extra": poison}
    for field in ("input", "arguments", "result", "output", "error"):
        if field in poisoned:
            poisoned[field] = {"v": poison}
    if "outcome" in poisoned:
        poisoned["outcome"] = {**poisoned["outcome"], "result": {"v": poison}}
    for field in ("agent", "worker", "name"):
        if field in poisoned and isinstance(poison, str):
            poisoned[field] = poison
    return poisoned


def _nested(depth: int) -> bytes:
    return ("[" * depth + "]" * depth).encode()


BAD_BODIES: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "nested_100_levels": lambda body: json.dumps({**body, "x": json.loads(_nested(100))}).encode(),
    "nested_100000_levels": lambda body: b'{"x":' + _nested(100_000) + b"}",
    "not_utf8": lambda body: json.dumps(body).encode()[:-1] + b',"x":"\xff\xfe\xc3\x28"}',
    "latin1": lambda body: json.dumps({**body, "x": "café"}, ensure_ascii=False).encode("latin-1"),
    "nan": lambda body: json.dumps({**body, "x": float("nan")}).encode(),
    "infinity": lambda body: json.dumps({**body, "x": float("inf")}).encode(),
    "minus_infinity": lambda body: json.dumps({**body, "x": float("-inf")}).encode(),
    "float_overflowing_to_infinity": lambda body: json.dumps(body).encode()[:-1] + b',"x":1e999}',
    "nul_in_value": lambda body: json.dumps({**body, "x": "a\u0000b"}).encode(),
    "nul_in_key": lambda body: json.dumps({**body, "a\u0000": 1}).encode(),
    "lone_surrogate": lambda body: json.dumps(body).encode()[:-1] + b',"x":"\\ud800"}',
    "lone_surrogate_in_every_value": lambda body: json.dumps(_everywhere(body, "a\ud800")).encode(),
    "lone_surrogate_in_a_key": lambda body: json.dumps(_everywhere(body, {"\udfff": 1})).encode(),
    "nul_in_every_value": lambda body: json.dumps(_everywhere(body, "a\u0000")).encode(),
    "truncated": lambda body: json.dumps(body).encode()[:-3],
    "empty_object_garbage": lambda body: b"{}}",
    "huge_integer_literal": lambda body: (
        json.dumps(body).encode()[:-1] + b',"x":' + b"9" * 5000 + b"}"
    ),
}


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_malformed_json_is_refused_with_400_and_writes_nothing(
    api: APIClient, leased: dict[str, Any], operation: str, case: str
) -> None:
    body = _valid_bodies(leased["epoch"])[operation]
    raw = BAD_BODIES[case](body)
    _refused(
        api, leased["id"], _paths(leased["id"])[operation], raw, status=400, code="malformed_json"
    )


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_ten_megabyte_body_is_refused_with_413_and_writes_nothing(
    api: APIClient, leased: dict[str, Any], operation: str
) -> None:
    body = _valid_bodies(leased["epoch"])[operation]
    raw = json.dumps({**body, "padding": "x" * (10 * 1024 * 1024)}).encode()
    _refused(
        api,
        leased["id"],
        _paths(leased["id"])[operation],
        raw,
        status=413,
        code="payload_too_large",
    )


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize(
    "raw", [b"[]", b'"a string"', b"42", b"null", b"true", b"[{}]"], ids=lambda r: r.decode()
)
def test_a_body_that_is_not_an_object_is_a_validation_error(
    api: APIClient, leased: dict[str, Any], operation: str, raw: bytes
) -> None:
    _refused(
        api, leased["id"], _paths(leased["id"])[operation], raw, status=400, code="validation_error"
    )


@pytest.mark.parametrize("operation", OPERATIONS)
def test_form_encoded_and_text_bodies_are_unsupported_media_types(
    api: APIClient, leased: dict[str, Any], operation: str
) -> None:
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
        _refused(
            api,
            leased["id"],
            _paths(leased["id"])[operation],
            b"epoch=1&index=0",
            status=415,
            code="unsupported_media_type",
            content_type=content_type,
        )


# --- wrong types, out-of-range numbers, negative usage, overlong strings -------------------

FIELD_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("create", {"agent": True}, "agent"),
    ("create", {"agent": ["support"]}, "agent"),
    ("create", {"agent": ""}, "agent"),
    ("create", {"agent": "a" * 101}, "agent"),
    ("create", {"agent": "'; DROP TABLE runs_run; --"}, "agent"),
    ("create", {"external_id": "x" * 201}, "external_id"),
    ("create", {"external_id": {"a": 1}}, "external_id"),
    ("lease", {"ttl_seconds": 4}, "ttl_seconds"),
    ("lease", {"ttl_seconds": 601}, "ttl_seconds"),
    ("lease", {"ttl_seconds": "soon"}, "ttl_seconds"),
    ("lease", {"worker": "w" * 201}, "worker"),
    ("lease", {"worker": ["w"]}, "worker"),
    ("heartbeat", {"epoch": -1}, "epoch"),
    ("heartbeat", {"epoch": "one"}, "epoch"),
    ("heartbeat", {"epoch": 1.5}, "epoch"),
    ("heartbeat", {"epoch": None}, "epoch"),
    ("intent", {"index": -1}, "index"),
    ("intent", {"index": 100_001}, "index"),
    ("intent", {"index": 10**30}, "index"),
    ("intent", {"index": "zero"}, "index"),
    ("intent", {"kind": "shell"}, "kind"),
    ("intent", {"effect": "maybe"}, "effect"),
    ("intent", {"enforced_by": "ledger"}, "enforced_by"),
    ("intent", {"name": "n" * 201}, "name"),
    ("intent", {"name": None}, "name"),
    ("intent", {"arguments": [1, 2]}, "arguments"),
    ("intent", {"arguments": "a string"}, "arguments"),
    ("intent", {"arguments": None}, "arguments"),
    ("intent", {"outcome": {"status": "maybe"}}, "outcome"),
    ("intent", {"outcome": {"usage": {"input_tokens": -5}}}, "outcome"),
    (
        "intent",
        {
            "effect": "write",
            "kind": "tool",
            "enforced_by": "ledger",
            "outcome": {"status": "ok", "result": {}},
        },
        "outcome",
    ),
    ("outcome", {"usage": {"input_tokens": -1}}, "usage"),
    ("outcome", {"usage": {"output_tokens": -1}}, "usage"),
    ("outcome", {"usage": {"cost_usd": "-0.01"}}, "usage"),
    ("outcome", {"usage": {"cost_usd": "NaN"}}, "usage"),
    ("outcome", {"usage": {"cost_usd": "Infinity"}}, "usage"),
    ("outcome", {"usage": {"cost_usd": "1e400"}}, "usage"),
    ("outcome", {"usage": {"cost_usd": "99999999999999"}}, "usage"),
    ("outcome", {"usage": {"input_tokens": 10**13}}, "usage"),
    ("outcome", {"usage": {"input_tokens": "many"}}, "usage"),
    ("outcome", {"usage": "lots"}, "usage"),
    ("outcome", {"status": "done"}, "status"),
    ("outcome", {"epoch": -3}, "epoch"),
    ("complete", {"epoch": "x"}, "epoch"),
    ("fail", {"epoch": []}, "epoch"),
]


@pytest.mark.parametrize(
    ("operation", "change", "field"),
    FIELD_CASES,
    ids=[f"{op}-{field}-{i}" for i, (op, _, field) in enumerate(FIELD_CASES)],
)
def test_wrong_types_and_out_of_range_values_are_400_with_field_details(
    api: APIClient, leased: dict[str, Any], operation: str, change: dict[str, Any], field: str
) -> None:
    body = {**_valid_bodies(leased["epoch"])[operation], **change}
    body = _refused(
        api,
        leased["id"],
        _paths(leased["id"])[operation],
        json.dumps(body).encode(),
        status=400,
        code="validation_error",
    )
    assert field in body["error"]["details"], body


@pytest.mark.parametrize("operation", OPERATIONS)
def test_missing_fields_are_400_and_name_every_field(
    api: APIClient, leased: dict[str, Any], operation: str
) -> None:
    required = {
        "create": {"agent"},
        "lease": {"worker"},
        "heartbeat": {"epoch"},
        "intent": {"epoch", "index", "kind", "name", "effect", "arguments"},
        "outcome": {"epoch"},
        "complete": {"epoch"},
        "fail": {"epoch"},
    }[operation]
    body = _refused(
        api,
        leased["id"],
        _paths(leased["id"])[operation],
        b"{}",
        status=400,
        code="validation_error",
    )
    assert required <= set(body["error"]["details"]), body


@pytest.mark.parametrize(
    "index", ["100001", "4294967296", "99999999999999999999999999", "000000000000000000000001"]
)
def test_huge_step_indexes_in_the_outcome_path_are_refused(
    api: APIClient, leased: dict[str, Any], index: str
) -> None:
    path = f"/api/v1/runs/{leased['id']}/steps/{index}/outcome"
    body = {"epoch": leased["epoch"], "status": "ok", "result": {}}
    before = snapshot(leased["id"])
    response = api.post(path, body, format="json")
    assert response.status_code in (400, 404), response.content
    assert response.json()["error"]["code"] in ("validation_error", "not_found")
    assert snapshot(leased["id"]) == before


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/runs/not-a-uuid/",
        "/api/v1/runs/00000000-0000-0000-0000-000000000000/",
        "/api/v1/runs/00000000-0000-0000-0000-000000000000/journal",
        "/api/v1/runs/..%2F..%2Fetc%2Fpasswd/",
        "/api/v1/runs/%00/",
        "/api/v1/nothing/here",
    ],
)
def test_unknown_runs_and_paths_are_404_in_the_envelope(api: APIClient, db: Any, path: str) -> None:
    response = api.get(path)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/runs/not-a-uuid/complete",
        "/api/v1/runs/%F3%A9%87%BCI%5C/steps/",
        "/api/v1/runs/00000000-0000-0000-0000-000000000000/steps/-1/outcome",
        "/api/v1/nothing/here",
    ],
)
def test_posts_to_unknown_api_paths_are_404_envelopes_not_csrf_pages(
    api: APIClient, db: Any, path: str
) -> None:
    """Found by schemathesis: the catch-all answered a POST with Django's HTML CSRF 403."""
    api.handler.enforce_csrf_checks = True
    before = snapshot()
    response = api.post(path, {"epoch": 1}, format="json")
    assert response.status_code == 404, response.content[:200]
    assert response.json()["error"]["code"] == "not_found"
    assert snapshot() == before


def test_writes_to_an_unknown_run_are_404_and_write_nothing(api: APIClient, db: Any) -> None:
    ghost = "00000000-0000-0000-0000-000000000000"
    before = snapshot()
    for operation, path in _paths(ghost).items():
        if operation == "create":
            continue
        response = api.post(path, _valid_bodies(1)[operation], format="json")
        assert response.status_code == 404, (operation, response.content)
        assert response.json()["error"]["code"] == "not_found"
    assert snapshot() == before


# --- SQL and HTML are data: stored and returned byte for byte ------------------------------


@pytest.mark.parametrize("text", HOSTILE_STRINGS)
def test_sql_and_html_in_every_string_field_are_stored_as_data(
    api: APIClient, db: Any, text: str
) -> None:
    journal = JournalClient(api)
    run = journal.create(agent="support", external_id=text, input={"subject": text, text: [text]})
    assert run["external_id"] == text
    lease = journal.lease(run["id"], worker=text)
    assert lease.status_code == 200, lease.content
    epoch = lease.json()["epoch"]
    assert lease.json()["run"]["lease"]["worker"] == text
    write = journal.intent(run["id"], epoch, 0, name=text, arguments={"body": text, text: text})
    assert write.status_code == 201, write.content
    assert write.json()["name"] == text
    done = journal.outcome(run["id"], epoch, 0, result={"reply": text})
    assert done.status_code == 200, done.content
    read = journal.read(run["id"], epoch, 1, arguments={"q": text})
    assert read.status_code == 201, read.content
    complete = api.post(
        f"/api/v1/runs/{run['id']}/complete", {"epoch": epoch, "output": {"summary": text}}
    )
    assert complete.status_code == 200, complete.content

    stored = Run.objects.get(pk=run["id"])
    assert stored.external_id == text
    assert stored.input == {"subject": text, text: [text]}
    assert stored.output == {"summary": text}
    step = Step.objects.get(run=stored, index=0)
    assert (step.name, step.arguments, step.result) == (
        text,
        {"body": text, text: text},
        {"reply": text},
    )
    assert Step.objects.get(run=stored, index=1).arguments == {"q": text}
    # the tables the SQL names are all still there and intact
    assert Step.objects.filter(run=stored).count() == 2
    events = journal.journal(run["id"])["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
