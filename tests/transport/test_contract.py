"""One contract, two transports: every test runs on HTTP (the real web server) and in-process.

The SDK's `Run` cannot tell its transports apart, so neither may these tests: each asserts the
same results, the same rows and the same exceptions (type, code and status) on both.
"""

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from intentledger import (
    ApprovalPending,
    BudgetExceeded,
    Ledger,
    LedgerError,
    NeedsReview,
    Run,
    StaleLease,
    StepIntent,
    StepOutcome,
)

from runs.chain import run_chain_breaks
from runs.inprocess import InProcessTransport
from runs.models import ApprovalRule, BudgetPolicy, Event, Step, WorkerToken
from runs.models import Run as RunRow
from runs.services.approvals import step_approve
from runs.tokens import worker_token_create, worker_token_revoke
from teams.scope import EVERY_TEAM_SESSION_OPTIONS
from tools.models import Ticket

Connect = Callable[[str], Ledger]


@pytest.fixture(params=[pytest.param("http", marks=pytest.mark.slow), "inprocess"])
def connect(request: pytest.FixtureRequest, transactional_db: Any) -> Iterator[Connect]:
    """A Ledger for a worker token, on the transport this test runs on."""
    opened: list[Ledger] = []

    def connect(token: str) -> Ledger:
        if request.param == "http":
            url = request.getfixturevalue("ledger_server")
            ledger = Ledger(url, token, retries=2, backoff=0.05)
        else:
            ledger = Ledger(transport=InProcessTransport(token, retries=2, backoff=0.05))
        opened.append(ledger)
        return ledger

    yield connect
    for ledger in opened:
        ledger.close()


@pytest.fixture
def ledger(connect: Connect, worker_token: str) -> Ledger:
    return connect(worker_token)


class Killed(BaseException):
    """What SIGKILL does to the agent's code: nothing after it runs, nothing is recorded."""


def crash(run: Run) -> None:
    """What SIGKILL leaves of the SDK: no complete, no fail, the heartbeat gone."""
    run._heartbeat_stop.set()


def model(messages: Any) -> dict[str, Any]:
    return {"content": f"echo {len(messages)}", "usage": {"input_tokens": 10, "output_tokens": 5}}


def test_create_lease_read_and_write_steps_complete_the_run(ledger: Ledger) -> None:
    sent: list[str] = []

    def send(to: str, idempotency_key: str) -> dict[str, Any]:
        sent.append(idempotency_key)
        return {"sent": to}

    with ledger.run("contract", {"q": 1}, external_id="c-1", worker="w-1") as run:
        assert run.epoch == 1 and run.journal == {} and not run.recovered
        reply = run.model(model, [{"role": "user", "content": "hi"}])
        found = run.tool("search", {"query": "refund"}, effect="read", fn=lambda query: [query])
        mailed = run.tool("email", {"to": "a@b.example"}, fn=send)
        run.output = {"reply": reply["content"], "found": found, "mailed": mailed}

    row = RunRow.objects.get(pk=run.id)
    assert row.status == "completed" and row.external_id == "c-1"
    assert row.output == {"reply": "echo 1", "found": ["refund"], "mailed": {"sent": "a@b.example"}}
    assert (row.used_steps, row.used_tokens) == (3, 15)
    steps = list(Step.objects.filter(run=row).order_by("index"))
    assert [(s.effect, s.enforced_by, s.state) for s in steps] == [
        ("read", None, "done"),
        ("read", None, "done"),
        ("write", "tool", "done"),
    ]
    assert sent == [steps[2].idempotency_key]
    assert list(Event.objects.filter(run=row).values_list("type", flat=True)) == [
        "run_created",
        "lease_acquired",
        "step_intent",
        "step_done",
        "step_intent",
        "step_done",
        "step_intent",
        "step_done",
        "run_completed",
    ]
    # the representations: the run and its journal as the API answers them
    assert ledger.get_run(run.id)["status"] == "completed"
    assert ledger.find("contract", "c-1")["id"] == run.id  # type: ignore[index]
    journal = ledger.journal(run.id)
    assert [s["state"] for s in journal["steps"]] == ["done", "done", "done"]
    assert journal["steps"][2]["idempotency_key"] == steps[2].idempotency_key
    assert len(journal["events"]) == 9


