"""Waiting for a run to settle without holding a thread: an async view fed by LISTEN/NOTIFY.

`GET /api/v1/runs/{id}/?wait=N` answers once the run is final, needs review or is over budget,
or after N seconds, with the run either way. A trigger (runs/sql/ledger.sql)
notifies channel `ledger_run_status` with the run id when a run's status changes, at commit.

Under ASGI (`uvicorn config.asgi:application`) one listening connection per process serves every
waiter of that process: a waiter is a future in a dict, not a thread and not a connection, so
hundreds of waiters cost the threads that serve journal writes nothing. Under WSGI the view
still works, but each waiter holds its request thread and one listening connection of its own
for as long as it waits: serve waiters from the ASGI app (see the README).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import Any
from uuid import UUID

import psycopg
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.core.handlers.asgi import ASGIRequest
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from runs.constants import FINAL_STATUSES, RunStatus
from runs.models import Run
from runs.representations import run_json
from teams.scope import every_team_scope

logger = logging.getLogger(__name__)

CHANNEL = "ledger_run_status"
MAX_WAIT_SECONDS = 60
# a waiter answers when its run reaches one of these (or at its timeout)
SETTLED = frozenset({*FINAL_STATUSES, RunStatus.NEEDS_REVIEW, RunStatus.BUDGET_EXCEEDED})


def _conninfo() -> dict[str, Any]:
    """Where the listener connects: DATABASE_LISTEN_URL (a direct connection, when the default
    database is behind a transaction pooler: LISTEN needs a session), else the default database."""
    if django_settings.DATABASE_LISTEN_URL:
        url = django_settings.DATABASE_LISTEN_URL.replace("postgres://", "postgresql://", 1)
        return {**conninfo_to_dict(url), "autocommit": True}
    settings = connection.settings_dict  # no query: the loop thread's wrapper stays unused
    params: dict[str, Any] = {"dbname": settings["NAME"], "autocommit": True}
    for key, name in (("USER", "user"), ("PASSWORD", "password"), ("HOST", "host")):
        if settings.get(key):
            params[name] = settings[key]
    if settings.get("PORT"):
        params["port"] = int(settings["PORT"])
    for option in ("sslmode", "sslrootcert", "connect_timeout"):
        if option in settings.get("OPTIONS", {}):
            params[option] = settings["OPTIONS"][option]
    return params


class Listener:
    """One LISTEN connection and the futures of everyone waiting on it, in one event loop, and
    one connection that reads the runs they wait for (queries take turns: each is one indexed
    row read). Waiters use no Django connection while they wait."""

    def __init__(self) -> None:
        self.waiters: dict[str, set[asyncio.Future[None]]] = {}
        self.connection: psycopg.AsyncConnection[Any] | None = None
        self.reader: psycopg.AsyncConnection[Any] | None = None
        self.reading = asyncio.Lock()
        self.reads: dict[str, asyncio.Task[Run | None]] = {}
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.connection = await psycopg.AsyncConnection.connect(**_conninfo())
        await self.connection.execute(f"LISTEN {CHANNEL}")
        self.reader = await psycopg.AsyncConnection.connect(**_conninfo(), row_factory=dict_row)
        # the reader reads the runs the DRF view already showed their waiters (under the
        # caller's team), whatever their team: every team, for its session (its own direct
        # connection, never a pooled one: teams.scope, `waiters`)
        await self.reader.execute(
            every_team_scope("waiters").setting_sql().replace(", true)", ", false)")
        )
        self.task = asyncio.get_running_loop().create_task(self._dispatch())

    async def read(self, run_id: str) -> Run | None:
        """The run as committed now, as a Run instance (for run_json), read on this listener's
        own connection. Waiters woken together by one notification share one read."""
        task = self.reads.get(run_id)
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._read(run_id))
            self.reads[run_id] = task
            task.add_done_callback(
                lambda t: self.reads.pop(run_id, None) if self.reads.get(run_id) is t else None
            )
        return await asyncio.shield(task)

    async def _read(self, run_id: str) -> Run | None:
        assert self.reader is not None
        async with self.reading:
            cursor = await self.reader.execute(_READ_RUN, [run_id])
            row = await cursor.fetchone()
        if row is None:
            return None
        # a row from the database, as a queryset makes one (its own connection parses jsonb)
        fields = Run._meta.concrete_fields
        return Run.from_db("default", [f.attname for f in fields], [row[f.column] for f in fields])

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done()

    async def _dispatch(self) -> None:
        assert self.connection is not None
        try:
            async for notice in self.connection.notifies():
                for future in self.waiters.get(notice.payload, ()):
                    if not future.done():
                        future.set_result(None)
        except Exception:  # the connection died: wake everyone; they re-read and re-listen
            logger.warning("run status listener lost its connection", exc_info=True)
            for futures in self.waiters.values():
                for future in futures:
                    if not future.done():
                        future.set_result(None)

    def subscribe(self, run_id: str) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.setdefault(run_id, set()).add(future)
        return future

    def unsubscribe(self, run_id: str, future: asyncio.Future[None]) -> None:
        futures = self.waiters.get(run_id)
        if futures is not None:
            futures.discard(future)
            if not futures:
                del self.waiters[run_id]

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
        for conn in (self.connection, self.reader):
            if conn is not None:
                await conn.close()


_shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Listener] = (
    weakref.WeakKeyDictionary()
)
_starting: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


async def shared_listener() -> Listener:
    """This event loop's listener (ASGI: one per process), started on first use."""
    loop = asyncio.get_running_loop()
    lock = _starting.setdefault(loop, asyncio.Lock())
    async with lock:
        listener = _shared.get(loop)
        if listener is None or not listener.alive:
            listener = Listener()
            await listener.start()
            _shared[loop] = listener
        return listener


