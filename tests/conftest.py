"""Fixtures shared by every test: worker tokens, an authenticated API client, budget policies."""

import os
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.conf import settings
from django.core.signals import setting_changed
from django.db import connection
from django.db.models.signals import post_migrate
from rest_framework.test import APIClient

from dashboard.roles import groups_ensure_now
from runs.default_policy import seed_default_policy
from runs.models import BudgetPolicy
from runs.tokens import worker_token_create
from teams import scope
from teams.models import default_team
from tests import connection_budget
from tests.database import (
    application_role_settings,
    create_test_database,
    destroy_test_database,
    quick_sql_flush,
)
from tests.processes import (  # noqa: F401  (names other test modules import from here)
    ROOT,
    free_port,
    stop_process,
    test_database_url,
    wait_for_http,
    web_server,
)

# the session, and every server and worker it starts, connect as an ordinary role (neither a
# superuser nor BYPASSRLS), which owns the tables its migrations make (tests/database.py)
application_role_settings()


@pytest.fixture
def worker_token(db: Any) -> str:
    _, raw = worker_token_create(name="test-worker")
    return raw


@pytest.fixture
def api(worker_token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {worker_token}")
    client.default_format = "json"
    return client


@pytest.fixture
def make_policy(db: Any) -> Callable[..., BudgetPolicy]:
    def make(agent: str, **limits: Any) -> BudgetPolicy:
        values = {
            "max_steps": 20,
            "max_tokens": 100_000,
            "max_wall_seconds": 3600,
            "max_cost_usd": None,
            "max_recoveries": 3,
            **limits,
        }
        return BudgetPolicy.objects.create(name=f"{agent}-policy", agent=agent, **values)

    return make


@pytest.fixture(scope="session")
def ledger_server(django_db_setup: Any, django_db_blocker: Any) -> Iterator[str]:
    """The product's web server (`python -m config.serve`) on the test database, for the whole
    session.

    Tests that talk to it must use `transactional_db` so what they write is committed.
    """
    with web_server() as url:
        yield url


class FakeClock:
    """The journal's clock, moved by hand (deadlines, lease expiry) in in-process tests."""

    def __init__(self) -> None:
        from django.utils import timezone

        self.now = timezone.now()

    def advance(self, **delta: float) -> None:
        from datetime import timedelta

        self.now += timedelta(**delta)


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr("runs.clock.now", lambda: fake.now)
    return fake


# one Chromium for the whole session: Playwright's sync API allows one per thread
# the agents' real stack (fixed ports): registered once here, shared by every suite that uses it
from tests.review.browser import browser, page_pool  # noqa: E402, F401  (browser: a fixture)
from tests.support_agent.fixtures import agent_ledger_url, desk, smtp_sink  # noqa: E402, F401


@pytest.fixture(scope="session")
def django_db_setup(
    request: pytest.FixtureRequest,
    django_test_environment: None,
    django_db_modify_db_settings: None,
    django_db_blocker: Any,
) -> Iterator[None]:
    """This process's test database, a copy of a migrated template (tests/database.py) in place
    of pytest-django's migrating one per xdist worker; with TEST_THROUGH_PGBOUNCER=1 every
    connection of the session (and of the servers and workers it starts, which take
    test_database_url()) then goes through a PgBouncer in transaction pooling mode. scripts/test
    runs the API, recovery and dashboard groups that way, with DATABASE_POOLER=pgbouncer as a
    deployment behind it sets."""
    original_name = connection.settings_dict["NAME"]
    with django_db_blocker.unblock():
        create_test_database(rebuild=request.config.getoption("create_db"))
    try:
        yield from _through_pgbouncer_if_asked(django_db_blocker)
    finally:
        with django_db_blocker.unblock():
            destroy_test_database(original_name)


@pytest.fixture(scope="session", autouse=True)
def quick_flush() -> Iterator[None]:
    """The flush that ends each `transactional_db` test, by DELETE (tests/database.py)."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", quick_sql_flush)
        yield


@pytest.fixture(scope="session", autouse=True)
def static_files_indexed_once() -> Iterator[None]:
    """Django's test Client loads the middleware anew for every Client, and WhiteNoise's then
    reads and indexes every static file (admin, htmx, the API docs': 0.1 s or more); the session
    indexes them once and every later WhiteNoise takes the same index, as one process's would."""
    from whitenoise.middleware import WhiteNoiseMiddleware

    index_files = WhiteNoiseMiddleware.add_files_from_finders
    indexed: dict[tuple[Any, ...], dict[str, Any]] = {}

    def add_files_once(self: Any) -> None:
        key = (self.static_prefix, self.max_age, self.allow_all_origins, self.charset)
        if key not in indexed:
            before = set(self.files)
            index_files(self)
            indexed[key] = {url: self.files[url] for url in set(self.files) - before}
        self.files.update(indexed[key])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(WhiteNoiseMiddleware, "add_files_from_finders", add_files_once)
        yield


@pytest.fixture(scope="session", autouse=True)
def httpx_default_tls_context_built_once() -> Iterator[None]:
    """Every httpx client builds an SSL context and loads the CA bundle into it (about 40 ms of
    CPU), though the suite's clients speak plain http to its own servers, and the tests build
    hundreds of them; in this process the default context (verify=True) is built once and shared,
    as one SSLContext may be by any number of clients."""
    import httpx._transports.default as transports

    build = transports.create_ssl_context
    shared: dict[bool, Any] = {}

    def built_once(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if verify is not True or cert is not None:
            return build(verify=verify, cert=cert, trust_env=trust_env)
        if trust_env not in shared:
            shared[trust_env] = build(verify=True, trust_env=trust_env)
        return shared[trust_env]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(transports, "create_ssl_context", built_once)
        yield


def _through_pgbouncer_if_asked(django_db_blocker: Any) -> Iterator[None]:
    if os.environ.get("TEST_THROUGH_PGBOUNCER") != "1":
        yield
        return
    from django.db import connections

    from tests.scale.helpers import pgbouncer

    assert settings.DATABASE_POOLER == "pgbouncer", "TEST_THROUGH_PGBOUNCER needs DATABASE_POOLER"
    upstream = int(connection.settings_dict["PORT"] or 5432)
    # the ?wait= listener keeps its direct connection (LISTEN needs a session), here and in the
    # servers the tests start (they inherit the environment)
    listen_url, settings.DATABASE_LISTEN_URL = settings.DATABASE_LISTEN_URL, test_database_url()
    os.environ["DATABASE_LISTEN_URL"] = settings.DATABASE_LISTEN_URL
    with pgbouncer(pool_size=8, upstream_port=upstream) as port, django_db_blocker.unblock():
        originals = {}
        for conn in connections.all():
            conn.close()
            originals[conn.alias] = (conn.settings_dict["HOST"], conn.settings_dict["PORT"])
            conn.settings_dict.update(HOST="127.0.0.1", PORT=port)
        try:
            yield
        finally:
            for conn in connections.all():
                conn.close()
                host, original_port = originals[conn.alias]
                conn.settings_dict.update(HOST=host, PORT=original_port)
            settings.DATABASE_LISTEN_URL = listen_url
            os.environ.pop("DATABASE_LISTEN_URL", None)


def chain_problems(run_id: Any) -> list[str]:
    """What `verify_journal --run ID` reports for the run (chain and every step field); [] if sound."""
    import io

    from django.core.management import call_command

    out = io.StringIO()
    with suppress(SystemExit):
        call_command("verify_journal", run_id=str(run_id), stdout=out)
    return [line for line in out.getvalue().splitlines() if line.startswith("BROKEN")]


# fixtures that start real processes or servers: a test using one is marked `slow`
PROCESS_FIXTURES = frozenset(
    {
        "ledger_server",
        "agent_ledger_url",
        "desk",
        "smtp_sink",
        "tools_server",
        "killable_server",
        "smtp_server",
        "mail_stack",
        "start_worker",
        "export_worker",
        "live_server",
        "review_server",
        "celery_worker",
        "private_redis",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks what the fast loop leaves out, and puts the tests that use Chromium last.

    A test using a process fixture is `slow`, one using the browser `browser` (so
    `-m "not slow and not browser"` needs no marker kept by hand in every module).

    Playwright's sync API keeps an asyncio loop marked running in the main thread from the first
    browser test on, and Django cannot call an async view (the run detail's `?wait=`) through the
    test client from a thread whose loop is running: every other test goes first.
    """
    if "bench" not in (config.option.markexpr or ""):
        # the bench's smoke test runs only when a -m expression names it (scripts/test runs it
        # last, alone: it starts a stack of its own on a database of its own)
        benches = [item for item in items if item.get_closest_marker("bench")]
        if benches:
            config.hook.pytest_deselected(items=benches)
            items[:] = [item for item in items if not item.get_closest_marker("bench")]
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & PROCESS_FIXTURES:
            item.add_marker(pytest.mark.slow)
        if "browser" in names:
            item.add_marker(pytest.mark.browser)
    items.sort(key=lambda item: "browser" in getattr(item, "fixturenames", ()))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A test that starts processes first reserves the PostgreSQL connections they will hold
    (tests/connection_budget.py), and waits while the run's other tests hold too many."""
    needed = connection_budget.connections_needed(item)
    audit = os.environ.get("TEST_PG_AUDIT") == "1"
    if not needed and not audit:
        yield
        return
    servers = connection_budget.lingering_servers(item, PROCESS_FIXTURES)
    waited = connection_budget.reserve(needed, item.nodeid, servers) if needed else 0.0
    try:
        if audit:
            with connection_budget.Audit() as sampled:
                yield
            connection_budget.audit_record(item.nodeid, needed, sampled.most, waited)
        else:
            yield
            if waited >= 0.5:
                connection_budget.audit_record(item.nodeid, needed, -1, waited)
    finally:
        if needed:
            connection_budget.release(item.nodeid)


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        connection_budget.start_run()


def pytest_unconfigure(config: pytest.Config) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        connection_budget.end_run()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """How long tests waited for PostgreSQL connections; with TEST_PG_AUDIT=1, also the tests
    that held more than they reserved."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        for line in connection_budget.audit_report():
            terminalreporter.write_line(line)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A browser test's pages are closed or blanked when it ends, before its teardown empties
    the database: an open page polls the live server until it leaves (every page of the session
    would). The signed-in pages go back to their pool (`tests.review.browser.PagePool`)."""
    yield
    chromium = getattr(item, "funcargs", {}).get("browser")
    if chromium is not None:
        page_pool(chromium).give_back()


@pytest.fixture(scope="session", autouse=True)
def celery_on_own_redis() -> Iterator[None]:
    """Whatever a test enqueues from this process goes to this process's own Redis database
    (tests/processes.py), never to a queue another session's workers consume."""
    from tests.processes import celery_app_on, redis_url

    with celery_app_on(redis_url()):
        yield


# Django's PBKDF2 takes about a second a password here, and the suite makes hundreds of users:
# the session, and every server or worker it starts (they inherit the environment and must verify
# what the session wrote), hash with MD5, through the deployment setting PASSWORD_HASHERS.
os.environ.setdefault("PASSWORD_HASHERS", "django.contrib.auth.hashers.MD5PasswordHasher")
settings.PASSWORD_HASHERS = os.environ["PASSWORD_HASHERS"].split(",")  # settings loaded already
setting_changed.send(None, setting="PASSWORD_HASHERS", value=settings.PASSWORD_HASHERS, enter=True)

# the suite's webhook receivers listen on 127.0.0.1, which the product refuses as a target unless
# WEBHOOK_ALLOW_PRIVATE is set: set for this process and every server or worker it starts (the
# tests of that refusal turn it off for themselves)
os.environ.setdefault("WEBHOOK_ALLOW_PRIVATE", "1")
settings.WEBHOOK_ALLOW_PRIVATE = os.environ["WEBHOOK_ALLOW_PRIVATE"] == "1"

# the dashboard's open pages poll for changes every few seconds (DASHBOARD_POLL_SECONDS and
# DASHBOARD_LIVE_RUN_POLL_SECONDS); the browser tests wait for what a poll brings (a queue row
# leaving, a run completing) from the live server in this process, so its pages poll every second.
# Not faster: each poll is a request (and a database connection) in this process, and a page
# polling faster than every 0.5 s never reaches Playwright's "networkidle". The servers the session
# starts keep the defaults.
settings.DASHBOARD_POLL_SECONDS = settings.DASHBOARD_LIVE_RUN_POLL_SECONDS = 1

# a connection per request in this process too, as in the servers it starts (server_env): the
# live server's request threads otherwise each keep theirs for CONN_MAX_AGE, and the browser
# tests at the end of a run piled up dozens beside other users of the PostgreSQL server
settings.DATABASES["default"]["CONN_MAX_AGE"] = 0

# every agent process the tests start (and the agent in this process) gets the crash points and
# recovery timing the demo story uses too (support_agent/crash_points.py) through the agent's step hooks;
# they fire only when armed (AGENT_CRASH_* / AGENT_STOP_BEFORE_STEP in that process's environment)
os.environ.setdefault("AGENT_HOOKS", "support_agent.crash_points")


def _reseed_migrations_rows(sender: Any, **kwargs: Any) -> None:
    """A `transactional_db` test ends with a flush of every table, which takes the rows data
    migrations seeded with it; Django sends post_migrate after the flush, and this puts back the
    default budget policy and the dashboard's groups with the migrations' own functions (one
    source), so a later test on that worker finds what a migrated database has."""
    if sender.label in ("runs", "teams"):
        default_team()  # the flush takes every team; `default` is where the suite's rows go
    if sender.label == "runs":
        seed_default_policy(django_apps.get_model("runs", "BudgetPolicy"))
    if sender.label == "review":
        groups_ensure_now()


# Code that names no team (teams.scope) sees every team here, and files new rows in `default`:
# in this process's every thread (the live server's requests name their own, as the servers and
# workers the suite starts do). A test about teams names them (tests/teams/).
scope.set_process_default(scope.tests_default())


@pytest.fixture(autouse=True)
def every_team_unless_named() -> Iterator[None]:
    """Each test (its fixtures, and the flush that ends it) starts in the suite's default scope,
    whatever an earlier test or a migration left in this thread."""
    with scope.using(scope.tests_default()):
        yield


post_migrate.connect(_reseed_migrations_rows, dispatch_uid="tests.reseed_migrations_rows")
