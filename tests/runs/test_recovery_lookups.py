"""Recovery asks a tool's own lookup (LEDGER_TOOL_LOOKUPS) before it sends a write to review.

A tool that can say whether a key took effect settles the step during recovery, and the answer
is kept in the run's chain as evidence: completed → done (not sent again), absent →
interrupted (sent once, with the same key). A lookup that is late (2 s) or fails is "no
answer": recorded, and the step stays in review for a person.
"""

import http.server
import json
import threading
from typing import Any
from urllib.parse import unquote

import pytest
from rest_framework.test import APIClient

from runs.models import Event, Run, Step
from runs.tasks import reap_expired_leases as reaper_task
from tests.review import lookup_fixtures
from tests.runs.journal_client import JournalClient

pytestmark = pytest.mark.django_db


def _run_killed_while_sending(api: APIClient, *, name: str, enforced_by: str) -> tuple[str, str]:
    """A run whose worker wrote the intent of one email and died before its outcome."""
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    epoch = journal.lease(run_id, worker="w-7").json()["epoch"]
    response = journal.intent(
        run_id, epoch, 0, name=name, effect="write", enforced_by=enforced_by, kind="tool"
    )
    assert response.status_code == 201, response.content
    return run_id, response.json()["idempotency_key"]


def _lookups(settings: Any, fixture: str) -> None:
    settings.LEDGER_TOOL_LOOKUPS = {
        "email.send": f"tests.review.lookup_fixtures.{fixture}",
        "tickets.create": f"tests.review.lookup_fixtures.{fixture}",
    }
    if fixture == "slow_lookup":  # it answers after 3 s: late, whatever the timeout
        settings.LEDGER_TOOL_LOOKUP_TIMEOUT_SECONDS = 0.5


def _recover(api: APIClient, run_id: str, fake_clock: Any, by: str) -> None:
    fake_clock.advance(seconds=31)
    if by == "reaper":
        assert reaper_task() == 1
    else:
        JournalClient(api).lease(run_id, worker="w-9")


@pytest.fixture(autouse=True)
def _no_keys_sent() -> Any:
    lookup_fixtures.SENT_KEYS.clear()
    yield
    lookup_fixtures.SENT_KEYS.clear()


@pytest.mark.parametrize("by", ["reaper", "new lease"])
@pytest.mark.parametrize(
    ("name", "enforced_by"), [("email.send", "nobody"), ("tickets.create", "tool")]
)
def test_a_lookup_that_saw_the_key_settles_the_step_as_done_at_recovery(
    api: APIClient, fake_clock: Any, settings: Any, by: str, name: str, enforced_by: str
) -> None:
    _lookups(settings, "provider_lookup")
    run_id, key = _run_killed_while_sending(api, name=name, enforced_by=enforced_by)
    lookup_fixtures.SENT_KEYS.add(key)

    _recover(api, run_id, fake_clock, by)

    step = Step.objects.get(run_id=run_id, index=0)
    assert step.state == "done"
    assert step.result == {"settled_by_lookup": "completed"}
    reconciled = Event.objects.get(run_id=run_id, type="reconciled")
    assert reconciled.payload["lookup"] == {
        "source": "tests.review.lookup_fixtures.provider_lookup",
        "answer": "completed",
        "detail": "",
    }
    assert Run.objects.get(pk=run_id).status != "needs_review"


@pytest.mark.parametrize("by", ["reaper", "new lease"])
def test_a_lookup_that_never_saw_the_key_lets_the_step_run_again_with_its_key(
    api: APIClient, fake_clock: Any, settings: Any, by: str
) -> None:
    _lookups(settings, "provider_lookup")
    run_id, _key = _run_killed_while_sending(api, name="email.send", enforced_by="nobody")

    _recover(api, run_id, fake_clock, by)

    assert Step.objects.get(run_id=run_id, index=0).state == "interrupted"
    interrupted = Event.objects.get(run_id=run_id, type="step_interrupted")
    assert interrupted.payload["lookup"]["answer"] == "absent"
    assert Run.objects.get(pk=run_id).status != "needs_review"


@pytest.mark.parametrize("fixture", ["slow_lookup", "broken_lookup"])
def test_a_late_or_failing_lookup_is_recorded_as_no_answer_and_the_step_stays_in_review(
    api: APIClient, fake_clock: Any, settings: Any, fixture: str
) -> None:
    _lookups(settings, fixture)
    run_id, _key = _run_killed_while_sending(api, name="email.send", enforced_by="nobody")

    _recover(api, run_id, fake_clock, "reaper")

    assert Step.objects.get(run_id=run_id, index=0).state == "unknown"
    unknown = Event.objects.get(run_id=run_id, type="step_unknown")
    assert unknown.payload["lookup"]["answer"] == "no_answer"
    assert unknown.payload["lookup"]["detail"]
    assert Run.objects.get(pk=run_id).status == "needs_review"


def test_a_tool_without_a_lookup_is_recovered_as_before(
    api: APIClient, fake_clock: Any, settings: Any
) -> None:
    settings.LEDGER_TOOL_LOOKUPS = {}
    run_id, _key = _run_killed_while_sending(api, name="email.send", enforced_by="nobody")

    _recover(api, run_id, fake_clock, "reaper")

    assert Step.objects.get(run_id=run_id, index=0).state == "unknown"
    assert "lookup" not in Event.objects.get(run_id=run_id, type="step_unknown").payload


