"""Dashboard fixtures: users in each group, a logged-in client per group, a killed support run."""

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from dashboard.roles import ADMINS, AUDITORS, SUPERVISORS
from tests.review.browser import review_server  # noqa: F401  (fixtures)
from tests.review.factories import UnknownStep, groups_ready, killed_support_run, user_in

ROLES = [SUPERVISORS, ADMINS, AUDITORS, None]


@pytest.fixture
def groups(db: Any) -> None:
    groups_ready()


@pytest.fixture
def make_user(groups: None) -> Callable[..., User]:
    return user_in


@pytest.fixture
def client_for(groups: None) -> Callable[..., Client]:
    """A logged-in Client for a user in `group` (None: a user in no group)."""

    def make(group: str | None, *, csrf: bool = False, username: str | None = None) -> Client:
        client = Client(enforce_csrf_checks=csrf)
        client.force_login(user_in(group, username))
        return client

    return make


@pytest.fixture
def unknown_step(db: Any) -> UnknownStep:
    return killed_support_run()
