"""The hot worker calls cost one database statement each, and the WSGI door answers them alone.

A process remembers who a token is and checks that it is live in the kernel statement's own
query, so after the first call of a worker its intent, outcome, read step, heartbeat and first
lease are each exactly one query: the journal kernel's statement with the token check.
"""

import io
import json
from typing import Any

import httpx
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from runs.chain import run_chain_breaks
from runs.hotpath import HotPathWSGI
from runs.models import Event, Run, Step
from tests.runs.journal_client import JournalClient


def statements(call: Any) -> tuple[Any, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        response = call()
    return response, [q["sql"] for q in captured.captured_queries]


def test_each_hot_call_is_one_statement(transactional_db: Any, api: APIClient) -> None:
    journal = JournalClient(api)
    run_id = journal.create()["id"]

    lease, lease_sql = statements(lambda: journal.lease(run_id))
    epoch = lease.json()["epoch"]
    intent, intent_sql = statements(lambda: journal.intent(run_id, epoch, 0))
    outcome, outcome_sql = statements(lambda: journal.outcome(run_id, epoch, 0))
    read, read_sql = statements(lambda: journal.read(run_id, epoch, 1, tokens=5))
    replay, replay_sql = statements(lambda: journal.intent(run_id, epoch, 0))
    beat, beat_sql = statements(
        lambda: api.post(f"/api/v1/runs/{run_id}/heartbeat", {"epoch": epoch})
    )

    assert [r.status_code for r in (lease, intent, outcome, read, replay, beat)] == [
        200,
        201,
        200,
        201,
        200,
        200,
    ]
    # the token was read by the create call; every hot call after it is the kernel's statement
    # with the token's liveness check in the same query (one round trip, one transaction)
    hot = (lease_sql, intent_sql, outcome_sql, read_sql, beat_sql, replay_sql)
    assert [len(s) for s in hot] == [1] * 6
    assert all("SELECT ledger_token_live(" in s[0] for s in hot)
    assert "ledger_lease" in lease_sql[0]
    assert "ledger_step_intent" in intent_sql[0] and "ledger_step_intent" in read_sql[0]
    assert "ledger_step_outcome" in outcome_sql[0]
    assert "ledger_heartbeat" in beat_sql[0]
    assert run_chain_breaks(Run.objects.get(pk=run_id)) == []


def test_the_kernels_answers_match_what_is_stored(api: APIClient) -> None:
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    epoch = journal.lease(run_id).json()["epoch"]
    written = journal.intent(run_id, epoch, 0).json()
    done = journal.outcome(run_id, epoch, 0, tokens=7).json()
    read = journal.read(run_id, epoch, 1, tokens=3).json()

    stored = {s["index"]: s for s in journal.journal(run_id)["steps"]}

    assert written | {"state": "done", "result": {"done": 0}} == stored[0] | {
        "usage": written["usage"],
        "outcome_at": None,
    }
    assert done["step"] == stored[0]
    assert read == stored[1]
    assert done["budget"]["used"]["tokens"] == 7
    assert journal.run(run_id)["budget"]["used"] == {
        "steps": 2,
        "tokens": 10,
        "cost_usd": "0.000000",
        "recoveries": 0,
    }


@pytest.mark.slow
def test_through_the_web_server_the_lean_path_answers_steps_and_hands_bad_input_to_the_api_view(
    transactional_db: Any, ledger_server: str
) -> None:
    from runs.tokens import worker_token_create

    _, token = worker_token_create(name="hot-path")
    with httpx.Client(base_url=ledger_server, headers={"Authorization": f"Bearer {token}"}) as http:
        run_id = http.post("/api/v1/runs/", json={"agent": "hot", "input": {}}).json()["id"]
        lease = http.post(f"/api/v1/runs/{run_id}/lease", json={"worker": "w-1"})
        assert lease.status_code == 200
        assert lease.headers["X-Content-Type-Options"] == "nosniff"
        epoch = lease.json()["epoch"]
        read = {"epoch": epoch, "index": 0, "kind": "model", "name": "m", "effect": "read",
                "arguments": {"q": 1}, "outcome": {"result": {"a": 2**70}}}  # fmt: skip
        step = http.post(f"/api/v1/runs/{run_id}/steps/", json=read)
        assert step.status_code == 201 and step.json()["state"] == "done"
        assert step.json()["result"] == {"a": 2**70}

        # a body the lean path does not take reaches the DRF view intact: its field errors
        refused = http.post(f"/api/v1/runs/{run_id}/steps/", json={**read, "index": -1})
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "validation_error"
        assert "index" in refused.json()["error"]["details"]

        stale = http.post(f"/api/v1/runs/{run_id}/heartbeat", json={"epoch": epoch - 1})
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_epoch"
        unknown = http.post(
            f"/api/v1/runs/{run_id}/heartbeat",
            json={"epoch": epoch},
            headers={"Authorization": "Bearer alw_not-a-token"},
        )
        assert unknown.status_code == 401
        assert unknown.json()["error"]["code"] == "authentication_failed"

        # create and complete too; a bad agent name gets the DRF view's field errors
        bad = http.post("/api/v1/runs/", json={"agent": "a b", "input": {}})
        assert bad.status_code == 400 and "agent" in bad.json()["error"]["details"]
        attached = http.post("/api/v1/runs/", json={"agent": "hot", "external_id": "x-1"})
        again = http.post("/api/v1/runs/", json={"agent": "hot", "external_id": "x-1"})
        assert (attached.status_code, again.status_code) == (201, 200)
        assert attached.json()["input"] == {} and again.json()["id"] == attached.json()["id"]
        done = http.post(f"/api/v1/runs/{run_id}/complete", json={"epoch": epoch, "output": 1})
        assert done.status_code == 200 and done.json()["status"] == "completed"
        assert done.headers["X-Frame-Options"] == "DENY"

    assert Step.objects.filter(run_id=run_id).count() == 1
    # created, lease, intent, done, completed
    assert Event.objects.filter(run_id=run_id).count() == 5
    assert run_chain_breaks(Run.objects.get(pk=run_id)) == []


def test_a_revoked_token_is_refused_by_the_process_that_revoked_it_at_once(
    api: APIClient, worker_token: str
) -> None:
    from runs.authentication import hash_token
    from runs.models import WorkerToken
    from runs.tokens import worker_token_revoke

    journal = JournalClient(api)
    run_id = journal.create()["id"]
    assert journal.lease(run_id).status_code == 200
    worker_token_revoke(token_id=WorkerToken.objects.get(token_hash=hash_token(worker_token)).pk)

    assert journal.lease(run_id).status_code == 401


def test_after_a_django_request_the_wsgi_door_sends_no_health_check_before_its_statement(
    transactional_db: Any, api: APIClient, worker_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Django arms its SELECT 1 health check at the end of every request; the door's own socket
    check replaces it, so the first hot call after a create is still one statement."""
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    body = json.dumps({"worker": "w-1"}).encode()
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": f"/api/v1/runs/{run_id}/lease",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {worker_token}",
        "wsgi.input": io.BytesIO(body),
    }
    answered: list[str] = []

    def django_app(*_: Any) -> list[bytes]:  # the door must not need Django for this call
        raise AssertionError("declined to Django")

    door = HotPathWSGI(django_app)
    health_checks: list[bool] = []
    real_is_usable = connection.is_usable

    def is_usable() -> bool:  # observed, not replaced: Django's SELECT 1 bypasses query capture
        health_checks.append(True)
        return real_is_usable()

    monkeypatch.setattr(connection, "is_usable", is_usable)
    connection.health_check_enabled = True  # type: ignore[attr-defined]
    connection.health_check_done = False  # type: ignore[attr-defined]  # as a request leaves it

    chunks, sql = statements(lambda: door(environ, lambda status, _: answered.append(status)))

    assert answered == ["200 OK"]
    assert json.loads(b"".join(chunks))["epoch"] == 1
    assert len(sql) == 1 and "ledger_lease" in sql[0] and "ledger_token_live(" in sql[0]
    assert health_checks == []


def _terminate(pid: int) -> None:
    """pg_terminate_backend from an admin connection, waiting until the backend has gone."""
    import psycopg

    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        user=settings["USER"] or "root",
        dbname="postgres",
        autocommit=True,
    ) as admin:
        (gone,) = admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid]).fetchone() or [0]
    assert gone is True


def test_a_connection_whose_backend_was_terminated_is_replaced_before_the_call(
    transactional_db: Any, api: APIClient, worker_token: str
) -> None:
    """PostgreSQL restarted, or an admin ended the backend, between two calls: the door's socket
    check finds the kept connection dead and the call runs on a fresh one. A lease is the call
    the door never sends twice (a repeat would count a recovery), and the query above has done
    Django's own check for this request, so without the door's it would have answered 503."""
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (kept,) = cursor.fetchone()
    _terminate(kept)
    body = json.dumps({"worker": "w-1"}).encode()
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": f"/api/v1/runs/{run_id}/lease",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {worker_token}",
        "wsgi.input": io.BytesIO(body),
    }
    answered: list[str] = []

    def django_app(*_: Any) -> list[bytes]:
        raise AssertionError("declined to Django")

    chunks = HotPathWSGI(django_app)(environ, lambda status, _: answered.append(status))

    assert answered == ["200 OK"]
    assert json.loads(b"".join(chunks))["epoch"] == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != kept


def test_create_and_complete_check_the_token_in_their_first_statement(
    transactional_db: Any, api: APIClient, worker_token: str
) -> None:
    """On the lean path too: a token revoked by another node writes nothing, on the next call."""
    from django.utils import timezone

    from runs.authentication import hash_token
    from runs.models import WorkerToken

    journal = JournalClient(api)
    journal.create()  # this process now knows who the token is
    created, create_sql = statements(lambda: journal.create(agent="support", external_id="e-1"))
    run_id = created["id"]
    epoch = journal.lease(run_id).json()["epoch"]
    finish = {"epoch": epoch, "output": {"answer": 42}}
    # the token's liveness rides on the call's first statement, and is read nowhere else
    assert "SELECT ledger_token_live(" in create_sql[0]
    assert not any("runs_workertoken" in s for s in create_sql[1:])

    # revoked by another node: this process still remembers who the token is
    WorkerToken.objects.filter(token_hash=hash_token(worker_token)).update(
        revoked_at=timezone.now()
    )
    done = api.post(f"/api/v1/runs/{run_id}/complete", finish)
    again = api.post("/api/v1/runs/", {"agent": "support", "input": {}})

    assert (done.status_code, again.status_code) == (401, 401)
    assert Run.objects.get(pk=run_id).status == "running"  # the lock and the check rolled back
    assert Run.objects.count() == 2
    WorkerToken.objects.filter(token_hash=hash_token(worker_token)).update(revoked_at=None)
    assert api.post(f"/api/v1/runs/{run_id}/heartbeat", {"epoch": epoch}).status_code == 200
    completed, complete_sql = statements(
        lambda: api.post(f"/api/v1/runs/{run_id}/complete", finish)
    )
    assert completed.status_code == 200 and completed.json()["status"] == "completed"
    first, *rest = complete_sql  # the kernel's one statement (it locks the run), the check on it
    assert "ledger_run_finish(" in first and "SELECT ledger_token_live(" in first
    assert not any("runs_workertoken" in s for s in rest)
    assert run_chain_breaks(Run.objects.get(pk=run_id)) == []


@pytest.mark.parametrize("spelling", [str.upper, lambda run_id: run_id.replace("-", "")])
def test_the_wsgi_door_leaves_a_run_id_django_would_not_route_to_django(
    transactional_db: Any, api: APIClient, worker_token: str, spelling: Any
) -> None:
    """The URLconf's <uuid:> takes lower-case, hyphenated ids only; the door answers no path the
    API would 404, so both doors agree on which run ids exist."""
    run_id = JournalClient(api).create()["id"]
    body = json.dumps({"epoch": 1, "output": "done"}).encode()
    declined: list[str] = []

    def django_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        declined.append(environ["PATH_INFO"])
        start_response("404 Not Found", [])
        return [b""]

    path = f"/api/v1/runs/{spelling(run_id)}/complete"
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {worker_token}",
        "wsgi.input": io.BytesIO(body),
    }
    HotPathWSGI(django_app)(environ, lambda *_: None)

    assert declined == [path]
    assert api.post(path, body, content_type="application/json").status_code == 404
