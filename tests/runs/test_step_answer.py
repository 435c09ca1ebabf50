"""A step call answers the step as its row holds it: every column, read by the model's metadata
from the kernel's answer (`ledger_step_answer.step` is a `runs_step`), so a column added to the
table reaches the answer with no list to extend (docs/design-notes.md, "A step's answer is
declared once")."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from runs import kernel
from runs.models import Step
from tests.runs.journal_client import JournalClient

pytestmark = pytest.mark.django_db


def _columns(step: Step) -> dict[str, Any]:
    return {field.attname: getattr(step, field.attname) for field in Step._meta.concrete_fields}


def test_a_re_executed_step_is_answered_with_every_column_of_its_row(
    api: APIClient, fake_clock: Any
) -> None:
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    epoch = journal.lease(run_id, worker="w-1").json()["epoch"]
    intent: dict[str, Any] = dict(
        kind="tool", name="tickets.create", effect="write", enforced_by="tool"
    )
    arguments = {"n": 0}
    assert journal.intent(run_id, epoch, 0, arguments=arguments, **intent).status_code == 201
    fake_clock.advance(seconds=31)  # the worker died: its write is re-run under the same key
    epoch = journal.lease(run_id, worker="w-2").json()["epoch"]

    again = kernel.step_intent(
        run_id=run_id, epoch=epoch, index=0, arguments=arguments, actor="worker:test", **intent
    )
    replayed = kernel.step_intent(
        run_id=run_id, epoch=epoch, index=0, arguments=arguments, actor="worker:test", **intent
    )

    stored = Step.objects.get(run_id=run_id, index=0)
    assert stored.executions == 2
    assert _columns(again.step) == _columns(stored)
    assert _columns(replayed.step) == _columns(stored)
    assert again.created and not replayed.created
    # a row from the database: saving it updates it (no second insert)
    replayed.step.resolution_note = "checked"
    replayed.step.save(update_fields=["resolution_note"])
    assert Step.objects.get(pk=stored.pk).resolution_note == "checked"
