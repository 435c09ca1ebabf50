"""Which teams' rows the current code may see: the scope, named to PostgreSQL per transaction.

Row-level security on every team-owned table (teams/sql/boundary.sql) shows a transaction only
the rows of the teams it names in `ledger.teams`; nothing named, nothing seen. This module holds
the current scope in a context variable and names it in each transaction (`ScopeSender`, an
execute wrapper on every database connection): `set_config(..., true)` goes in the same query
string as the transaction's first statement, so it costs no round trip and holds behind
PgBouncer's transaction pooling (a setting local to the transaction is never left on a server
connection another client gets next).

Who sets the scope (docs/teams.md):
- the worker API and the gateway: the token's team (runs.authentication, runs.hotpath);
- the dashboard: a signed-in person's teams (teams.middleware); an org admin (superuser): every
  team; anyone else: none;
- Celery tasks: the run's team, or every team for the sweeps listed below;
- management commands: `--team SLUG` where they act on one team's data, else every team.

Every team is seen only by the uses in EVERY_TEAM_USES, each with its reason; `every_team`
refuses any other.
"""

import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

# Who may see every team, and why. Nothing else may (every_team refuses an unlisted reason).
EVERY_TEAM_USES: dict[str, str] = {
    "reaper": "the lease reaper and the idle sweep recover every team's expired runs",
    "retention": "retention purges every team's old runs (and their journal months)",
    "checkpoints": "signed checkpoints cover every run's chain head, whatever its team",
    "traces": "the trace exporter sends every team's finished runs to the collector",
    "token lookup": "a worker token's team is not known before its row is read by its hash",
    "sign-in": "signing in reads a person's memberships, in whatever teams they hold them",
    "migrations": "migrations change every team's rows",
    "org admin": "an org admin (superuser) manages every team",
    "sweeps": "beat's sweeps (escalations, approval expiry, exports' expiry, webhook delivery, "
    "the overview's rollup, journal partitions) go over every team's rows, each row in its team",
    "audit": "an org-wide audit entry (a sign-in, a refusal, an account) is written whoever the "
    "actor is, a stranger to every team included",
    "metrics": "the metrics scrape (the operator's METRICS_TOKEN) counts every team's rows",
    "waiters": "the ?wait= listener re-reads a run its waiter's own call already showed them",
    "task dispatch": "a Celery task given a row's id (a run, an export job) reads which team it "
    "is in, then does its work under that team",
    "operator command": "a management command an operator runs over the whole ledger",
    "people": "the people page tells a person of no team (a new account, an org admin) from a "
    "person of other teams only, whom a team's admin does not see",
    "tests": "the test suite's default: tests that name no team see every team",
}


@dataclass(frozen=True)
class Scope:
    """`teams`: the team ids whose rows are visible, or None for every team. `home`: the team a
    new top-level row is filed in when its writer names none (a single-team scope's team)."""

    teams: tuple[int, ...] | None
    home: int | None = None
    reason: str = ""

    def setting_sql(self) -> str:
        """The statement naming this scope to the transaction (ids are integers we format)."""
        visible = "*" if self.teams is None else ",".join(str(int(t)) for t in self.teams)
        home = "" if self.home is None else str(int(self.home))
        return (
            f"SELECT set_config('ledger.teams', '{visible}', true), "
            f"set_config('ledger.team', '{home}', true)"
        )

    @property
    def every(self) -> bool:
        return self.teams is None

    def sees(self, team_id: int) -> bool:
        return self.teams is None or team_id in self.teams


NONE = Scope(teams=())
# libpq's startup option for a session that reads every team by hand (an operator's psql:
# `PGOPTIONS='-c ledger.teams=*' psql ...`, the tests' own side connections). The application
# never uses it: its scope is named per transaction (ScopeSender), which overrides this.
EVERY_TEAM_SESSION_OPTIONS = "-c ledger.teams=*"
_current: ContextVar[Scope | None] = ContextVar("teams_scope", default=None)
# what code that named no scope runs under: nothing in production; the test suite makes it every
# team, with new rows in `default` (tests/conftest.py), for itself and the threads it starts
_process_default = NONE


