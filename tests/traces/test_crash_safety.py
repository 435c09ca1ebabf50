"""The exporter's cursor against the journal's worst cases: a transaction that commits after a
later one (the outbox trap), and an exporter killed with a batch in flight."""

import signal
import sys
import threading
from collections import Counter
from typing import Any

import pytest
from django.db import connection, transaction
from rest_framework.test import APIClient

from runs.services.creation import run_create
from runs.services.finish import run_complete
from runs.services.leases import run_lease_acquire
from tests.processes import ROOT, server_env, spawn, stop_process
from tests.runs.journal_client import JournalClient
from tests.traces.receiver import OtlpReceiver
from tests.traces.story import told
from traces.exporter import export_pending
from traces.models import TraceCursor

pytestmark = pytest.mark.django_db(transaction=True)


def run_spans(receiver: OtlpReceiver) -> dict[str, str]:
    """The runs whose run span the receiver holds: run id → span name."""
    return {
        s.attributes["agent_ledger.run.id"]: s.name
        for s in receiver.spans
        if s.name.startswith("invoke_agent")
    }


@pytest.mark.pg_connections(2)
def test_a_transaction_that_commits_late_is_exported_not_skipped(
    receiver: OtlpReceiver, api: APIClient
) -> None:
    """Run A's events get the lower ids but commit last: a cursor over event ids would export
    B, move past A's ids and never see A."""
    a_written, a_may_commit = threading.Event(), threading.Event()
    a_run: list[str] = []

    def slow_transaction() -> None:
        try:
            with transaction.atomic():
                run, _ = run_create(agent="late", input={}, actor="test")
                grant = run_lease_acquire(run_id=run.pk, worker="w-a", ttl_seconds=30, actor="w")
                run_complete(run_id=run.pk, epoch=grant.epoch, output={}, actor="w")
                a_run.append(str(run.pk))
                a_written.set()
                a_may_commit.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=slow_transaction)
    thread.start()
    assert a_written.wait(30)
    journal = JournalClient(api)
    b_run = journal.create(agent="early")["id"]
    epoch = journal.lease(b_run).json()["epoch"]
    api.post(f"/api/v1/runs/{b_run}/complete", {"epoch": epoch, "output": {}})

    while_a_is_open = export_pending()
    a_may_commit.set()
    thread.join(30)
    after = export_pending()

    assert while_a_is_open.spans == 0  # B waits behind A, which may still commit
    assert run_spans(receiver) == {a_run[0]: "invoke_agent late", b_run: "invoke_agent early"}
    assert not after.failed
    assert Counter(receiver.span_ids()).most_common(1)[0][1] == 1


@pytest.mark.pg_connections(2)
def test_an_exporter_killed_with_a_batch_in_flight_loses_and_duplicates_no_span(
    receiver: OtlpReceiver, api: APIClient, fake_clock: Any, worker_token: str
) -> None:
    told(api, fake_clock, worker_token)
    receiver.hold_request(3)  # two requests accepted, the third in flight when the kill comes
    exporter = spawn(
        [sys.executable, "manage.py", "export_traces", "--once"],
        log_name="traces-exporter-killed",
        env=server_env({"TRACES_EXPORT_BATCH_EVENTS": "3"}),
        cwd=ROOT,
    )
    try:
        assert receiver.holding.wait(120), exporter.log_path.read_text()  # type: ignore[attr-defined]
        exporter.send_signal(signal.SIGKILL)
        exporter.wait(30)
    finally:
        stop_process(exporter)
    receiver.release()
    accepted_before_restart = len(receiver.spans)

    resumed = export_pending()

    assert receiver.dropped == 1 and accepted_before_restart > 0
    assert not resumed.failed and resumed.spans > 0
    sent = Counter(receiver.span_ids())
    assert sent.most_common(1)[0][1] == 1  # nothing twice
    # nothing lost: the whole journal exported afresh to another receiver names the same spans
    TraceCursor.objects.update(event_xact=0, event_id=0)
    fresh = OtlpReceiver()
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", fresh.endpoint)
            export_pending()
        assert set(fresh.span_ids()) == set(sent)
    finally:
        fresh.close()