# what the run's row lock looked like from another connection while the tool was being asked
LOCK_WHILE_ASKED: list[str] = []


def lock_probing_lookup(key: str) -> str:
    """A provider's lookup that, while it is being asked, tries to lock the run's row from a
    connection of its own (the key begins with the run's id)."""
    from django.db import DatabaseError, connection, transaction

    try:
        with transaction.atomic():
            Run.objects.select_for_update(nowait=True).get(pk=key.split(":")[0])
        LOCK_WHILE_ASKED.append("free")
    except DatabaseError:
        LOCK_WHILE_ASKED.append("held")
    finally:
        connection.close()
    return "absent"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("by", ["reaper", "new lease"])
def test_the_tool_is_asked_while_nobody_holds_the_runs_lock(
    api: APIClient, fake_clock: Any, settings: Any, by: str
) -> None:
    """A lookup may take seconds: the run's row lock is not held while it is asked, so the
    run's other callers (a heartbeat, the desk, the reaper) are not queued behind the tool."""
    settings.LEDGER_TOOL_LOOKUPS = {
        "email.send": "tests.runs.test_recovery_lookups.lock_probing_lookup"
    }
    LOCK_WHILE_ASKED.clear()
    run_id, _key = _run_killed_while_sending(api, name="email.send", enforced_by="nobody")

    _recover(api, run_id, fake_clock, by)

    assert LOCK_WHILE_ASKED == ["free"]
    assert Step.objects.get(run_id=run_id, index=0).state == "interrupted"  # absent: sent once


def still_journalling_lookup(key: str) -> str:
    """A provider's lookup asked while the run's holder, not lost after all, journals one more
    write under its expired lease each time (the key begins with the run's id). Asked in a
    thread of its own (tools.lookups), on a connection of its own."""
    from django.db import connection

    from runs import kernel

    try:
        run = Run.objects.get(pk=key.split(":")[0])
        kernel.step_intent(
            run_id=run.pk,
            epoch=run.epoch,
            index=run.step_count,
            kind="tool",
            name="email.send",
            effect="write",
            enforced_by="nobody",
            arguments={"to": f"customer-{run.step_count}"},
            actor="worker:w-7",
        )
    finally:
        connection.close()
    return "absent"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("by", ["reaper", "new lease"])
def test_a_holder_that_keeps_journalling_while_recovery_asks_is_refused_and_nothing_changes(
    api: APIClient, fake_clock: Any, settings: Any, by: str
) -> None:
    """Each answer the tool side gives, the holder has written another step to ask about: after
    a few rounds the asking stops. The new lease is refused as if the lease were live (409
    lease_held, the holder named); the reaper leaves the run for its next sweep."""
    settings.LEDGER_TOOL_LOOKUPS = {
        "email.send": "tests.runs.test_recovery_lookups.still_journalling_lookup"
    }
    run_id, _key = _run_killed_while_sending(api, name="email.send", enforced_by="nobody")
    fake_clock.advance(seconds=31)

    if by == "reaper":
        assert reaper_task() == 0
    else:
        refused = JournalClient(api).lease(run_id, worker="w-9")
        assert refused.status_code == 409
        error = refused.json()["error"]
        assert error["code"] == "lease_held"
        assert error["details"]["worker"] == "w-7"
        assert error["details"]["reason"] == "still_journalling"

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.epoch, run.lease_worker, run.used_recoveries) == (
        "running",
        1,
        "w-7",
        0,
    )
    # one step more per round of answers, every one still open: nobody decided anything
    assert run.step_count == 1 + 4
    assert set(Step.objects.filter(run_id=run_id).values_list("state", flat=True)) == {"intent"}

    settings.LEDGER_TOOL_LOOKUPS = {"email.send": "tests.review.lookup_fixtures.provider_lookup"}
    granted = JournalClient(api).lease(run_id, worker="w-9")  # the holder has stopped now
    assert granted.status_code == 200
    assert granted.json()["epoch"] == 2 and granted.json()["recovered"] is True


class _KeysAPI(http.server.BaseHTTPRequestHandler):
    """A provider's key API: `GET /keys/<key>` answers {"state": ...} for the keys it knows."""

    states: dict[str, str] = {}

    def do_GET(self) -> None:
        key = unquote(self.path.removeprefix("/keys/"))
        body = json.dumps({"state": self.states[key]} if key in self.states else {}).encode()
        self.send_response(200 if key in self.states else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_lookup_by_url_is_asked_for_the_key_and_anything_but_a_state_is_no_answer(
    settings: Any,
) -> None:
    from tools.lookups import tool_lookup

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeysAPI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    template = f"http://127.0.0.1:{server.server_address[1]}/keys/{{key}}"
    settings.LEDGER_TOOL_LOOKUPS = {"email.send": template, "sms.send": "http://127.0.0.1:9/{key}"}
    _KeysAPI.states = {"run-1:0:email.send:abc": "completed"}
    try:
        sent = tool_lookup("email.send", "run-1:0:email.send:abc")
        unknown = tool_lookup("email.send", "run-1:1:email.send:def")
        down = tool_lookup("sms.send", "run-1:2:sms.send:ghi")
    finally:
        server.shutdown()
        server.server_close()

    assert sent is not None and (sent.state, sent.source) == ("completed", template)
    assert unknown is not None and unknown.state == "no_answer"
    assert "HTTP 404" in unknown.detail
    assert down is not None and down.state == "no_answer"
    assert "Connection refused" in down.detail or "NewConnectionError" in down.detail