_READ_RUN = "SELECT * FROM runs_run WHERE id = %s"


FIRST_READS_AT_ONCE = 8
_first_read_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


def _first_reads() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    slots = _first_read_slots.get(loop)
    if slots is None:
        slots = _first_read_slots[loop] = asyncio.Semaphore(FIRST_READS_AT_ONCE)
    return slots


def _answer_and_close(drf_view: Callable[..., Any], request: HttpRequest, run_id: UUID) -> Any:
    """The DRF view's answer, rendered, in the request's thread; then that thread's connection
    is closed (looked up here, not in the event loop): a waiter holds no Django connection."""
    try:
        response = drf_view(request, run_id=run_id)
        response.render()
        return response
    finally:
        connection.close()


async def run_wait(*, run_id: str, seconds: int, shared: bool = True) -> Run | None:
    """The run once it is settled (SETTLED) or after `seconds`; None when there is no such run.

    `shared`: use the event loop's listener (ASGI); otherwise a listener of this call's own,
    closed when it returns (WSGI runs each async view in a loop of its own).
    """
    listener = await shared_listener() if shared else Listener()
    if not shared:
        await listener.start()
    read = listener.read
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    try:
        while True:
            future = listener.subscribe(run_id)
            try:
                run = await read(run_id)  # after subscribing: no change is missed in between
                remaining = deadline - loop.time()
                if run is None or run.status in SETTLED or remaining <= 0:
                    return run
                try:
                    await asyncio.wait_for(future, timeout=remaining)
                except TimeoutError:
                    return await read(run_id)
            finally:
                listener.unsubscribe(run_id, future)
    finally:
        if not shared:
            await listener.close()


def wait_door(drf_view: Callable[..., Any]) -> Callable[..., Any]:
    """GET /runs/{id}/: the DRF view answers (auth, 404, `wait` validation, the run); with
    `?wait=N` and a run not yet settled, this async view then waits for it without a thread."""

    async def view(request: HttpRequest, run_id: UUID) -> Any:
        if "wait" not in request.GET:
            return await sync_to_async(drf_view)(request, run_id=run_id)
        # a burst of waiters must not open a connection each: a few at a time answer the first
        # read, each giving its connection back before it waits
        async with _first_reads():
            response = await sync_to_async(_answer_and_close)(drf_view, request, run_id)
        wait = request.GET.get("wait")
        data = getattr(response, "data", None)
        if (
            request.method != "GET"
            or wait is None
            or response.status_code != 200
            or not isinstance(data, dict)
            or data.get("status") in SETTLED
            or int(wait) <= 0  # validated by the DRF view: an integer in 0..60
        ):
            return response
        shared = isinstance(request, ASGIRequest)
        run = await run_wait(run_id=str(run_id), seconds=int(wait), shared=shared)
        if run is None:  # deleted meanwhile: what the view said is all there is
            return response
        return JsonResponse(run_json(run))

    view.cls = drf_view.cls  # type: ignore[attr-defined]  # drf-spectacular documents the view
    view.initkwargs = drf_view.initkwargs  # type: ignore[attr-defined]
    return csrf_exempt(view)


__all__ = ["CHANNEL", "MAX_WAIT_SECONDS", "SETTLED", "run_wait", "wait_door"]