def current() -> Scope:
    scope = _current.get()
    return _process_default if scope is None else scope


def set_current(scope: Scope) -> None:
    """The current context runs under `scope` from here on, without a block to end it: for an
    authentication that learns the team mid-request (teams.middleware's block restores the
    request's scope when it ends)."""
    _current.set(scope)


def set_process_default(scope: Scope) -> None:
    """The scope of code that names none, in every thread of this process (the test suite's)."""
    global _process_default
    _process_default = scope


def tests_default() -> Scope:
    """Every team, new rows in `default` (its id is fixed in a test database: teams.models)."""
    from teams.models import DEFAULT_TEAM_ID

    return Scope(teams=None, home=DEFAULT_TEAM_ID, reason="tests")


def scope_for_teams(team_ids: Any, *, home: int | None = None) -> Scope:
    ids = tuple(sorted({int(t) for t in team_ids}))
    if home is None and len(ids) == 1:
        home = ids[0]
    if home is not None and home not in ids:
        raise ValueError(f"team {home} is not among the scope's teams {ids}")
    return Scope(teams=ids, home=home)


def every_team_scope(reason: str, *, home: int | None = None) -> Scope:
    if reason not in EVERY_TEAM_USES:
        raise ValueError(f"every_team({reason!r}): not a listed use (teams.scope.EVERY_TEAM_USES)")
    return Scope(teams=None, home=home, reason=reason)


@contextmanager
def using(scope: Scope) -> Iterator[Scope]:
    """Run the enclosed code under `scope`."""
    token = _current.set(scope)
    try:
        yield scope
    finally:
        _current.reset(token)


@contextmanager
def team_scope(team_ids: Any, *, home: int | None = None) -> Iterator[Scope]:
    """The rows of these teams only (one id, or several); new top-level rows go to `home`
    (by default the team, when there is one)."""
    ids = (team_ids,) if isinstance(team_ids, int) else team_ids
    with using(scope_for_teams(ids, home=home)) as scope:
        yield scope


@contextmanager
def every_team(reason: str, *, home: int | None = None) -> Iterator[Scope]:
    """Every team's rows, for one of the uses EVERY_TEAM_USES lists (`reason`)."""
    with using(every_team_scope(reason, home=home)) as scope:
        yield scope


def visible_team_ids() -> tuple[int, ...] | None:
    """The current scope's teams, or None for every team: for a query that names its teams as
    the policy does. PostgreSQL checks a policy's condition before any condition that is not
    leakproof (ILIKE is not), so such a condition cannot use an index and the policy alone makes
    it scan every team's rows; named in the query too, the team narrows the scan by an index."""
    return current().teams


def home_team_id() -> int | None:
    """The team a new top-level row of the current scope is filed in, or None."""
    return current().home


# statements that read no team's row, some of which cannot run in a transaction block, or must be
# its first statement (SET TRANSACTION), so never behind another: sent as they are
_READS_NO_ROW = re.compile(
    r"\s*(?:(?:CREATE|DROP|ALTER)\s+(?:DATABASE|TABLESPACE|SYSTEM|SUBSCRIPTION|ROLE|USER)\b"
    r"|(?:CREATE|DROP)\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\b"
    r"|SET\s+(?:TRANSACTION|SESSION\s+CHARACTERISTICS)\b"
    r"|(?:VACUUM|REINDEX|CLUSTER|BEGIN|START|COMMIT|ROLLBACK|END|SAVEPOINT|RELEASE|LISTEN"
    r"|UNLISTEN|CHECKPOINT|SHOW|RESET|DISCARD)\b)",
    re.IGNORECASE,
)


def command_scope(reason: str, *, home_default: bool = False) -> Any:
    """A management command's `handle` runs under every team for `reason` (new top-level rows in
    `default` with home_default: the demo's, and an operator's run started by hand)."""

    def wrap(handle: Any) -> Any:
        @functools.wraps(handle)
        def handled(self: Any, *args: Any, **options: Any) -> Any:
            home = None
            if home_default:
                from django.db import ProgrammingError

                from teams.models import DEFAULT_TEAM_SLUG, Team

                try:
                    home = (
                        Team.objects.filter(slug=DEFAULT_TEAM_SLUG)
                        .values_list("id", flat=True)
                        .first()
                    )
                except ProgrammingError:
                    # a database not migrated yet (the demo's story migrates first): the
                    # command names its home once it has one (demo_seed)
                    home = None
            with every_team(reason, home=home):
                return handle(self, *args, **options)

        return handled

    return wrap


