"""Fresh, empty PostgreSQL databases on the test server, for a ledger that starts from nothing."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.db import connection


def _server() -> dict[str, str]:
    settings = connection.settings_dict
    return {
        "host": settings["HOST"] or "127.0.0.1",
        "port": str(settings["PORT"] or 5432),
        "user": settings["USER"] or "root",
    }


@contextmanager
def fresh_database(label: str) -> Iterator[str]:
    """An empty database of its own (no tables, no migrations) for the block; yields its URL.
    Named after this session's test database, so two sessions on one server never share one."""
    server = _server()
    name = f"{connection.settings_dict['NAME']}_{label}_{uuid.uuid4().hex[:6]}"
    admin = f"host={server['host']} port={server['port']} user={server['user']} dbname=postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgres://{server['user']}@{server['host']}:{server['port']}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