def test_a_restarted_worker_replays_recorded_steps_without_running_them(ledger: Ledger) -> None:
    calls: list[str] = []

    def charge(amount: int, idempotency_key: str) -> dict[str, Any]:
        calls.append(idempotency_key)
        return {"charged": amount}

    first = ledger.run("contract-replay", {}, external_id="r-1", worker="pod-1").__enter__()
    first.model(model, [{"role": "user", "content": "a"}])
    first.tool("payments.charge", {"amount": 5}, fn=charge)
    first.tool("note", {"n": 1}, effect="read", fn=lambda n: n)  # carries the charge's outcome
    crash(first)

    with ledger.run("contract-replay", {}, external_id="r-1", worker="pod-1") as second:
        assert second.id == first.id and second.recovered and second.epoch == 2
        assert second.model(
            lambda messages: pytest.fail("re-ran"), [{"role": "user", "content": "a"}]
        )
        assert second.tool("payments.charge", {"amount": 5}, fn=charge) == {"charged": 5}
        assert second.tool("note", {"n": 1}, effect="read", fn=lambda n: pytest.fail("re-ran"))
        assert (second.replayed, second.executed) == (3, 0)
        second.output = "ok"
    assert len(calls) == 1
    row = RunRow.objects.get(pk=first.id)
    assert (row.status, row.used_steps, row.used_recoveries) == ("completed", 3, 1)


def test_a_zombie_with_a_stale_epoch_is_refused_and_writes_nothing(ledger: Ledger) -> None:
    zombie = ledger.run("contract-zombie", {}, worker="pod-z").__enter__()
    zombie.tool("note", {"n": 0}, effect="read", fn=lambda n: n)
    crash(zombie)
    with ledger.attach(zombie.id, worker="pod-z") as successor:
        successor.tool("note", {"n": 0}, effect="read", fn=lambda n: n)
        successor.output = "done by the successor"
    events = Event.objects.filter(run_id=zombie.id).count()

    with pytest.raises(StaleLease) as caught:
        zombie.tool("note", {"n": 1}, effect="read", fn=lambda n: n)
    assert (caught.value.code, caught.value.status) == ("stale_epoch", 409)
    with pytest.raises(StaleLease):  # once refused, the SDK sends nothing more
        zombie.tool("email", {"to": "x@y.example"}, fn=lambda to: to)
    assert Event.objects.filter(run_id=zombie.id).count() == events
    assert RunRow.objects.get(pk=zombie.id).output == "done by the successor"


def test_the_step_budget_stops_the_run(ledger: Ledger, make_policy: Any) -> None:
    make_policy("contract-budget", max_steps=2)
    ran: list[int] = []

    def note(n: int) -> int:
        ran.append(n)
        return n

    run = ledger.run("contract-budget", {}, worker="w-b")
    with pytest.raises(BudgetExceeded) as caught, run:
        for n in range(3):
            run.tool("note", {"n": n}, effect="read", fn=note)
    assert (caught.value.code, caught.value.status) == ("budget_exceeded", 409)
    assert caught.value.details["limit"] == "steps"
    row = RunRow.objects.get(pk=run.id)
    assert (row.status, row.used_steps) == ("budget_exceeded", 2)
    # the third read ran (reads are recorded after they run) but was never journalled
    assert ran == [0, 1, 2]
    assert Step.objects.filter(run=row).count() == 2


def test_a_write_that_may_have_happened_goes_to_review(ledger: Ledger) -> None:
    sent: list[str] = []

    def send(to: str) -> dict[str, Any]:  # takes no key: nobody can deduplicate it
        sent.append(to)
        raise Killed  # the effect happened; the process died before its outcome

    first = ledger.run("contract-unknown", {}, worker="pod-u").__enter__()
    with pytest.raises(Killed):
        first.tool("email", {"to": "x@y.example"}, fn=send)
    crash(first)

    with pytest.raises(NeedsReview) as caught, ledger.attach(first.id, worker="pod-u") as again:
        again.tool("email", {"to": "x@y.example"}, fn=send)
    assert caught.value.code == "needs_review"
    assert sent == ["x@y.example"]
    assert RunRow.objects.get(pk=first.id).status == "needs_review"
    assert Step.objects.get(run_id=first.id, index=0).state == "unknown"


