"""The worker SDK against a real ledger (the web server + PostgreSQL): journalling, replay, fencing."""

import contextlib
import contextvars
import http.server
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from intentledger import (
    BudgetExceeded,
    Ledger,
    LedgerError,
    LedgerUnavailable,
    NeedsReview,
    NondeterminismError,
    Run,
    StaleLease,
    StepFailed,
    StepIntent,
    tool,
)

from runs.models import Event, Step
from runs.models import Run as RunRow
from runs.services.finish import run_complete
from tests.support_agent.ports import port_in_range

pytestmark = pytest.mark.slow


@pytest.fixture
def ledger(ledger_server: str, worker_token: str, transactional_db: Any) -> Iterator[Ledger]:
    with Ledger(ledger_server, worker_token, retries=2, backoff=0.05) as client:
        yield client


def crash(run: Run) -> None:
    """What SIGKILL leaves behind: no complete, no fail, the heartbeat gone (tests only)."""
    run._heartbeat_stop.set()


def scripted_model(messages: list[dict[str, str]], tokens: int = 10) -> dict[str, Any]:
    return {
        "content": f"echo {len(messages)}",
        "usage": {"input_tokens": tokens, "output_tokens": 5},
    }


def test_run_completes_and_read_steps_take_one_call(ledger: Ledger) -> None:
    with ledger.run("sdk-basic", {"q": 1}, worker="w-basic") as run:
        reply = run.model(scripted_model, [{"role": "user", "content": "hi"}], name="model.chat")
        found = run.tool("search", {"query": "refund"}, effect="read", fn=lambda query: [query])
        run.output = {"reply": reply["content"], "found": found}

    row = RunRow.objects.get(pk=run.id)
    assert row.status == "completed"
    assert row.output == {"reply": "echo 1", "found": ["refund"]}
    assert row.used_tokens == 15
    assert list(Step.objects.filter(run=row).values_list("state", flat=True)) == ["done", "done"]
    types = list(Event.objects.filter(run=row).values_list("type", flat=True))
    # one call per read step: each intent is followed directly by its outcome
    assert types == [
        "run_created",
        "lease_acquired",
        "step_intent",
        "step_done",
        "step_intent",
        "step_done",
        "run_completed",
    ]


def test_same_external_id_attaches_to_the_same_run(ledger: Ledger) -> None:
    first = ledger.run("sdk-attach", {"n": 1}, external_id="order-7", worker="w-a").__enter__()
    first.tool("note", {"n": 1}, effect="read", fn=lambda n: n)
    crash(first)
    # an orchestrator's retry with the same external id attaches instead of starting over
    with ledger.run("sdk-attach", {"n": 1}, external_id="order-7", worker="w-a") as again:
        assert again.id == first.id
        assert again.journal[0]["state"] == "done"
        assert again.tool("note", {"n": 1}, effect="read", fn=lambda n: n) == 1
        again.output = "once"
    assert RunRow.objects.filter(agent="sdk-attach").count() == 1
    assert RunRow.objects.get(pk=first.id).used_steps == 1


def test_replay_returns_recorded_results_without_executing_or_spending(ledger: Ledger) -> None:
    calls: list[str] = []

    def charge(amount: int, idempotency_key: str) -> dict[str, Any]:
        calls.append(idempotency_key)
        return {"charged": amount, "key": idempotency_key}

    first = ledger.run("sdk-replay", {}, worker="pod-1", ttl_seconds=30).__enter__()
    reply = first.model(scripted_model, [{"role": "user", "content": "a"}], tokens=100)
    charged = first.tool("payments.charge", {"amount": 5}, fn=charge)
    first.tool("note", {"n": 1}, effect="read", fn=lambda n: n)  # carries the charge's outcome
    crash(first)
    used_tokens = RunRow.objects.get(pk=first.id).used_tokens

    # a restarted pod with the same name takes its lease back at once and replays
    with ledger.attach(first.id, worker="pod-1") as second:
        assert second.recovered
        model_calls: list[int] = []

        def model(messages: Any, tokens: int) -> dict[str, Any]:
            model_calls.append(1)
            return scripted_model(messages, tokens)

        assert second.model(model, [{"role": "user", "content": "a"}], tokens=100) == reply
        assert second.tool("payments.charge", {"amount": 5}, fn=charge) == charged
        assert second.tool("note", {"n": 1}, effect="read", fn=lambda n: pytest.fail("re-ran"))
        assert second.replayed == 3 and second.executed == 0
        assert model_calls == []
        second.output = "ok"

    assert len(calls) == 1
    assert calls[0] == Step.objects.get(run_id=first.id, index=1).idempotency_key
    row = RunRow.objects.get(pk=first.id)
    assert row.used_tokens == used_tokens == 105
    assert row.used_steps == 3
    assert row.status == "completed"


