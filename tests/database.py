"""The test database: migrated once into a template, then cloned for each pytest process.

Migrating takes 10 s or more here (partitioned tables, the kernel's SQL functions), and every
xdist worker needs a database of its own. The first process to need one migrates
`<TEST_DATABASE_NAME>_template` and labels it (COMMENT ON DATABASE) with a fingerprint of what
builds the schema: every migration file, the SQL files and project modules the migrations read,
Django's version. Each process then clones the template (CREATE DATABASE ... TEMPLATE: a fraction
of a second). A later session reuses the template only while the fingerprint matches, so a
changed or added migration rebuilds it: never a stale schema. `pytest --create-db` rebuilds it
regardless. The template stays on the server between sessions; the clones are dropped at the end.

The suite connects as an ordinary role, as the ledger does on a managed database:
`TEST_DATABASE_ROLE` (default `ledger_app`: LOGIN and CREATEDB, never SUPERUSER or BYPASSRLS). Its
migrations run as that role, so it owns the tables, and row-level security forced on a table binds
it. The harness makes the role when it is missing, and drops databases and ends connections that
are not the role's, on a connection of its own: `TEST_ADMIN_DATABASE_URL`, a superuser (default:
`DATABASE_URL` as given, `root` here). The session, and every server and worker it starts, take
the role's URL (`application_role_settings`, from tests/conftest.py before any connection opens).
"""

import ast
import hashlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import django
import psycopg
from django.apps import apps
from django.conf import settings
from django.db import connection, connections, transaction
from django.db.backends.postgresql.operations import DatabaseOperations
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo

from tests.processes import ROOT

# the session's name before pytest-django gives each xdist worker its suffix
BASE_TEST_NAME = settings.DATABASES["default"]["TEST"]["NAME"]
TEMPLATE_NAME = f"{BASE_TEST_NAME}_template"

# the role every connection of the suite (and of what it starts) uses: neither a superuser nor
# BYPASSRLS; CREATEDB so that it makes (and owns) the template and the clones
APP_ROLE = os.environ.get("TEST_DATABASE_ROLE", "ledger_app")
APP_PASSWORD = os.environ.get("TEST_DATABASE_ROLE_PASSWORD", "")


def _with_user(url: str, user: str, password: str) -> str:
    """`url` (postgres://...) with its user and password replaced."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    login = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "")
    return urlunsplit(parts._replace(netloc=f"{login}@{host}"))


def admin_url() -> str:
    """The superuser's URL the harness uses for what the application role may not do."""
    return os.environ["TEST_ADMIN_DATABASE_URL"]


def admin_connect(dbname: str = "postgres") -> psycopg.Connection[Any]:
    """An autocommit connection as the admin (TEST_ADMIN_DATABASE_URL) to `dbname`."""
    return psycopg.connect(make_conninfo(admin_url(), dbname=dbname), autocommit=True)


def application_role_settings() -> None:
    """Points this process's connections, and the DATABASE_URL the processes it starts inherit, at
    the application role; the URL given becomes the admin's (TEST_ADMIN_DATABASE_URL) unless that
    is set. Idempotent: an xdist worker inherits both variables from the session that started it."""
    given = os.environ.get("DATABASE_URL") or settings.DATABASE_URL
    os.environ.setdefault("TEST_ADMIN_DATABASE_URL", given)
    os.environ["DATABASE_URL"] = _with_user(given, APP_ROLE, APP_PASSWORD)
    if os.environ.get("DATABASE_REPLICA_URL"):
        os.environ["DATABASE_REPLICA_URL"] = _with_user(
            os.environ["DATABASE_REPLICA_URL"], APP_ROLE, APP_PASSWORD
        )
    for alias in settings.DATABASES:
        for values in (settings.DATABASES[alias], connections[alias].settings_dict):
            values["USER"], values["PASSWORD"] = APP_ROLE, APP_PASSWORD


def application_role_ensure() -> None:
    """Creates the application role when it is missing (as the admin), and refuses to go on when
    the role is a superuser or bypasses row-level security. Safe when several pytest processes
    start at once: a role another one created meanwhile is taken as it is."""
    with admin_connect() as admin:
        found = admin.execute(
            "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", [APP_ROLE]
        ).fetchone()
        if found is None:
            password = sql.SQL(" PASSWORD {}").format(sql.Literal(APP_PASSWORD))
            # another session's process may create it at the same moment
            with suppress(errors.DuplicateObject, errors.UniqueViolation):
                admin.execute(
                    sql.SQL(
                        "CREATE ROLE {} LOGIN CREATEDB NOSUPERUSER NOBYPASSRLS NOCREATEROLE{}"
                    ).format(sql.Identifier(APP_ROLE), password if APP_PASSWORD else sql.SQL(""))
                )
            found = (False, False)
    if any(found):
        raise RuntimeError(
            f"TEST_DATABASE_ROLE {APP_ROLE!r} is a superuser or has BYPASSRLS: the suite runs as "
            "an ordinary role (ALTER ROLE ... NOSUPERUSER NOBYPASSRLS, or name another)"
        )


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