def team_of(model: Any, pk: Any) -> int | None:
    """The team of row `pk` of `model` (None: no such row), read in every team: for a task that
    is handed an id and then works under the row's team (`task dispatch`)."""
    with every_team("task dispatch"):
        return model._base_manager.filter(pk=pk).values_list("team_id", flat=True).first()


@contextmanager
def team_of_row(model: Any, pk: Any) -> Iterator[Scope]:
    """The enclosed code runs under the team of row `pk` (none when there is no such row)."""
    team = team_of(model, pk)
    with using(NONE if team is None else scope_for_teams((team,))) as scope:
        yield scope


class ScopeSender:
    """A Django execute wrapper, first on every connection: names the current scope to each
    transaction before its first statement, and again when the scope changed since, or after a
    ROLLBACK TO SAVEPOINT (which undoes a setting made after the savepoint).

    A statement that starts a transaction (psycopg's transaction status IDLE: in autocommit,
    every statement) goes as `<set_config>; <statement>` in one query string, and the cursor is
    moved on to the statement's own result. A server-side cursor's DECLARE and executemany cannot
    carry a second statement: the setting goes first in a statement of its own (in autocommit,
    executemany runs in a transaction of its own; a WITH HOLD cursor, whose query runs at its
    commit, gets the setting for the session, cleared after)."""

    def __init__(self) -> None:
        self.sent: str | None = None  # the setting sent in the open transaction

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        wrapper = context["cursor"]
        raw = wrapper.db.connection
        status = raw.info.transaction_status
        if status == TransactionStatus.IDLE:
            self.sent = None
        elif status != TransactionStatus.INTRANS:
            return execute(sql, params, many, context)
        if isinstance(sql, str) and _READS_NO_ROW.match(sql):
            if sql.lstrip()[:11].upper() == "ROLLBACK TO":
                self.sent = None
            return execute(sql, params, many, context)
        setting = current().setting_sql()
        if self.sent == setting:
            return execute(sql, params, many, context)
        cursor = wrapper.cursor
        if many or isinstance(cursor, psycopg.ServerCursor) or not isinstance(sql, str):
            return self._separately(raw, setting, execute, sql, params, many, context)
        result = execute(f"{setting}; {sql}", params, many, context)
        cursor.nextset()
        self.sent = setting if raw.info.transaction_status == TransactionStatus.INTRANS else None
        return result

    def _separately(
        self, raw: Any, setting: str, execute: Any, sql: Any, params: Any, many: bool, context: Any
    ) -> Any:
        if raw.autocommit and raw.info.transaction_status == TransactionStatus.IDLE and many:
            # its statements in one transaction of their own, which the setting opens
            with raw.transaction(), raw.cursor() as plain:
                plain.execute(setting)
                return execute(sql, params, many, context)
        if raw.autocommit and raw.info.transaction_status == TransactionStatus.IDLE:
            # a WITH HOLD cursor's query runs at its commit: the setting for the session, cleared
            # after (never behind a transaction pooler, which needs no server-side cursors)
            with raw.cursor() as plain:
                plain.execute(setting.replace(", true)", ", false)"))
            try:
                return execute(sql, params, many, context)
            finally:
                with raw.cursor() as plain:
                    plain.execute(NONE.setting_sql().replace(", true)", ", false)"))
        with raw.cursor() as plain:
            plain.execute(setting)
        self.sent = setting
        return execute(sql, params, many, context)


def install(sender: Any = None, connection: Any = None, **kwargs: Any) -> None:
    """connection_created: put a fresh ScopeSender first among the connection's wrappers."""
    if connection is None or connection.vendor != "postgresql":
        return
    connection.execute_wrappers[:] = [
        w for w in connection.execute_wrappers if not isinstance(w, ScopeSender)
    ]
    connection.execute_wrappers.insert(0, ScopeSender())
