"""Audit fixtures: a signing key for the test session, users in each dashboard group."""

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
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
    """A logged-in-able user in one of the groups (tests/review/factories.py)."""
    from tests.review.factories import user_in

    return user_in


@pytest.fixture
def client_for(user_in: Callable[[str], User]) -> Callable[[str], Client]:
    def make(group: str) -> Client:
        client = Client()
        client.force_login(user_in(group))
        return client

    return make


from tests.review.browser import review_server  # noqa: E402, F401  (fixture)