def _template_label(admin: psycopg.Connection[Any]) -> str | None:
    """The template's label; None when there is none, or when the application role does not own
    it (one an earlier session built as another role: the role could not copy it)."""
    row = admin.execute(
        "SELECT shobj_description(oid, 'pg_database'), pg_get_userbyid(datdba) FROM pg_database"
        " WHERE datname = %s",
        [TEMPLATE_NAME],
    ).fetchone()
    return None if row is None or row[1] != APP_ROLE else (row[0] or "")


def _drop(admin: psycopg.Connection[Any], name: str) -> None:
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _build_template(admin: psycopg.Connection[Any], fingerprint: str) -> None:
    """Migrates a fresh template database (Django's own test database creation, as the
    application role, which then owns the database and every table) and labels it."""
    _drop(admin, TEMPLATE_NAME)  # whoever made it
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
    admin.execute(
        sql.SQL("COMMENT ON DATABASE {} IS {}").format(
            sql.Identifier(TEMPLATE_NAME), sql.Literal(fingerprint)
        )
    )


def create_test_database(*, rebuild: bool = False) -> str:
    """Creates this process's test database from the template (built first if missing, stale, or
    `rebuild`), points the default connection at it, and returns its name. The application role
    creates both (and so owns them); the admin drops what an earlier session left."""
    application_role_ensure()
    fingerprint = schema_fingerprint()
    name = connection.settings_dict["TEST"]["NAME"]  # with its xdist suffix
    assert name != TEMPLATE_NAME
    connection.close()
    with admin_connect() as admin:
        # one process at a time checks, builds and copies the template (xdist workers start
        # together); the lock is this session's and ends with it
        admin.execute("SELECT pg_advisory_lock(hashtext(%s))", [TEMPLATE_NAME])
        try:
            if rebuild or _template_label(admin) != fingerprint:
                _build_template(admin, fingerprint)
            _drop(admin, name)
            with connection._nodb_cursor() as cursor:
                cursor.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE_NAME}"')
        finally:
            admin.execute("SELECT pg_advisory_unlock(hashtext(%s))", [TEMPLATE_NAME])
        # clones earlier sessions retired whose drop did not finish (or is under way)
        retired = admin.execute(
            "SELECT datname FROM pg_database WHERE starts_with(datname, %s)", [f"{name}{RETIRED}"]
        ).fetchall()
        for (old,) in retired:
            _drop(admin, old)
    settings.DATABASES[connection.alias]["NAME"] = name
    connection.settings_dict["NAME"] = name
    for other in connections.all():  # a replica in the settings reads the same database
        if other.settings_dict["TEST"].get("MIRROR") == connection.alias:
            other.creation.set_as_test_mirror(connection.settings_dict)
    connection.ensure_connection()
    return name


# run by a detached interpreter: the admin's address (a libpq conninfo) and the clone's name
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
    connections will not end is dropped here, as before. All of it as the admin, which may end
    any connection."""
    name = connection.settings_dict["NAME"]
    connection.close()
    retired = f"{name}{RETIRED}{uuid.uuid4().hex[:8]}"
    with admin_connect() as admin:
        for _ in range(20):
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                [name],
            )
            try:
                admin.execute(
                    sql.SQL("ALTER DATABASE {} RENAME TO {}").format(
                        sql.Identifier(name), sql.Identifier(retired)
                    )
                )
                break
            except errors.ObjectInUse:  # a terminated backend has not gone yet
                time.sleep(0.05)
        else:
            _drop(admin, name)
            retired = ""
    if retired:
        conninfo = make_conninfo(admin_url(), dbname="postgres")
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


@contextmanager
def guards_off(cursor: Any, *tables: str) -> Iterator[None]:
    """What someone editing rows by hand does: `tables`' own triggers (append-only, the state
    guards) off for the block. The suite's role owns the tables, and an owner may switch its
    tables' triggers off (ALTER TABLE ... DISABLE TRIGGER USER; a partitioned table's partitions
    with it), as a superuser would with session_replication_role, which the role may not set.
    Inside the test's transaction the switch is that transaction's; back on at the block's end."""
    for table in tables:
        cursor.execute(f"ALTER TABLE {connection.ops.quote_name(table)} DISABLE TRIGGER USER")
    try:
        yield
    finally:
        for table in tables:
            cursor.execute(f"ALTER TABLE {connection.ops.quote_name(table)} ENABLE TRIGGER USER")
