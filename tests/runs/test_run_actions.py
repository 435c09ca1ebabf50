"""Cancel and fork: transitions of the journal kernel, each with its event, each verifying."""

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from runs.api_errors import ApplicationError
from runs.chain import run_chain_breaks
from runs.constants import EventType, RunStatus, StepState
from runs.models import Event, Run, Step
from runs.services.actions import run_cancel
from runs.services.finish import run_complete
from runs.services.forks import run_fork
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record, step_outcome_record
from tests.console.factories import journalled_run, write_step
from tests.review.factories import killed_support_run

pytestmark = pytest.mark.django_db

WORKER = "worker:w-1"


def verify_journal(run_id: Any) -> int:
    out = StringIO()
    try:
        call_command("verify_journal", "--run", str(run_id), stdout=out)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


# --- cancel -----------------------------------------------------------------------------------


def test_cancel_a_running_run_refuses_the_workers_next_write_with_run_finished() -> None:
    run, epoch = journalled_run(3)

    cancelled = run_cancel(run_id=run.pk, by="ada", note="customer withdrew the ticket")

    assert cancelled.status == RunStatus.CANCELLED
    # fenced (contract, third round), yet the worker learns the run is over, not stale_epoch
    assert cancelled.epoch == epoch + 1
    assert cancelled.lease_worker is None and cancelled.finished_at is not None
    with pytest.raises(ApplicationError) as refused:
        write_step(run.pk, epoch, 3)
    assert refused.value.code == "run_finished"
    assert refused.value.details == {"status": "cancelled"}
    with pytest.raises(ApplicationError) as lease:
        run_lease_acquire(run_id=run.pk, worker="w-2", ttl_seconds=30, actor="worker:w-2")
    assert lease.value.code == "run_finished"
    with pytest.raises(ApplicationError) as complete:
        run_complete(run_id=run.pk, epoch=epoch, output={}, actor=WORKER)
    assert complete.value.code == "run_finished"
    assert Step.objects.filter(run=run).count() == 3
    last = Event.objects.filter(run=run).order_by("-seq").first()
    assert last is not None and last.type == EventType.RUN_CANCELLED
    assert last.payload == {
        "by": "ada",
        "note": "customer withdrew the ticket",
        "previous_status": "running",
        "worker": "w-1",
        "epoch": epoch + 1,
    }
    assert last.actor == "user:ada"
    assert verify_journal(run.pk) == 0


def test_an_outcome_in_flight_when_the_run_is_cancelled_is_still_recorded() -> None:
    run, epoch = journalled_run(1)
    step_intent_record(
        run_id=run.pk,
        epoch=epoch,
        index=1,
        kind="tool",
        name="email.send",
        effect="write",
        enforced_by="ledger",
        arguments={"to": "ada@example.com", "subject": "s", "body": "b"},
        actor=WORKER,
    )
    run_cancel(run_id=run.pk, by="ada", note="stop")
    step_outcome_record(
        run_id=run.pk,
        index=1,
        epoch=epoch,
        status="ok",
        result={"email": {"id": 1}},
        usage=None,
        actor=WORKER,
    )
    assert Step.objects.get(run=run, index=1).state == StepState.DONE
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED
    assert verify_journal(run.pk) == 0


@pytest.mark.parametrize("how", ["completed", "cancelled"])
def test_cancel_of_a_finished_run_says_so(how: str) -> None:
    run, epoch = journalled_run(1)
    if how == "completed":
        run_complete(run_id=run.pk, epoch=epoch, output={}, actor=WORKER)
    else:
        run_cancel(run_id=run.pk, by="ada", note="first")
    with pytest.raises(ApplicationError) as refused:
        run_cancel(run_id=run.pk, by="ada", note="again")
    assert refused.value.code == "run_finished"
    assert f"already {how}" in refused.value.message


def test_cancel_of_an_unknown_run_is_not_found_and_a_note_is_required() -> None:
    with pytest.raises(ApplicationError) as missing:
        run_cancel(run_id="00000000-0000-0000-0000-000000000000", by="ada", note="x")
    assert missing.value.status_code == 404
    run, _ = journalled_run(0)
    with pytest.raises(ApplicationError) as no_note:
        run_cancel(run_id=run.pk, by="ada", note="  ")
    assert no_note.value.code == "validation_error"
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING


def test_cancel_of_a_run_in_review_keeps_its_unknown_step_for_a_person() -> None:
    item = killed_support_run()
    run_cancel(run_id=item.run_id, by="ada", note="duplicate ticket")
    assert item.run.status == RunStatus.CANCELLED
    assert item.step.state == StepState.UNKNOWN
    assert verify_journal(item.run_id) == 0


# --- fork -------------------------------------------------------------------------------------


