"""The suite's test database is a copy of a migrated template that is rebuilt whenever what builds
the schema changes (tests/database.py): these tests pin down what "what builds the schema" is."""

from typing import Any

from django.db import connection

from tests.database import TEMPLATE_NAME, _schema_sources, schema_fingerprint
from tests.processes import ROOT


def test_the_fingerprint_covers_every_migration_the_sql_they_read_and_the_code_they_import() -> (
    None
):
    sources = {str(path.relative_to(ROOT)) for path in _schema_sources()}
    migrations = {str(p.relative_to(ROOT)) for p in ROOT.glob("*/migrations/*.py")}
    sql = {str(p.relative_to(ROOT)) for p in ROOT.glob("runs/sql/*.sql")}
    assert migrations and sql
    assert migrations | sql <= sources
    # the seeding and permission functions data migrations call
    assert {"runs/default_policy.py", "dashboard/roles.py"} <= sources


def test_this_sessions_database_was_copied_from_a_template_of_the_current_schema(db: Any) -> None:
    with connection._nodb_cursor() as cursor:
        cursor.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            [TEMPLATE_NAME],
        )
        (label,) = cursor.fetchone()
    assert label == schema_fingerprint()
    assert connection.settings_dict["NAME"] != TEMPLATE_NAME


def test_the_flush_after_a_transactional_test_empties_every_table_the_append_only_ones_too(
    transactional_db: Any,
) -> None:
    """What pytest-django does after each `transactional_db` test (tests/database.py replaces
    Django's TRUNCATE of every table): the journal's append-only tables refuse DELETE, so they
    must go by TRUNCATE; the migrations' default policy and groups come back through
    post_migrate."""
    from django.contrib.auth.models import Group, Permission
    from django.core.management import call_command

    from dashboard.roles import GROUP_PERMISSIONS
    from review.models import AuditEntry
    from runs.models import BudgetPolicy, Event, Run
    from tests.review.factories import killed_support_run, user_in

    killed_support_run()
    user_in("supervisors")
    AuditEntry.objects.create(actor_name="test", action="test.flush", target="-")
    assert Event.objects.exists() and Run.objects.exists()
    permissions = Permission.objects.count()

    call_command("flush", verbosity=0, interactive=False, reset_sequences=False)

    assert not Event.objects.exists() and not Run.objects.exists()
    assert not AuditEntry.objects.exists()
    # what the data migrations seeded is back (tests/conftest.py, post_migrate)
    assert list(BudgetPolicy.objects.values_list("is_default", flat=True)) == [True]
    assert set(Group.objects.values_list("name", flat=True)) == set(GROUP_PERMISSIONS)
    assert Group.objects.get(name="supervisors").permissions.count() == len(
        GROUP_PERMISSIONS["supervisors"]
    )
    assert Permission.objects.count() == permissions