def test_a_different_step_at_a_recorded_index_is_nondeterministic(ledger: Ledger) -> None:
    first = ledger.run("sdk-nondet", {}, worker="pod-2").__enter__()
    first.tool("lookup", {"id": 1}, effect="read", fn=lambda id: id)
    crash(first)
    with (
        pytest.raises(NondeterminismError) as caught,
        ledger.attach(first.id, worker="pod-2") as second,
    ):
        second.tool("lookup", {"id": 2}, effect="read", fn=lambda id: id)
    assert caught.value.code == "nondeterministic"
    assert caught.value.details["index"] == 0
    # nothing was failed: the run waits for recovery (and, in a loop, review)
    assert RunRow.objects.get(pk=first.id).status == "running"


def test_interrupted_steps_are_reexecuted_and_nobody_enforced_ones_go_to_review(
    ledger: Ledger,
) -> None:
    executions: list[str] = []

    def read(x: int) -> int:
        executions.append("read")
        return x

    def send(to: str) -> str:  # no idempotency_key parameter: enforced by nobody
        executions.append("send")
        time.sleep(0)
        return to

    first = ledger.run("sdk-recover", {}, worker="pod-3").__enter__()
    # a read step and a write step whose processes die mid-execution: intents only
    first._intent(StepIntent(first.epoch, 0, "tool", "read", "read", {"x": 1}))
    crash(first)
    second = ledger.attach(first.id, worker="pod-3").__enter__()
    assert second.journal[0]["state"] == "interrupted"
    assert second.tool("read", {"x": 1}, effect="read", fn=read) == 1
    second._intent(
        StepIntent(
            second.epoch, 1, "tool", "send", "write", {"to": "a@b.example"}, enforced_by="nobody"
        )
    )
    crash(second)
    assert executions == ["read"]
    with pytest.raises(NeedsReview), ledger.attach(first.id, worker="pod-3"):
        pass
    row = RunRow.objects.get(pk=first.id)
    assert row.status == "needs_review"
    assert Step.objects.get(run=row, index=1).state == "unknown"
    assert executions == ["read"]


def test_a_run_finished_over_an_open_write_raises_needs_review_and_the_write_waits_for_a_person(
    ledger: Ledger,
) -> None:
    def send(to: str) -> str:  # its upstream hung: what it did is not known
        raise LedgerError("upstream did not answer", code="upstream_timeout")

    with pytest.raises(NeedsReview) as stopped, ledger.run("sdk-open-write", {}) as run:
        # the agent goes on and finishes: the write's intent has no outcome
        with contextlib.suppress(LedgerError):
            run.tool("email.send", {"to": "a@b.example"}, fn=send)
        run.output = "done"

    assert stopped.value.details["steps"] == [0]
    row = RunRow.objects.get(pk=run.id)
    assert (row.status, row.output) == ("needs_review", None)
    assert Step.objects.get(run=row, index=0).state == "unknown"


