"""Audit fixtures: a signing key for the test session, users in each dashboard group."""

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from audit.signing import private_key_generate, private_key_parse, public_key_text

SIGNING_KEY = private_key_generate()
PUBLIC_KEY = public_key_text(private_key_parse(SIGNING_KEY).public_key())


@pytest.fixture(autouse=True)
def _audit_settings(settings: Any, tmp_path: Any) -> None:
    settings.AUDIT_SIGNING_KEY = SIGNING_KEY
    settings.AUDIT_EXPORT_DIR = str(tmp_path / "exports")


@pytest.fixture
def user_in(db: Any) -> Callable[[str], User]:
    """A logged-in-able user in one of the groups (created with get_or_create: truncation-safe)."""
    from review.roles import groups_ensure_now

    def make(group: str) -> User:
        groups_ensure_now()
        user = User.objects.create_user(username=f"{group}-user", password="pw-for-tests-only")
        user.groups.add(Group.objects.get(name=group))
        return user

    return make


@pytest.fixture
def client_for(user_in: Callable[[str], User]) -> Callable[[str], Client]:
    def make(group: str) -> Client:
        client = Client()
        client.force_login(user_in(group))
        return client

    return make
