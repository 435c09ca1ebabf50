"""Reads that only show things may come from a hot standby; everything that decides uses the primary.

With DATABASE_REPLICA_URL set, dashboard pages (GET) and exports read from the `replica` alias;
the worker API, the gateway, every POST, every locking read (`select_for_update` asks for the
write database) and all background decisions (reaper, deadlines, recovery) read the primary. The
choice is a context variable, so nothing reads the replica unless a caller asked for it.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse

REPLICA = "replica"
_replica_reads: ContextVar[bool] = ContextVar("replica_reads", default=False)


def replica_configured() -> bool:
    return REPLICA in settings.DATABASES


def read_alias() -> str:
    """The alias a display-only read should use right now."""
    return REPLICA if _replica_reads.get() and replica_configured() else "default"


@contextmanager
def replica_reads() -> Iterator[None]:
    """Within this block, ORM reads (and read_alias()) go to the replica when there is one."""
    token = _replica_reads.set(True)
    try:
        yield
    finally:
        _replica_reads.reset(token)


class ReplicaRouter:
    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return REPLICA if _replica_reads.get() and replica_configured() else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        # explicit: without it Django saves an instance where it was read from (the replica)
        return "default"

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True  # the same database, one of them a copy

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return db == "default"


class ReplicaReadsMiddleware:
    """Dashboard GETs read from the replica; the worker API and every POST read the primary.

    The signed-in user is loaded from the primary first: a session written a moment ago at login
    may not have reached the standby yet.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if (
            not replica_configured()
            or request.method not in ("GET", "HEAD")
            or request.path.startswith(("/api/", "/login", "/logout", "/django-admin/"))
        ):
            return self.get_response(request)
        if hasattr(request, "user"):
            _ = request.user.is_authenticated  # resolve the lazy user on the primary
        with replica_reads():
            return self.get_response(request)
