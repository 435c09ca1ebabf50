"""Fresh, empty PostgreSQL databases on the test server, for a ledger that starts from nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection
from psycopg import sql

from tests.database import admin_connect
from tests.processes import test_database_url


@contextmanager
def fresh_database(label: str) -> Iterator[str]:
    """An empty database of its own (no tables, no migrations) for the block; yields its URL.
    Made as docs/deploy.md has an operator make one: by the admin, owned by the ordinary role the
    ledger connects as (the suite's, tests/database.py), whose URL it is. Named after this
    session's test database, so two sessions on one server never share one."""
    name = f"{connection.settings_dict['NAME']}_{label}_{uuid.uuid4().hex[:6]}"
    with admin_connect() as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(name), sql.Identifier(connection.settings_dict["USER"])
            )
        )
    try:
        yield test_database_url().rpartition("/")[0] + f"/{name}"
    finally:
        with admin_connect() as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def connected_role(database_url: str) -> dict[str, object]:
    """Whom `database_url` connects as (a superuser? BYPASSRLS?) and who owns its tables."""
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT current_user::text, rolsuper, rolbypassrls,"
            " (SELECT array_agg(DISTINCT tableowner::text) FROM pg_tables"
            "  WHERE schemaname = 'public')"
            " FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    assert row is not None
    return {"user": row[0], "super": row[1], "bypassrls": row[2], "table owners": row[3]}


def an_ordinary_role_owning_every_table() -> dict[str, object]:
    """What connected_role says of a ledger migrated as docs/deploy.md has it: the suite's role."""
    role = connection.settings_dict["USER"]
    return {"user": role, "super": False, "bypassrls": False, "table owners": [role]}
