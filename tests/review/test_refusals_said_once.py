"""A refusal says its rule once, in the rule's own words: an expiry below the minimum names the
minimum (not "≥ 0" from the column's type), and a claim someone else holds is said once."""

import re
from typing import Any

import pytest
from django.test import Client

from dashboard.roles import ADMINS, SUPERVISORS
from runs.models import ApprovalRule
from tests.review.factories import killed_support_run, user_in

pytestmark = pytest.mark.django_db


def words(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.mark.parametrize("expiry", ["-5", "5"])
def test_an_expiry_below_a_minute_is_refused_with_the_rules_own_words(
    groups: Any, expiry: str
) -> None:
    client = Client()
    client.force_login(user_in(ADMINS, "ada"))
    refused = client.post(
        "/approval-rules/new",
        {
            "agent": "",
            "tool_pattern": "sms.*",
            "approvals_required": "1",
            "expires_after_seconds": expiry,
            "active": "on",
        },
    )
    said = words(refused.content.decode())
    assert refused.status_code == 400
    assert "An expiry is at least 60 seconds (or empty: never)." in said
    assert "greater than or equal to 0" not in said and "≥ 0" not in said
    assert not ApprovalRule.objects.filter(tool_pattern="sms.*").exists()


def test_a_claim_someone_else_holds_is_said_once(groups: Any) -> None:
    item = killed_support_run()
    sam, bob = Client(), Client()
    sam.force_login(user_in(SUPERVISORS, "sam"))
    bob.force_login(user_in(SUPERVISORS, "bob"))
    claim = f"/queue/{item.run_id}/{item.index}/claim"
    assert sam.post(claim, HTTP_HX_REQUEST="true").status_code == 200

    answer = bob.post(claim, HTTP_HX_REQUEST="true")  # the desk's claim button
    said = words(answer.content.decode())
    assert len(re.findall(r"sam (?:already claimed|is working on it)", said)) == 1, said
    assert "Not claimed: sam is working on it (claim until" in said
