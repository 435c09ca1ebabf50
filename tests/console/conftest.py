"""The console's tests use the dashboard's fixtures (users per group, logged-in clients)."""

from tests.review.browser import review_server  # noqa: F401  (fixture)
from tests.review.conftest import client_for, groups, make_user  # noqa: F401
