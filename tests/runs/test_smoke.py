from typing import Any

from rest_framework.test import APIClient

from tests.runs.journal_client import JournalClient


def test_a_run_is_created_leased_and_journalled(api: APIClient, db: Any) -> None:
    journal = JournalClient(api)
    run = journal.create(external_id="ticket-1")
    lease = journal.lease(run["id"])
    assert lease.status_code == 200
    epoch = lease.json()["epoch"]
    journal.write_step(run["id"], epoch, 0, tokens=10)
    assert journal.read(run["id"], epoch, 1, tokens=5).status_code == 201
    body = journal.journal(run["id"])
    assert [s["state"] for s in body["steps"]] == ["done", "done"]
    assert journal.run(run["id"])["budget"]["used"]["tokens"] == 15
