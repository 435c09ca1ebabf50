"""Rules the service decides, whoever calls it: the API's serializer only checks shapes."""

import pytest
from rest_framework.test import APIClient

from runs.api_errors import ApplicationError
from runs.models import Step
from runs.services.steps import step_intent_record
from tests.runs.journal_client import JournalClient


@pytest.mark.django_db
def test_a_read_step_that_names_an_enforcer_is_refused_by_the_service_as_by_the_api(
    api: APIClient,
):
    # the contract: enforced_by on a read step is a 400; the service used to store it as null
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    epoch = journal.lease(run_id).json()["epoch"]

    with pytest.raises(ApplicationError) as refused:
        step_intent_record(
            run_id=run_id,
            epoch=epoch,
            index=0,
            kind="model",
            name="model.chat",
            effect="read",
            enforced_by="tool",
            arguments={"q": 1},
            actor="worker:w-1",
        )
    assert (refused.value.code, refused.value.status_code) == ("validation_error", 400)
    assert list(refused.value.details) == ["enforced_by"]

    through_the_api = journal.intent(
        run_id, epoch, 0, kind="model", name="model.chat", effect="read", enforced_by="tool"
    )
    assert through_the_api.status_code == 400
    assert through_the_api.json()["error"]["details"] == refused.value.details
    assert not Step.objects.filter(run_id=run_id).exists()


@pytest.mark.django_db
def test_a_write_step_with_an_outcome_is_refused_by_the_service_as_by_the_api(api: APIClient):
    journal = JournalClient(api)
    run_id = journal.create()["id"]
    epoch = journal.lease(run_id).json()["epoch"]
    outcome: dict[str, object] = {"status": "ok", "result": {}, "usage": None}

    through_the_api = journal.intent(run_id, epoch, 0, outcome=outcome)

    assert through_the_api.status_code == 400
    assert list(through_the_api.json()["error"]["details"]) == ["outcome"]
    assert not Step.objects.filter(run_id=run_id).exists()
