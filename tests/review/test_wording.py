"""Sentences on the desk read as English whatever the tool is called: articles, plurals, and
warnings that name the tool at hand instead of assuming it sends email."""

import re
from typing import Any

import pytest
from django.apps import apps

from audit.verify import Report, render_report
from dashboard.roles import ADMINS, SUPERVISORS
from runs.models import Step
from runs.services.creation import run_create
from runs.services.leases import run_lease_acquire
from runs.services.steps import step_intent_record
from tests.review.factories import _lost_lease

pytestmark = pytest.mark.django_db


def words(html: str) -> str:
    """The page as a person reads it: tags gone, spaces collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def a_maybe_sent(tool: str, *, lease: bool = True) -> Any:
    """A run whose write `tool` (enforced by nobody) was under way when its worker died."""
    run, _ = run_create(agent="notify", input={}, actor="worker:w-1")
    epoch = run_lease_acquire(run_id=run.pk, worker="w-1", ttl_seconds=5, actor="w-1").epoch
    step_intent_record(
        run_id=run.pk,
        epoch=epoch,
        index=0,
        kind="tool",
        name=tool,
        effect="write",
        enforced_by="nobody",
        arguments={"to": "+4420", "body": "Your refund is on its way."},
        actor="worker:w-1",
    )
    if lease:
        _lost_lease(run.pk, 5)
    return run


def test_a_step_under_way_reads_as_a_sentence_then_says_there_is_nothing_to_decide(
    client_for: Any,
) -> None:
    run = a_maybe_sent("sms.send", lease=False)
    page = words(client_for(SUPERVISORS).get(f"/queue/{run.pk}/0/").content.decode())
    assert "no outcome yet intent" not in page
    assert (
        "This step is under way: its intent is journalled and no outcome yet (intent). "
        "Nothing to decide here." in page
    )


def test_the_retry_warning_names_the_tool_at_hand_not_an_email(client_for: Any) -> None:
    run = a_maybe_sent("sms.send")
    assert Step.objects.get(run=run, index=0).state == "unknown"
    client = client_for(SUPERVISORS, username="sam")
    page = words(client.get(f"/queue/{run.pk}/0/").content.decode())
    assert "sms.send" in page and "email" not in page.lower().replace("@", "")
    assert "Nobody has decided a step of sms.send before." in page

    refused = client.post(
        f"/queue/{run.pk}/0/resolve",
        {"action": "retry", "note": "checked the gateway"},
        follow=True,
    )
    said = words(refused.content.decode())
    assert "sms.send" in said and "email" not in said.lower()
    assert Step.objects.get(run=run, index=0).state == "unknown"


def test_an_email_step_takes_an_article_that_fits_every_name(client_for: Any) -> None:
    run = a_maybe_sent("email.send")
    page = words(client_for(SUPERVISORS).get(f"/queue/{run.pk}/0/").content.decode())
    assert "a email.send" not in page
    assert "Nobody has decided a step of email.send before." in page


def test_counts_of_one_are_singular() -> None:
    report = Report()
    report.add(1, "hash does not match")
    assert render_report(report)[-1] == "FAILED: 1 problem"


def test_every_model_has_a_plural_a_person_would_write(client_for: Any) -> None:
    wrong = [
        str(model._meta.verbose_name_plural)
        for model in apps.get_models()
        if re.search(r"[^aeiou]ys$", str(model._meta.verbose_name_plural))
    ]
    assert wrong == []
    admin_index = words(client_for(ADMINS).get("/admin/").content.decode())
    assert "Audit entrys" not in admin_index