def test_zombie_every_write_is_refused_with_stale_epoch(ledger: Ledger) -> None:
    effects: list[str] = []

    def send(to: str, idempotency_key: str) -> str:
        effects.append(to)
        return to

    zombie = ledger.run("sdk-zombie", {}, worker="pod-4").__enter__()
    zombie.tool("note", {"n": 0}, effect="read", fn=lambda n: n)
    crash(zombie)
    with ledger.attach(zombie.id, worker="pod-4") as successor:
        successor.tool("note", {"n": 0}, effect="read", fn=lambda n: n)
        successor.tool("email", {"to": "x@y.example"}, fn=send)
        successor.output = "done by the successor"
    events_before = Event.objects.filter(run_id=zombie.id).count()

    attempts = {
        "write tool": lambda: zombie.tool("email", {"to": "x@y.example"}, fn=send),
        "read tool": lambda: zombie.tool("note", {"n": 1}, effect="read", fn=lambda n: n),
        "model": lambda: zombie.model(scripted_model, [{"role": "user", "content": "z"}]),
        "heartbeat": lambda: zombie._write(ledger._transport.heartbeat, zombie.id, epoch=1),
        "complete": lambda: zombie.__exit__(None, None, None),
    }
    for what, attempt in attempts.items():
        zombie._stopped = None  # forget the last refusal so the server answers each one
        zombie._next = 1
        with pytest.raises(StaleLease) as caught:
            attempt()
        assert caught.value.code == "stale_epoch", what
    # once refused, the SDK sends nothing more at all
    with pytest.raises(StaleLease):
        zombie.tool("email", {"to": "x@y.example"}, fn=send)
    assert effects == ["x@y.example"]
    assert Event.objects.filter(run_id=zombie.id).count() == events_before
    assert RunRow.objects.get(pk=zombie.id).output == "done by the successor"


def test_an_outcome_that_crosses_the_token_budget_is_recorded_then_stops(
    ledger: Ledger, make_policy: Any
) -> None:
    make_policy("sdk-budget", max_tokens=50)
    with (
        pytest.raises(BudgetExceeded) as caught,
        ledger.run("sdk-budget", {}, worker="pod-5") as run,
    ):
        run.model(scripted_model, [{"role": "user", "content": "x"}], tokens=100)
        run.model(scripted_model, [{"role": "user", "content": "y"}])
    assert caught.value.details["limit"] == "tokens"
    row = RunRow.objects.get(pk=run.id)
    assert row.status == "budget_exceeded"
    assert row.used_tokens == 105 and row.used_steps == 1
    assert run.journal[0]["state"] == "done"


def test_a_failing_tool_is_journalled_and_replays_as_the_same_failure(ledger: Ledger) -> None:
    def boom(n: int) -> None:
        raise ValueError(f"bad {n}")

    first = ledger.run("sdk-error", {}, worker="pod-6").__enter__()
    with pytest.raises(ValueError, match="bad 3"):
        first.tool("flaky", {"n": 3}, effect="read", fn=boom)
    crash(first)
    with ledger.attach(first.id, worker="pod-6") as second:
        with pytest.raises(StepFailed) as caught:
            second.tool("flaky", {"n": 3}, effect="read", fn=boom)
        assert caught.value.result == {"error": "ValueError", "message": "bad 3"}
        second.output = "handled"
    assert Step.objects.get(run_id=first.id, index=0).state == "error"


def test_an_exception_in_the_agent_fails_the_run(ledger: Ledger) -> None:
    with pytest.raises(RuntimeError), ledger.run("sdk-fail", {}, worker="pod-7") as run:
        raise RuntimeError("agent bug")
    row = RunRow.objects.get(pk=run.id)
    assert row.status == "failed"
    assert row.error == {"type": "RuntimeError", "message": "agent bug"}


