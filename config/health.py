"""Health of this process, for load balancers and orchestrators (`GET /healthz`, `GET /readyz`).

Liveness needs nothing but the process: it touches no database and no broker, so an orchestrator
does not restart a healthy web process because PostgreSQL is away. Readiness names what is
missing of what the process needs to serve: `database` (PostgreSQL does not answer), `migrations`
(the database answers but lacks a migration this code has), `broker` (the Celery broker does not
answer). Nothing else is said: no host names, no versions, no settings.

`python -m config.health` prints the same answer and exits 0 when ready, 1 when not (a container
healthcheck for the worker and beat); `--wait SECONDS --need database` waits until the named
parts answer (the image's `migrate` waits for PostgreSQL so).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

DATABASE, MIGRATIONS, BROKER = "database", "migrations", "broker"
# how long a readiness check waits for the broker to accept a connection; the database's
# connection time is DATABASE_URL's (`?connect_timeout=N`)
BROKER_CONNECT_TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True)
class Readiness:
    missing: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return not self.missing

    def as_json(self) -> dict[str, object]:
        return {"ready": self.ready, "missing": self.missing}


def database_answers() -> bool:
    from django.db import DatabaseError, connections

    connection = connections["default"]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as error:
        logger.warning("readiness: the database does not answer: %s", error)
        connection.close_if_unusable_or_obsolete()
        return False
    return True


def migrations_applied() -> bool:
    """Every migration of this code is recorded as applied (the database must answer)."""
    from django.db import connections
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections["default"])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if plan:
        logger.warning("readiness: %d migration(s) not applied", len(plan))
    return not plan


def broker_answers() -> bool:
    from config.celery import app

    try:
        with app.connection_for_write(connect_timeout=BROKER_CONNECT_TIMEOUT_SECONDS) as conn:
            conn.ensure_connection(max_retries=0)  # one attempt: a probe is asked again anyway
    except Exception as error:  # kombu raises its transports' own errors
        logger.warning("readiness: the broker does not answer: %s", error)
        return False
    return True


def readiness(need: tuple[str, ...] = (DATABASE, MIGRATIONS, BROKER)) -> Readiness:
    """What of `need` is missing now; migrations are only asked about when the database answers."""
    missing: list[str] = []
    if DATABASE in need or MIGRATIONS in need:
        if not database_answers():
            missing.append(DATABASE)
        elif MIGRATIONS in need and not migrations_applied():
            missing.append(MIGRATIONS)
    if BROKER in need and not broker_answers():
        missing.append(BROKER)
    return Readiness(missing)


def readiness_wait(seconds: float, need: tuple[str, ...]) -> Readiness:
    """Ask until nothing of `need` is missing or `seconds` have passed; the last answer."""
    deadline = time.monotonic() + seconds
    while True:
        state = readiness(need)
        if state.ready or time.monotonic() >= deadline:
            return state
        time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import os

    import django

    parser = argparse.ArgumentParser(
        prog="python -m config.health", description="Is this ledger ready? Exit 0 if so."
    )
    parser.add_argument("--wait", type=float, default=0, help="ask again for up to SECONDS")
    parser.add_argument(
        "--need",
        action="append",
        choices=[DATABASE, MIGRATIONS, BROKER],
        help="check only these (repeatable; default: all three)",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    need = tuple(args.need or (DATABASE, MIGRATIONS, BROKER))
    state = readiness_wait(args.wait, need)
    print(json.dumps(state.as_json()))
    return 0 if state.ready else 1


if __name__ == "__main__":
    raise SystemExit(main())