def test_a_token_limited_to_an_agent_cannot_touch_another_agents_runs(
    connect: Connect, ledger: Ledger
) -> None:
    _, raw = worker_token_create(name="contract-scoped", agents=["contract-x"])
    scoped = connect(raw)
    with ledger.run("contract-y", {}, worker="w-y") as theirs:
        theirs.output = "theirs"

    with pytest.raises(LedgerError) as refused:
        scoped.run("contract-y", {}, worker="w-s").__enter__()
    assert (refused.value.code, refused.value.status) == ("agent_not_allowed", 403)
    for attempt in (
        lambda: scoped.get_run(theirs.id),
        lambda: scoped.journal(theirs.id),
        lambda: scoped.attach(theirs.id, worker="w-s").__enter__(),
    ):
        with pytest.raises(LedgerError) as hidden:
            attempt()
        assert (hidden.value.code, hidden.value.status) == ("not_found", 404)
    assert scoped.find("contract-y", "") is None
    with scoped.run("contract-x", {}, worker="w-s") as mine:  # its own agent: as any token
        mine.tool("note", {"n": 1}, effect="read", fn=lambda n: n)
        mine.output = "mine"
    assert RunRow.objects.get(pk=mine.id).status == "completed"
    assert RunRow.objects.get(pk=theirs.id).epoch == 1


def test_a_revoked_token_is_refused(connect: Connect) -> None:
    token, raw = worker_token_create(name="contract-revoked")
    ledger = connect(raw)
    worker_token_revoke(token_id=token.pk)
    with pytest.raises(LedgerError) as refused:
        ledger.run("contract", {}, worker="w-r").__enter__()
    assert (refused.value.code, refused.value.status) == ("authentication_failed", 401)
    assert WorkerToken.objects.get(pk=token.pk).revoked_at is not None


def _revoke_from_another_connection(token_hash: str) -> None:
    """What a revocation on another node looks like to this process: a row changed elsewhere."""
    with psycopg.connect(
        **connection.get_connection_params(), autocommit=True, options=EVERY_TEAM_SESSION_OPTIONS
    ) as other:
        other.execute(
            "UPDATE runs_workertoken SET revoked_at = now() WHERE token_hash = %s", [token_hash]
        )


def test_a_token_revoked_elsewhere_is_refused_on_the_very_next_call(connect: Connect) -> None:
    token, raw = worker_token_create(name="contract-revoked-mid-run")
    ledger = connect(raw)
    run = ledger.run("contract", {}, worker="w-rm").__enter__()
    try:
        run.model(model, [{"role": "user", "content": "before"}])  # the token is known now
        _revoke_from_another_connection(token.token_hash)
        calls: list[Callable[[], Any]] = [
            lambda: run.model(model, [{"role": "user", "content": "after"}]),
            lambda: run.tool("t.write", {"a": 1}, effect="write", fn=lambda a: a),
            lambda: ledger._transport.heartbeat(run.id, epoch=run.epoch),
            lambda: ledger._transport.step_outcome(
                run.id, StepOutcome(0, "ok", {}, {}), epoch=run.epoch
            ),
        ]
        for call in calls:  # no sleep: the very next call of each kind
            with pytest.raises(LedgerError) as refused:
                call()
            assert (refused.value.code, refused.value.status) == ("authentication_failed", 401)
    finally:
        crash(run)
    assert Step.objects.filter(run_id=run.id).count() == 1  # nothing written after it