def test_tool_decorator_journals_bound_arguments_and_passes_the_key(ledger: Ledger) -> None:
    seen: list[str] = []

    @tool(name="crm.update")
    def update(customer: str, plan: str = "pro", *, idempotency_key: str) -> dict[str, str]:
        seen.append(idempotency_key)
        return {"customer": customer, "plan": plan}

    with ledger.run("sdk-decorator", {}, worker="pod-8") as run:
        assert update("ada@example.com") == {"customer": "ada@example.com", "plan": "pro"}
        run.output = "ok"
    step = Step.objects.get(run_id=run.id, index=0)
    assert (step.name, step.effect, step.enforced_by) == ("crm.update", "write", "tool")
    assert step.arguments == {"customer": "ada@example.com"}
    assert seen == [step.idempotency_key]
    with pytest.raises(RuntimeError, match="No active run"):
        contextvars.Context().run(update, "outside@example.com")


def test_heartbeats_extend_the_lease_in_the_background(ledger: Ledger) -> None:
    with ledger.run("sdk-heartbeat", {}, worker="pod-9", ttl_seconds=5) as run:
        first_expiry = RunRow.objects.get(pk=run.id).lease_expires_at
        deadline = time.monotonic() + 10
        while RunRow.objects.get(pk=run.id).lease_expires_at == first_expiry:
            assert time.monotonic() < deadline, "no heartbeat within 10 s"
            time.sleep(0.3)
        run.output = "ok"
    assert RunRow.objects.get(pk=run.id).status == "completed"


def test_an_unreachable_ledger_is_a_clear_error() -> None:
    with (
        Ledger("http://127.0.0.1:8299", "token", retries=1, backoff=0.01) as client,
        pytest.raises(LedgerUnavailable) as caught,
        client.run("sdk-down", {}),
    ):
        pass
    assert "unreachable" in str(caught.value)
    assert "INTENTLEDGER_URL" in str(caught.value)


class _Flaky(http.server.BaseHTTPRequestHandler):
    answers: list[int] = []

    def do_GET(self) -> None:
        status = self.answers.pop(0) if self.answers else 200
        body = b'{"id": "r", "status": "running"}' if status == 200 else b"{}"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_5xx_answers_are_retried_with_backoff_then_reported() -> None:
    port = port_in_range()  # a free port from the OS
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with Ledger(f"http://127.0.0.1:{port}", "t", retries=3, backoff=0.01) as client:
            _Flaky.answers[:] = [503, 502]
            assert client.get_run("r")["status"] == "running"
            assert _Flaky.answers == []
            _Flaky.answers[:] = [503] * 5
            with pytest.raises(LedgerUnavailable, match="answered 503 after 4 attempt"):
                client.get_run("r")
    finally:
        server.shutdown()
        server.server_close()


def test_gateway_tools_run_with_the_step_key_and_refusals_are_recorded_errors(
    ledger: Ledger,
) -> None:
    from tools.models import IdempotencyKey, Ticket

    with ledger.run("sdk-gateway", {}, worker="pod-10") as run:
        made = run.tool(
            "tickets.create",
            {"customer": "gw@example.com", "subject": "Gateway", "body": "via the SDK"},
        )
        found = run.tool("tickets.search", {"customer": "gw@example.com"}, effect="read")
        with pytest.raises(StepFailed) as refused:
            run.tool("tickets.comment", {"ticket_id": 999_999_999, "body": "nobody home"})
        run.output = made
    create, search, comment = Step.objects.filter(run_id=run.id).order_by("index")
    assert (search.effect, search.enforced_by, search.state) == ("read", None, "done")
    assert Ticket.objects.get(customer="gw@example.com").pk == made["ticket"]["id"]
    assert found["tickets"][0]["id"] == made["ticket"]["id"]
    assert (create.enforced_by, create.state) == ("ledger", "done")
    assert IdempotencyKey.objects.get(key=create.idempotency_key).state == "completed"
    assert comment.state == "error"
    assert comment.result is not None
    # the gateway's stored failure, recorded by the gateway itself (one call per step)
    assert refused.value.result == comment.result
    assert comment.result["error"]["code"] == "ticket_not_found"
    events = list(Event.objects.filter(run_id=run.id).values_list("type", flat=True))
    assert events.count("step_done") == 2 and events.count("step_error") == 1
    assert RunRow.objects.get(pk=run.id).status == "completed"


