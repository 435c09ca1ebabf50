"""The suite runs as a managed database would have the ledger run: as an ordinary PostgreSQL role,
neither a superuser nor BYPASSRLS, which owns the tables its migrations made (so row-level
security forced on a table binds it). The session's own connection, and the servers and workers
it starts (they take the environment `server_env` gives every one of them), connect as that role
(tests/database.py)."""

import json
import subprocess
import sys
from typing import Any

import pytest
from django.db import connection

from tests.database import APP_ROLE
from tests.processes import ROOT, server_env

# what a process of the ledger sees of the role it connected as
WHO_AM_I = """
SELECT current_user, session_user, r.rolsuper, r.rolbypassrls, r.rolcreaterole,
       (SELECT array_agg(DISTINCT tableowner::text) FROM pg_tables WHERE schemaname = 'public')
FROM pg_roles r WHERE r.rolname = current_user
"""
ORDINARY = {"super": False, "bypassrls": False, "createrole": False}


def who_am_i(cursor: Any) -> dict[str, Any]:
    cursor.execute(WHO_AM_I)
    user, session_user, is_super, bypassrls, createrole, owners = cursor.fetchone()
    return {
        "user": user,
        "session_user": session_user,
        "super": is_super,
        "bypassrls": bypassrls,
        "createrole": createrole,
        "table owners": owners,
    }


def test_the_sessions_connection_is_an_ordinary_role_that_owns_every_table(db: Any) -> None:
    with connection.cursor() as cursor:
        seen = who_am_i(cursor)
    assert seen == {
        "user": APP_ROLE,
        "session_user": APP_ROLE,
        **ORDINARY,
        "table owners": [APP_ROLE],
    }


SHOW = (
    "import json; from django.db import connection; from tests.test_database_role import who_am_i;"
    " print(json.dumps(who_am_i(connection.cursor())))"
)


@pytest.mark.slow
@pytest.mark.pg_connections(1)
def test_a_process_the_suite_starts_connects_as_that_role_too(db: Any) -> None:
    shown = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SHOW],
        cwd=ROOT,
        env=server_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(shown.stdout.strip().splitlines()[-1]) == {
        "user": APP_ROLE,
        "session_user": APP_ROLE,
        **ORDINARY,
        "table owners": [APP_ROLE],
    }
