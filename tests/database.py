"""The test database: migrated once into a template, then cloned for each pytest process.

Migrating takes 10 s or more here (partitioned tables, the kernel's SQL functions), and every
xdist worker needs a database of its own. The first process to need one migrates
`<TEST_DATABASE_NAME>_template` and labels it (COMMENT ON DATABASE) with a fingerprint of what
builds the schema: every migration file, the SQL files and project modules the migrations read,
Django's version. Each process then clones the template (CREATE DATABASE ... TEMPLATE: a fraction
of a second). A later session reuses the template only while the fingerprint matches, so a
changed or added migration rebuilds it: never a stale schema. `pytest --create-db` rebuilds it
regardless. The template stays on the server between sessions; the clones are dropped at the end.
"""

import ast
import hashlib
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import django
from django.apps import apps
from django.conf import settings
from django.db import OperationalError, connection, connections, transaction
from django.db.backends.postgresql.operations import DatabaseOperations
from psycopg.conninfo import make_conninfo

from tests.processes import ROOT

# the session's name before pytest-django gives each xdist worker its suffix
BASE_TEST_NAME = settings.DATABASES["default"]["TEST"]["NAME"]
TEMPLATE_NAME = f"{BASE_TEST_NAME}_template"


def _schema_sources() -> list[Path]:
    """Every file that decides what `migrate` builds: the project's migrations, the SQL files
    next to them, and the project modules a migration imports (seeding functions, roles)."""
    files: set[Path] = set()
    for app in apps.get_app_configs():
        folder = Path(app.path)
        if ROOT not in folder.parents:
            continue
        migrations = sorted((folder / "migrations").glob("*.py"))
        files.update(migrations)
        files.update(p for p in (folder / "sql").rglob("*") if p.is_file())
        for migration in migrations:
            for node in ast.walk(ast.parse(migration.read_text())):
                names = (
                    [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else []
                )
                for name in names:
                    module = ROOT / (name.replace(".", "/") + ".py")
                    if module.is_file():
                        files.add(module)
    return sorted(files)


def schema_fingerprint() -> str:
    digest = hashlib.sha256(f"django {django.__version__}\n".encode())
    for path in _schema_sources():
        digest.update(f"{path.relative_to(ROOT)}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _template_label(cursor: Any) -> str | None:
    cursor.execute(
        "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
        [TEMPLATE_NAME],
    )
    row = cursor.fetchone()
    return None if row is None else (row[0] or "")


def _build_template(fingerprint: str) -> None:
    """Migrates a fresh template database (Django's own test database creation) and labels it."""
    test_settings = connection.settings_dict["TEST"]
    original_test_name, original_name = test_settings["NAME"], connection.settings_dict["NAME"]
    test_settings["NAME"] = TEMPLATE_NAME
    try:
        connection.creation.create_test_db(verbosity=0, autoclobber=True)
    finally:
        connection.close()
        test_settings["NAME"] = original_test_name
        connection.settings_dict["NAME"] = original_name
        settings.DATABASES[connection.alias]["NAME"] = original_name
    with connection._nodb_cursor() as cursor:
        cursor.execute(f'COMMENT ON DATABASE "{TEMPLATE_NAME}" IS %s', [fingerprint])


def create_test_database(*, rebuild: bool = False) -> str:
    """Creates this process's test database from the template (built first if missing, stale, or
    `rebuild`), points the default connection at it, and returns its name."""
    fingerprint = schema_fingerprint()
    name = connection.settings_dict["TEST"]["NAME"]  # with its xdist suffix
    assert name != TEMPLATE_NAME
    connection.close()
    with connection._nodb_cursor() as cursor:
        # one process at a time checks, builds and copies the template (xdist workers start
        # together); the lock is this session's and ends with it
        cursor.execute("SELECT pg_advisory_lock(hashtext(%s))", [TEMPLATE_NAME])
        try:
            if rebuild or _template_label(cursor) != fingerprint:
                _build_template(fingerprint)
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            cursor.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_NAME}"')
        finally:
            cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [TEMPLATE_NAME])
        # clones earlier sessions retired whose drop did not finish (or is under way)
        cursor.execute(
            "SELECT datname FROM pg_database WHERE starts_with(datname, %s)", [f"{name}{RETIRED}"]
        )
        for (retired,) in cursor.fetchall():
            cursor.execute(f'DROP DATABASE IF EXISTS "{retired}" WITH (FORCE)')
    settings.DATABASES[connection.alias]["NAME"] = name
    connection.settings_dict["NAME"] = name
    for other in connections.all():  # a replica in the settings reads the same database
        if other.settings_dict["TEST"].get("MIRROR") == connection.alias:
            other.creation.set_as_test_mirror(connection.settings_dict)
    connection.ensure_connection()
    return name