def test_malformed_input_is_the_apis_validation_error(ledger: Ledger) -> None:
    with ledger.run("contract-bad", {}, worker="w-v") as run:
        with pytest.raises(LedgerError) as refused:
            run.tool("x" * 201, {}, effect="read", fn=lambda: 1)
        assert (refused.value.code, refused.value.status) == ("validation_error", 400)
        assert "name" in refused.value.details
        with pytest.raises(LedgerError) as refused:
            run.model(
                lambda messages: {"usage": {"input_tokens": 1, "cost_usd": "a lot"}}, [{"a": 1}]
            )
        assert (refused.value.code, refused.value.status) == ("validation_error", 400)
        run.output = "ok"
    assert Step.objects.filter(run_id=run.id).count() == 0


def test_gateway_tools_run_once_under_the_steps_key(ledger: Ledger) -> None:
    customer = "gw@example.com"
    ticket = {"customer": customer, "subject": "Refund", "body": "Twice charged."}
    with ledger.run("contract-gateway", {}, worker="w-g") as run:
        found = run.tool("tickets.search", {"customer": customer}, effect="read")
        made = run.tool("tickets.create", ticket)  # one call: journalled, run, recorded

        def through_gateway(idempotency_key: str, **arguments: Any) -> Any:
            return run.gateway("tickets.comment", arguments, idempotency_key=idempotency_key)

        commented = run.tool(
            "tickets.comment",
            {"ticket_id": made["ticket"]["id"], "body": "Refunded."},
            enforced_by="ledger",
            fn=through_gateway,
        )
        refused = None
        try:
            run.tool("tickets.close", {"ticket_id": 10**9, "resolution": "none"})
        except Exception as exc:  # the tool's refusal: a recorded error step
            refused = exc
        run.output = {"found": found, "comment": commented["comment"]["ticket_id"]}
    assert found == {"tickets": []}
    assert Ticket.objects.filter(customer=customer).count() == 1
    assert refused is not None and "ticket_not_found" in str(refused)
    states = list(
        Step.objects.filter(run_id=run.id).order_by("index").values_list("state", flat=True)
    )
    assert states == ["done", "done", "done", "error"]
    assert RunRow.objects.get(pk=run.id).status == "completed"


def test_an_approval_rule_holds_the_write_until_people_decide(ledger: Ledger) -> None:
    ApprovalRule.objects.create(agent="", tool_pattern="email.*")
    sent: list[str] = []

    def send(to: str) -> dict[str, Any]:
        sent.append(to)
        return {"sent": to}

    held = ledger.run("contract-approve", {}, worker="w-a", wait_for_approval=False)
    with pytest.raises(ApprovalPending) as pending, held:
        held.tool("email.send", {"to": "a@b.example"}, enforced_by="nobody", fn=send)
    assert pending.value.code == "approval_pending" and sent == []
    assert Step.objects.get(run_id=held.id, index=0).state == "awaiting_approval"

    def approve_when_waiting() -> None:
        try:
            for _ in range(200):
                if RunRow.objects.filter(pk=held.id, epoch=2).exists():  # leased again
                    step_approve(run_id=held.id, index=0, by="sam")
                    return
                time.sleep(0.05)
        finally:
            connection.close()

    supervisor = threading.Thread(target=approve_when_waiting, daemon=True)
    supervisor.start()
    with ledger.attach(held.id, worker="w-a") as run:
        assert run.tool("email.send", {"to": "a@b.example"}, enforced_by="nobody", fn=send)
        run.output = "sent"
    supervisor.join(10)
    assert sent == ["a@b.example"]
    assert RunRow.objects.get(pk=held.id).status == "completed"


def test_in_process_calls_refuse_to_run_inside_a_callers_transaction(
    worker_token: str, transactional_db: Any
) -> None:
    ledger = Ledger(transport=InProcessTransport(worker_token))
    with transaction.atomic(), pytest.raises(RuntimeError, match="inside a transaction"):
        ledger.run("contract-atomic", {}, worker="w-t").__enter__()
    assert not RunRow.objects.filter(agent="contract-atomic").exists()
    assert BudgetPolicy.objects.filter(agent="contract-atomic").count() == 0


# --- a write enforced by its tool: its outcome rides on the next call (docs/design-notes.md) ---


