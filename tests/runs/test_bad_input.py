"""Every refusal of bad input: the status, the error code, and that nothing was written."""

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings
from rest_framework.test import APIClient

from runs.models import Event, Run, Step
from runs.tokens import worker_token_create, worker_token_revoke
from tests.runs.journal_client import JournalClient


@pytest.fixture
def leased_run(api: APIClient) -> tuple[str, int]:
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    epoch = journal.lease(run_id).json()["epoch"]
    journal.write_step(run_id, epoch, 0, tokens=5)
    return run_id, epoch


def database_state() -> tuple[Any, ...]:
    return (
        list(Run.objects.order_by("pk").values()),
        list(Step.objects.order_by("pk").values()),
        Event.objects.count(),
    )


@pytest.fixture
def nothing_written(leased_run: tuple[str, int]) -> Iterator[None]:
    before = database_state()
    yield
    assert database_state() == before


def intent_body(epoch: int, **overrides: Any) -> dict[str, Any]:
    return {
        "epoch": epoch,
        "index": 1,
        "kind": "tool",
        "name": "tickets.create",
        "effect": "write",
        "arguments": {"subject": "x"},
        **overrides,
    }


BAD_INTENTS = [
    ("missing name", {"name": None}, "name"),
    ("index negative", {"index": -1}, "index"),
    ("index huge", {"index": 10**12}, "index"),
    ("index a string", {"index": "one"}, "index"),
    ("arguments a list", {"arguments": [1, 2]}, "arguments"),
    ("arguments a string", {"arguments": "x"}, "arguments"),
    ("unknown kind", {"kind": "shell"}, "kind"),
    ("unknown effect", {"effect": "maybe"}, "effect"),
    ("unknown enforced_by", {"enforced_by": "hope"}, "enforced_by"),
    ("name too long", {"name": "n" * 201}, "name"),
    ("outcome on a write step", {"outcome": {"status": "ok", "result": 1}}, "outcome"),
    (
        "enforced_by on a read step",
        {"effect": "read", "kind": "model", "enforced_by": "tool"},
        "enforced_by",
    ),
    (
        "negative usage",
        {
            "effect": "read",
            "kind": "model",
            "outcome": {"result": 1, "usage": {"input_tokens": -5}},
        },
        "outcome",
    ),
    ("epoch missing", {"epoch": None}, "epoch"),
]


@pytest.mark.parametrize(
    ("case", "overrides", "field"), BAD_INTENTS, ids=[c[0] for c in BAD_INTENTS]
)
def test_a_malformed_intent_is_refused_with_field_details(
    api: APIClient,
    leased_run: tuple[str, int],
    nothing_written: None,
    case: str,
    overrides: dict[str, Any],
    field: str,
) -> None:
    run_id, epoch = leased_run
    body = {k: v for k, v in {**intent_body(epoch), **overrides}.items() if v is not None}

    response = api.post(f"/api/v1/runs/{run_id}/steps/", body)

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in error["details"]


BAD_OUTCOMES = [
    ("negative tokens", {"usage": {"input_tokens": -1}}, "usage"),
    ("negative cost", {"usage": {"cost_usd": "-0.5"}}, "usage"),
    ("tokens a string", {"usage": {"output_tokens": "many"}}, "usage"),
    ("unknown status", {"status": "maybe"}, "status"),
    ("epoch a string", {"epoch": "latest"}, "epoch"),
]


@pytest.mark.parametrize(
    ("case", "overrides", "field"), BAD_OUTCOMES, ids=[c[0] for c in BAD_OUTCOMES]
)
def test_a_malformed_outcome_is_refused_with_field_details(
    api: APIClient, leased_run: tuple[str, int], case: str, overrides: dict[str, Any], field: str
) -> None:
    run_id, epoch = leased_run
    JournalClient(api).intent(run_id, epoch, 1)
    before = database_state()
    body = {"epoch": epoch, "status": "ok", "result": {}, **overrides}

    response = api.post(f"/api/v1/runs/{run_id}/steps/1/outcome", body)

    assert response.status_code == 400
    assert field in response.json()["error"]["details"]
    assert database_state() == before


@pytest.mark.parametrize(
    ("raw", "content_type"),
    [
        (b'{"epoch": 1, "index": ', "application/json"),
        (b"\xff\xfe not utf-8", "application/json"),
        (b'{"epoch": NaN}', "application/json"),
        (b'{"epoch": Infinity}', "application/json"),
        (b'{"epoch": 1, "name": "a\\u0000b"}', "application/json"),
        (b"[" * 200 + b"]" * 200, "application/json"),
    ],
    ids=["truncated", "not utf-8", "NaN", "Infinity", "NUL", "nested 200 deep"],
)
def test_unparseable_bodies_are_400_malformed_json(
    api: APIClient,
    leased_run: tuple[str, int],
    nothing_written: None,
    raw: bytes,
    content_type: str,
) -> None:
    run_id, _ = leased_run
    response = api.generic("POST", f"/api/v1/runs/{run_id}/steps/", raw, content_type=content_type)  # type: ignore[arg-type]
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "malformed_json"