# run by a detached interpreter: the server's address (a libpq conninfo) and the clone's name
_DROP_DATABASE = """
import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as admin:
    admin.execute('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % sys.argv[2])
"""
RETIRED = "_retired_"  # a clone being dropped: <name>_retired_<hex>


def destroy_test_database(original_name: str) -> None:
    """Drops this process's clone, even while a connection is still open on it (a live server's
    thread, or the last request of a server a browser test stopped, may hold one at the end).

    PostgreSQL 15 ends every DROP DATABASE with a checkpoint, which writes out every dirty buffer
    of the server (this session's and everyone else's): 1 s on an idle server, 7 to 11 s at the end
    of a full run. So the clone is renamed (at once) and a detached process drops it under its new
    name, which no later session uses; the session does not wait for the checkpoint. A clone whose
    connections will not end is dropped here, as before."""
    name = connection.settings_dict["NAME"]
    connection.close()
    retired = f"{name}{RETIRED}{uuid.uuid4().hex[:8]}"
    with connection._nodb_cursor() as cursor:
        for _ in range(20):
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                [name],
            )
            try:
                cursor.execute(f'ALTER DATABASE "{name}" RENAME TO "{retired}"')
                break
            except OperationalError:  # a terminated backend has not gone yet
                time.sleep(0.05)
        else:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            retired = ""
    if retired:
        params = connection.get_connection_params()
        conninfo = make_conninfo(
            **{k: v for k, v in params.items() if k in ("host", "port", "user", "password")},
            dbname="postgres",
        )
        subprocess.Popen(
            [sys.executable, "-c", _DROP_DATABASE, conninfo, retired],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    settings.DATABASES[connection.alias]["NAME"] = original_name
    connection.settings_dict["NAME"] = original_name


DJANGO_SQL_FLUSH = DatabaseOperations.sql_flush
# what migrate builds from the models and no test changes: kept by the flush below, so that
# post_migrate, which Django sends after each flush, finds them and has nothing to recreate
KEPT_BY_FLUSH = frozenset({"django_content_type", "auth_permission", "django_migrations"})


def quick_sql_flush(
    ops: Any, style: Any, tables: list[str], *, reset_sequences: bool = False, **kwargs: Any
) -> list[str]:
    """PostgreSQL's `sql_flush` for the suite: a `transactional_db` test ends with a flush of every
    table, which Django does with one TRUNCATE of them all, about 1.5 s here (PostgreSQL swaps
    every table's and index's files); DELETE empties these small tables in a few milliseconds.
    The append-only tables (a trigger refuses DELETE) are truncated, and only when not empty."""
    if reset_sequences or kwargs.get("allow_cascade"):  # not what TransactionTestCase asks
        return DJANGO_SQL_FLUSH(ops, style, tables, reset_sequences=reset_sequences, **kwargs)
    quoted = {table: ops.quote_name(table) for table in tables if table not in KEPT_BY_FLUSH}
    sql = ["SET CONSTRAINTS ALL DEFERRED;"]
    with ops.connection.cursor() as cursor:
        cursor.execute(  # tgtype bit 3: a DELETE trigger
            "SELECT DISTINCT c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid"
            " WHERE NOT t.tgisinternal AND t.tgtype & 8 = 8 AND c.relname = ANY(%s)",
            [list(quoted)],
        )
        append_only = {row[0] for row in cursor.fetchall()}
        for table in sorted(append_only):
            cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {quoted[table]})")  # noqa: S608
            if cursor.fetchone()[0]:
                sql.append(f"TRUNCATE {quoted[table]};")
    sql += [f"DELETE FROM {quoted[t]};" for t in quoted if t not in append_only]  # noqa: S608
    return sql


@contextmanager
def shared_rows[T](django_db_blocker: Any, build: Callable[[], T]) -> Iterator[T]:
    """Rows that the tests of a wider scope (a class) only read, built once: in a transaction
    that each test's own (pytest-django's `db`) nests in as a savepoint, rolled back after the
    last of them (the default connection's). Not for `transactional_db` tests (their flush would take the rows)."""
    with django_db_blocker.unblock():
        atomic = transaction.atomic()
        atomic.__enter__()
        try:
            built = build()
            # the foreign keys' deferred checks now, as a commit would, and once: each test's
            # teardown checks constraints, which would otherwise run these again every time
            connection.check_constraints()
        except BaseException:
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)
            raise
    try:
        yield built
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            atomic.__exit__(None, None, None)