def test_a_fork_copies_the_first_n_steps_with_their_keys_and_verifies() -> None:
    original, _ = journalled_run(6)
    run_cancel(run_id=original.pk, by="ada", note="stopped at step 6")

    fork = run_fork(
        run_id=original.pk,
        index=4,
        by="ada",
        note="what if it had gone on",
        writes={"tickets.comment": "again"},
    )

    assert (fork.status, fork.forked_from_id, fork.forked_from_index) == (
        RunStatus.PENDING,
        original.pk,
        4,
    )
    assert fork.external_id is None and fork.input == original.input
    copies = list(Step.objects.filter(run=fork).order_by("index"))
    sources = list(Step.objects.filter(run=original, index__lt=4).order_by("index"))
    assert [s.index for s in copies] == [0, 1, 2, 3]
    for copy, source in zip(copies, sources, strict=True):
        assert (copy.idempotency_key, copy.result, copy.state, copy.arguments) == (
            source.idempotency_key,
            source.result,
            source.state,
            source.arguments,
        )
        assert copy.executions == 0 and copy.epoch == 0
    assert (fork.step_count, fork.used_steps, fork.used_tokens) == (4, 4, 2 * 15)
    types = list(Event.objects.filter(run=fork).order_by("seq").values_list("type", flat=True))
    assert types == ["run_created"] + ["step_copied"] * 4
    created = Event.objects.get(run=fork, seq=1)
    assert created.payload["forked_from"] == {"run_id": str(original.pk), "index": 4}
    forked = Event.objects.filter(run=original).order_by("-seq").first()
    assert forked is not None and forked.type == EventType.RUN_FORKED
    assert forked.payload["fork_run_id"] == str(fork.pk)
    assert verify_journal(fork.pk) == 0
    assert verify_journal(original.pk) == 0


def test_a_worker_on_the_fork_replays_the_copies_and_executes_only_what_follows() -> None:
    original, _ = journalled_run(5)
    run_cancel(run_id=original.pk, by="ada", note="stop")
    fork = run_fork(
        run_id=original.pk, index=3, by="ada", note="go on", writes={"tickets.comment": "again"}
    )

    grant = run_lease_acquire(run_id=fork.pk, worker="w-2", ttl_seconds=30, actor="worker:w-2")
    assert grant.recovered is False
    assert [s.state for s in grant.journal] == ["done"] * 3
    replayed = step_intent_record(
        run_id=fork.pk,
        epoch=grant.epoch,
        index=1,
        kind="tool",
        name="tickets.comment",
        effect="write",
        enforced_by="ledger",
        arguments={"ticket_id": 7, "body": "comment 1"},
        actor="worker:w-2",
    )
    assert replayed.created is False and replayed.step.state == StepState.DONE
    assert replayed.step.idempotency_key.startswith(f"{original.pk}:1:")  # the original's key
    for index in range(3, 6):
        write_step(fork.pk, grant.epoch, index)
    done = run_complete(run_id=fork.pk, epoch=grant.epoch, output={"ok": True}, actor="worker:w-2")
    assert done.status == RunStatus.COMPLETED
    assert done.used_steps == 6
    assert list(
        Step.objects.filter(run=fork).order_by("index").values_list("executions", flat=True)
    ) == [0, 0, 0, 1, 1, 1]
    assert verify_journal(fork.pk) == 0


def test_an_edited_copy_breaks_the_forks_chain() -> None:
    original, _ = journalled_run(2)
    fork = run_fork(run_id=original.pk, index=2, by="ada", note="copy")
    Step.objects.filter(run=fork, index=1).update(result={"comment": {"id": 999}})
    problems = [b.problem for b in run_chain_breaks(Run.objects.get(pk=fork.pk))]
    assert problems == ["step 1 result does not match its events"]


@pytest.mark.parametrize("index", [-1, 4])
def test_a_fork_index_outside_0_to_step_count_is_a_form_error(index: int) -> None:
    original, _ = journalled_run(3)
    with pytest.raises(ApplicationError) as refused:
        run_fork(run_id=original.pk, index=index, by="ada", note="x")
    assert refused.value.code == "validation_error" and "index" in refused.value.details
    assert not Run.objects.filter(forked_from=original).exists()


def test_a_fork_from_zero_is_a_fresh_run_and_one_past_an_unknown_step_is_refused() -> None:
    item = killed_support_run()
    hold = {"tickets.create": "hold", "email.send": "hold"}
    empty = run_fork(run_id=item.run_id, index=0, by="ada", note="from scratch", writes=hold)
    assert empty.step_count == 0 and verify_journal(empty.pk) == 0
    ok = run_fork(
        run_id=item.run_id,
        index=2,
        by="ada",
        note="before the email",
        writes={"email.send": "hold"},
    )
    assert ok.step_count == 2
    with pytest.raises(ApplicationError) as refused:
        run_fork(run_id=item.run_id, index=3, by="ada", note="with the unknown email")
    assert refused.value.code == "fork_step_open"
    assert refused.value.details == {"index": 2, "state": "unknown"}


def test_a_fork_of_an_unknown_run_is_not_found() -> None:
    with pytest.raises(ApplicationError) as missing:
        run_fork(run_id="00000000-0000-0000-0000-000000000000", index=0, by="a", note="x")
    assert missing.value.status_code == 404