def test_an_interrupted_tool_enforced_write_runs_again_with_the_same_key(ledger: Ledger) -> None:
    keys: list[str] = []

    def charge(amount: int, idempotency_key: str) -> dict[str, int]:
        keys.append(idempotency_key)  # the payment provider dedupes on this key
        return {"charged": amount}

    first = ledger.run("sdk-tool-enforced", {}, worker="pod-11").__enter__()
    # the process died after journalling the intent, before (or while) charging
    intent = first._intent(
        StepIntent(first.epoch, 0, "tool", "charge", "write", {"amount": 3}, enforced_by="tool")
    )
    crash(first)
    with ledger.attach(first.id, worker="pod-11") as second:
        assert second.journal[0]["state"] == "interrupted"
        assert second.tool("charge", {"amount": 3}, fn=charge) == {"charged": 3}
        second.output = "ok"
    assert keys == [intent["idempotency_key"]]
    step = Step.objects.get(run_id=first.id, index=0)
    assert (step.state, step.enforced_by, step.executions) == ("done", "tool", 2)
    assert RunRow.objects.get(pk=first.id).used_steps == 1  # the re-execution cost no new step


def test_a_worker_whose_gateway_key_was_lost_mid_execution_stops_without_waiting(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway says the key's lock is stale (`details.stale`): the execution holding it is
    gone and only a supervisor's retry frees the key, so the worker stops at once rather than
    asking again for IN_PROGRESS_WAIT_SECONDS (30 s)."""
    from datetime import timedelta

    import intentledger._run as sdk_run
    from django.utils import timezone

    from tools.idempotency import arguments_hash, idempotency_reserve
    from tools.models import IdempotencyKey

    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        time.sleep(seconds)

    # the SDK's own view of the time module: the real clock, its sleeps counted
    monkeypatch.setattr(sdk_run, "time", SimpleNamespace(monotonic=time.monotonic, sleep=sleep))
    args = {"customer": "lost@example.com", "subject": "Lost", "body": "mid-way"}
    with (
        pytest.raises(LedgerUnavailable, match="stale lock") as stopped,
        ledger.run("sdk-lost-key", {}, worker="pod-12") as run,
    ):
        intent = run._intent(
            StepIntent(run.epoch, 0, "tool", "tickets.create", "write", args, enforced_by="ledger")
        )
        # a server process took the key and died inside the tool, long ago
        idempotency_reserve(
            key=intent["idempotency_key"], tool="tickets.create", request_hash=arguments_hash(args)
        )
        IdempotencyKey.objects.filter(key=intent["idempotency_key"]).update(
            locked_at=timezone.now() - timedelta(hours=1)
        )
        run.tool("tickets.create", args)
    assert stopped.value.details["stale"] is True
    assert slept == []  # asked once: no 0.2 s polls of a key nobody will finish
    assert Step.objects.get(run_id=run.id, index=0).state == "intent"


def test_find_and_wait_give_a_caller_whose_call_timed_out_its_run_and_result(
    ledger: Ledger,
) -> None:
    assert ledger.find("sdk-find", "order-7") is None
    run = ledger.run("sdk-find", {"order": 7}, external_id="order-7", worker="pod-find")
    run.__enter__()
    found = ledger.find("sdk-find", "order-7")
    assert found is not None and found["id"] == run.id and found["runner"] == "external"
    waiting = ledger.wait(run.id, timeout=1)  # still running: answered when the time is up
    assert waiting["status"] == "running"

    def finish() -> None:  # the worker, elsewhere, completes the run
        time.sleep(0.5)
        run_complete(run_id=run.id, epoch=run.epoch, output={"shipped": True}, actor="worker")

    finisher = threading.Thread(target=finish)
    finisher.start()
    started = time.monotonic()
    done = ledger.wait(run.id, timeout=30)
    finisher.join()
    assert (done["status"], done["output"]) == ("completed", {"shipped": True})
    assert time.monotonic() - started < 5
    crash(run)