def test_a_body_over_the_limit_is_413(
    api: APIClient, leased_run: tuple[str, int], nothing_written: None
) -> None:
    run_id, epoch = leased_run
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=10_000):
        response = api.post(
            f"/api/v1/runs/{run_id}/steps/", intent_body(epoch, arguments={"blob": "x" * 20_000})
        )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def test_an_unknown_run_is_404_in_the_envelope(api: APIClient, nothing_written: None) -> None:
    for path in (
        f"/api/v1/runs/{uuid.uuid4()}/",
        "/api/v1/runs/not-a-uuid/",
        f"/api/v1/runs/{uuid.uuid4()}/journal",
    ):
        response = api.get(path)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    response = api.post(f"/api/v1/runs/{uuid.uuid4()}/lease", {"worker": "w"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_an_outcome_for_a_step_without_intent_is_404(
    api: APIClient, leased_run: tuple[str, int], nothing_written: None
) -> None:
    run_id, epoch = leased_run
    response = JournalClient(api).outcome(run_id, epoch, 7)
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"input": {}}, "agent"),
        ({"agent": "a" * 101, "input": {}}, "agent"),
        ({"agent": "has spaces", "input": {}}, "agent"),
        ({"agent": "support", "external_id": "x" * 201}, "external_id"),
        ({"agent": "support", "external_id": ["a"]}, "external_id"),
    ],
)
def test_a_malformed_run_is_refused(
    api: APIClient, db: Any, body: dict[str, Any], field: str
) -> None:
    response = api.post("/api/v1/runs/", body)
    assert response.status_code == 400
    assert field in response.json()["error"]["details"]
    assert Run.objects.count() == 0


@pytest.mark.parametrize(("ttl", "worker"), [(4, "w"), (601, "w"), (30, ""), (30, "w" * 201)])
def test_a_malformed_lease_is_refused(api: APIClient, db: Any, ttl: int, worker: str) -> None:
    run_id = JournalClient(api).create()["id"]
    response = api.post(f"/api/v1/runs/{run_id}/lease", {"worker": worker, "ttl_seconds": ttl})
    assert response.status_code == 400
    assert Run.objects.get(pk=run_id).epoch == 0


def test_no_token_a_wrong_token_and_a_revoked_token_are_401(db: Any) -> None:
    token, raw = worker_token_create(name="soon-revoked")
    client = APIClient()
    assert client.post("/api/v1/runs/", {"agent": "a"}, format="json").status_code == 401
    client.credentials(HTTP_AUTHORIZATION="Bearer alw_not-a-real-token")
    assert client.post("/api/v1/runs/", {"agent": "a"}, format="json").status_code == 401
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.post("/api/v1/runs/", {"agent": "a"}, format="json").status_code == 201
    worker_token_revoke(token_id=token.pk)

    response = client.post("/api/v1/runs/", {"agent": "a"}, format="json")

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "authentication_failed"
    assert Run.objects.count() == 1


def test_a_dashboard_session_cannot_use_the_worker_api(db: Any, django_user_model: Any) -> None:
    user = django_user_model.objects.create_user("sup", password="pw-12345-long")
    client = APIClient()
    client.force_login(user)
    response = client.post("/api/v1/runs/", {"agent": "a", "input": {}}, format="json")
    assert response.status_code in (401, 403)
    assert Run.objects.count() == 0


@pytest.mark.parametrize(
    "raw",
    [
        b'{"epoch": 1, "index": 1, "index": 7, "kind": "tool", "name": "t", "effect": "read",'
        b' "arguments": {}}',
        b'{"epoch": 1, "index": 1, "kind": "tool", "name": "t", "effect": "read",'
        b' "arguments": {"to": "a@example.com", "to": "b@example.com"}}',
    ],
    ids=["top level", "inside the arguments"],
)
def test_a_body_with_a_key_twice_is_400_malformed_json_not_last_one_wins(
    api: APIClient, leased_run: tuple[str, int], nothing_written: None, raw: bytes
) -> None:
    run_id, _ = leased_run
    url = f"/api/v1/runs/{run_id}/steps/"
    response = api.generic("POST", url, raw, content_type="application/json")  # type: ignore[arg-type]
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "malformed_json"
    assert "duplicate" in error["message"].lower()
    assert set(error) == {"code", "message", "details"}


@pytest.mark.parametrize("path", ["heartbeat", "steps/0/outcome", "steps/", "complete", "fail"])
def test_an_epoch_beyond_64_bits_is_400_not_a_server_error(api: APIClient, path: str) -> None:
    run_id = api.post("/api/v1/runs/", {"agent": "support", "input": {}}).json()["id"]
    body = {"epoch": 2**65, "index": 0, "kind": "tool", "name": "t", "effect": "read",
            "arguments": {}, "status": "ok", "result": None, "output": None, "error": None}  # fmt: skip

    response = api.post(f"/api/v1/runs/{run_id}/{path}", body)

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "validation_error"
    assert "epoch" in response.json()["error"]["details"]