class KeyedTool:
    """A tool that honours the idempotency key, as `enforced_by: tool` promises: a key it has
    seen answers its first result, with no second effect."""

    def __init__(self) -> None:
        self.effects: list[str] = []
        self.answers: dict[str, dict[str, Any]] = {}

    def __call__(self, to: str, idempotency_key: str) -> dict[str, Any]:
        if idempotency_key not in self.answers:
            self.effects.append(idempotency_key)
            self.answers[idempotency_key] = {"sent": to, "n": len(self.effects)}
        return self.answers[idempotency_key]


def counted(ledger: Ledger) -> dict[str, int]:
    """How many times the run called each transport method (the SDK's round trips)."""
    calls: dict[str, int] = {}
    transport = ledger._transport
    for name in ("step_record", "step_outcome", "run_complete"):
        method = getattr(transport, name)

        def spy(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            calls[_name] = calls.get(_name, 0) + 1
            return _method(*args, **kwargs)

        setattr(transport, name, spy)
    return calls


def test_a_tool_enforced_writes_outcome_rides_on_the_next_steps_call(ledger: Ledger) -> None:
    send = KeyedTool()
    calls = counted(ledger)
    with ledger.run("contract-carry", {}, worker="w-c") as run:
        first = run.tool("email", {"to": "a@b.example"}, fn=send)
        second = run.tool("email", {"to": "c@d.example"}, fn=send)  # carries the first's outcome
        run.model(model, [{"role": "user", "content": "hi"}])  # carries the second's
        third = run.tool("email", {"to": "e@f.example"}, fn=send)
        run.output = [first, second, third]  # complete: the third's outcome by its own call first
    # four steps, three of them writes: four step calls and one outcome call, not seven calls
    assert calls == {"step_record": 4, "step_outcome": 1, "run_complete": 1}
    steps = list(Step.objects.filter(run_id=run.id).order_by("index"))
    assert [s.state for s in steps] == ["done"] * 4
    assert [s.result for s in steps if s.effect == "write"] == [first, second, third]
    assert send.effects == [
        steps[0].idempotency_key,
        steps[1].idempotency_key,
        steps[3].idempotency_key,
    ]
    events = list(Event.objects.filter(run_id=run.id).order_by("seq"))
    assert [e.type for e in events] == ["run_created", "lease_acquired"] + [
        "step_intent",
        "step_done",
    ] * 4 + ["run_completed"]
    # each carried outcome committed in the same statement as the next intent, before it
    for done, intent in ((events[3], events[4]), (events[5], events[6])):
        assert (done.payload["index"] + 1, done.at) == (intent.payload["index"], intent.at)
    row = RunRow.objects.get(pk=run.id)
    assert (row.status, row.used_steps, row.used_tokens) == ("completed", 4, 15)
    assert run_chain_breaks(row) == []  # the hashes the statement computed recompute


def test_a_crash_before_the_carrying_call_reruns_the_write_under_its_key(ledger: Ledger) -> None:
    send = KeyedTool()
    first = ledger.run("contract-carry-crash", {}, worker="pod-1").__enter__()
    sent = first.tool("email", {"to": "a@b.example"}, fn=send)
    crash(first)  # the effect happened; the outcome was held for the next call, never sent
    step = Step.objects.get(run_id=first.id, index=0)
    assert step.state == "intent"

    with ledger.attach(first.id, worker="pod-1") as second:
        assert second.recovered
        assert second.tool("email", {"to": "a@b.example"}, fn=send) == sent  # the key replays
        second.output = "ok"
    assert send.effects == [step.idempotency_key]  # one effect
    step.refresh_from_db()
    assert (step.state, step.result, step.executions) == ("done", sent, 2)
    types = list(Event.objects.filter(run_id=first.id).values_list("type", flat=True))
    assert "step_unknown" not in types and "step_interrupted" in types
    assert RunRow.objects.get(pk=first.id).status == "completed"


def test_a_write_nobody_enforces_keeps_its_own_outcome_call(ledger: Ledger) -> None:
    calls = counted(ledger)
    with ledger.run("contract-carry-nobody", {}, worker="w-n") as run:
        run.tool("email", {"to": "a@b.example"}, enforced_by="nobody", fn=lambda to: to)
        run.tool("note", {"n": 1}, effect="read", fn=lambda n: n)
        run.output = "ok"
    assert calls == {"step_record": 2, "step_outcome": 1, "run_complete": 1}


def test_a_carried_outcome_the_kernel_refuses_writes_nothing(ledger: Ledger) -> None:
    transport = ledger._transport
    with ledger.run("contract-carry-refused", {}, worker="w-r") as run:
        run.tool("email", {"to": "a@b.example"}, enforced_by="nobody", fn=lambda to: to)
        run.tool("charge", {"n": 1}, enforced_by="tool", fn=lambda n, idempotency_key: n)
        row = RunRow.objects.get(pk=run.id)
        events = Event.objects.filter(run=row).count()
        intent: dict[str, Any] = {
            "epoch": run.epoch,
            "kind": "tool",
            "name": "note",
            "effect": "read",
            "arguments": {},
            "outcome": {"status": "ok", "result": 1},
        }
        refusals = [
            # the step before is a write nobody enforces: its outcome may not wait
            ({"index": 1, "previous_outcome": {"index": 0, "result": "x"}}, "previous_outcome"),
            # not the step before
            ({"index": 2, "previous_outcome": {"index": 0, "result": "x"}}, "previous_outcome"),
            # a gateway step carries nothing
            (
                {
                    "index": 2,
                    "effect": "write",
                    "outcome": None,
                    "invoke": True,
                    "previous_outcome": {"index": 1, "result": 1},
                },
                "previous_outcome",
            ),
        ]
        for fields, field in refusals:
            with pytest.raises(LedgerError) as refused:
                transport.step_record(run.id, StepIntent(**{**intent, **fields}))
            assert (refused.value.code, refused.value.status) == ("validation_error", 400)
            assert field in refused.value.details
        assert Event.objects.filter(run=row).count() == events
        assert Step.objects.filter(run=row).count() == 2
        run.tool("note", {"n": 1}, effect="read", fn=lambda n: n)  # carries the held outcome
        assert Step.objects.get(run=row, index=1).result == 1
        events = Event.objects.filter(run=row).count()
        # another outcome for the step it carried: the outcome's conflict, answered first
        with pytest.raises(LedgerError) as conflict:
            transport.step_record(
                run.id,
                StepIntent(
                    **{
                        **intent,
                        "index": 2,
                        "arguments": {"n": 1},
                        "previous_outcome": {"index": 1, "result": 2},
                    }
                ),
            )
        assert (conflict.value.code, conflict.value.status) == ("outcome_conflict", 409)
        assert Event.objects.filter(run=row).count() == events
        run.output = "ok"
    assert RunRow.objects.get(pk=run.id).status == "completed"


def test_a_budget_stop_from_the_carried_outcome_is_the_outcome_calls_answer(
    ledger: Ledger, make_policy: Any
) -> None:
    make_policy("contract-carry-budget", max_tokens=100)
    send = KeyedTool()

    def costly(to: str, idempotency_key: str) -> dict[str, Any]:
        return {**send(to, idempotency_key), "usage": {"input_tokens": 150}}

    run = ledger.run("contract-carry-budget", {}, worker="w-b")
    with pytest.raises(BudgetExceeded) as caught, run:
        run.tool("email", {"to": "a@b.example"}, fn=costly)
        run.tool("email", {"to": "c@d.example"}, fn=costly)  # its intent carries the stop
    stop = caught.value
    assert (stop.code, stop.status, stop.details["limit"]) == ("budget_exceeded", 409, "tokens")
    assert stop.details["step"]["index"] == 0 and stop.details["step"]["state"] == "done"
    assert stop.details["budget"]["used"]["tokens"] == 150
    row = RunRow.objects.get(pk=run.id)
    assert (row.status, row.used_tokens) == ("budget_exceeded", 150)
    assert Step.objects.filter(run=row).count() == 1  # the second intent was not journalled
    assert len(send.effects) == 1
