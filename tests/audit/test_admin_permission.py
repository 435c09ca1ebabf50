"""The audit pages' admin rights are a permission (`review.manage_audit`), not a group's name."""

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from dashboard.roles import ADMINS, AUDITORS


@pytest.mark.django_db
def test_a_person_given_manage_audit_may_set_retention_without_being_in_the_admins_group():
    person = User.objects.create_user("ines")
    person.user_permissions.add(
        Permission.objects.get(content_type__app_label="review", codename="manage_audit")
    )
    client = Client()
    client.force_login(person)

    assert client.get("/audit/retention/").status_code == 200


@pytest.mark.django_db
def test_admins_hold_manage_audit_and_auditors_do_not(client_for: Callable[[str], Client]):
    assert client_for(ADMINS).get("/audit/retention/").status_code == 200
    assert client_for(AUDITORS).get("/audit/retention/").status_code == 403
