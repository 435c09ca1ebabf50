"""Every JSON value the API accepts verifies after a round trip through PostgreSQL's jsonb.

jsonb keeps numbers as `numeric`, so what comes back is not always what Python sent: `-0.0` comes
back `0.0`, `1e16` as the integer 10000000000000000, `1.5e300` as a 301-digit integer. The chain
hashes numbers in the form storage returns them, so these runs verify.
"""

from typing import Any

from rest_framework.test import APIClient

from runs.canonical import arguments_hash, storage_form
from runs.chain import run_chain_breaks
from runs.models import Run, Step
from tests.runs.journal_client import JournalClient
from tests.runs.test_journal import verify_journal


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for level in range(depth):
        value = {"level": level, "next": value} if level % 2 else [value, -0.0]
    return value


AWKWARD = {
    "negative_zero": -0.0,
    "big_float": 1e16,
    "huge_float": 1.5e300,
    "tiny_float": 1e-7,
    "float": 0.1,
    "big_int": 2**80,
    "negative_big_int": -(2**70),
    "list": [-0.0, 1e16, 1e22, 2.5e-10, 123.0],
    "deep": _nested(50, {"x": 1e16}),
}


def test_a_run_with_awkward_numbers_verifies_after_storage_and_answers_the_same_outcome_twice(
    api: APIClient,
) -> None:
    journal = JournalClient(api)
    run = journal.create(input=AWKWARD)
    run_id = run["id"]
    epoch = journal.lease(run_id).json()["epoch"]

    assert journal.intent(run_id, epoch, 0, arguments=AWKWARD).status_code == 201
    first = journal.outcome(run_id, epoch, 0, result=AWKWARD)
    assert first.status_code == 200, first.content
    again = journal.outcome(run_id, epoch, 0, result=AWKWARD)
    assert again.status_code == 200, again.content  # the same outcome, not outcome_conflict

    read = journal.intent(
        run_id,
        epoch,
        1,
        kind="model",
        name="model.chat",
        effect="read",
        enforced_by=None,
        arguments={"q": 1e16},
        outcome={"status": "ok", "result": AWKWARD, "usage": {"input_tokens": 3}},
    )
    assert read.status_code == 201, read.content
    done = api.post(f"/api/v1/runs/{run_id}/complete", {"epoch": epoch, "output": AWKWARD})
    assert done.status_code == 200, done.content

    # what was stored is what the API answered, and what the hashes cover
    step = Step.objects.get(run_id=run_id, index=0)
    assert step.result == storage_form(AWKWARD) == done.json()["output"]
    assert step.result["negative_zero"] == 0.0 and step.result["big_float"] == 10**16
    assert step.arguments_hash == arguments_hash(step.arguments)
    assert run_chain_breaks(Run.objects.get(pk=run_id)) == []
    code, output = verify_journal("--run", run_id)
    assert code == 0, output


def test_storage_form_writes_numbers_as_postgresql_returns_them() -> None:
    assert storage_form(-0.0) == 0.0 and str(storage_form(-0.0)) == "0.0"
    assert storage_form(1e16) == 10**16 and isinstance(storage_form(1e16), int)
    assert storage_form(1.5e300) == 15 * 10**299
    assert storage_form(1e-7) == 1e-7 and isinstance(storage_form(1e-7), float)
    assert storage_form(123.0) == 123.0 and isinstance(storage_form(123.0), float)
    assert storage_form({"a": [True, None, "x", 2**80, {"b": -0.0}]}) == {
        "a": [True, None, "x", 2**80, {"b": 0.0}]
    }
