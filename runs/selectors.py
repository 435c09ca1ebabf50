"""Reads other apps make of the journal: typed, so the coupling shows in the imports."""

import re
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any
from uuid import UUID

from django.core import signing
from django.db.models import Q

from runs.access import not_found, runs_visible
from runs.api_errors import ApplicationError
from runs.models import Event, Run, Step

_CURSOR_SALT = "runs.selectors.runs_find"

# {run uuid}:{index}:{name}:{32 hex} (runs.canonical.idempotency_key)
_JOURNAL_KEY = re.compile(
    r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}):(\d{1,9}):"
)


@dataclass(frozen=True)
class KeyStep:
    """The journal step an idempotency key names, with what the gateway checks of its run."""

    run_id: UUID
    agent: str
    run_epoch: int
    index: int
    name: str
    arguments_hash: str
    state: str
    epoch: int
    result: Any
    outcome_at: datetime | None
    run_status: str = ""

    @classmethod
    def journalled(cls, step: Step, *, run_epoch: int) -> "KeyStep":
        """A step this process has just journalled under the run's lease (`run_epoch`); its
        run's agent is left blank, as the caller has been let in already."""
        own = {field: getattr(step, field) for field in _STEP_FIELDS}
        return cls(**own, agent="", run_epoch=run_epoch)

    def found(self) -> dict[str, Any]:
        """What the gateway's refusals say was found under the key."""
        return {
            "run": str(self.run_id),
            "index": self.index,
            "name": self.name,
            "arguments_hash": self.arguments_hash,
            "state": self.state,
        }


# where a KeyStep's fields are read: its run's, through the step's run; the rest, the step's own
_RUN_FIELDS = {"agent": "run__agent", "run_epoch": "run__epoch", "run_status": "run__status"}
_STEP_FIELDS = [field.name for field in fields(KeyStep) if field.name not in _RUN_FIELDS]
_KEY_STEP_COLUMNS = {**{field: field for field in _STEP_FIELDS}, **_RUN_FIELDS}


def key_is_journal_shaped(key: str) -> bool:
    """Whether a key has a journal step's form ({run}:{index}:…): such a key is a step's or
    nobody's, never a free-form key someone could make before the step is journalled."""
    return _JOURNAL_KEY.match(key) is not None


def step_for_key(*, key: str) -> KeyStep | None:
    """The step whose idempotency_key is `key` (one indexed query), or None (a free-form key)."""
    match = _JOURNAL_KEY.match(key)
    if match is None:
        return None
    row = (
        Step.objects.filter(run_id=match[1], index=int(match[2]), idempotency_key=key)
        .values(*_KEY_STEP_COLUMNS.values())
        .first()
    )
    if row is None:
        return None
    return KeyStep(**{field: row[column] for field, column in _KEY_STEP_COLUMNS.items()})


@dataclass(frozen=True)
class RunPage:
    runs: list[Run]
    next_cursor: str | None


def _bad_cursor() -> ApplicationError:
    return ApplicationError(
        "validation_error",
        "The cursor is not one this server gave out.",
        status_code=400,
        details={"cursor": ["Use next_cursor from the previous page, unchanged."]},
    )


def runs_find(
    *,
    principal: Any,
    agent: str | None = None,
    external_id: str | None = None,
    status: str | None = None,
    created_after: datetime | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> RunPage:
    """Runs the token may see, newest first, `limit` at a time.

    The cursor is the (created_at, id) of the last run of the previous page, signed with the
    SECRET_KEY: a tampered cursor is a 400, never a query on made-up values.
    """
    runs = runs_visible(principal=principal, runs=Run.objects.all())
    if agent is not None:
        runs = runs.filter(agent=agent)
    if external_id is not None:
        runs = runs.filter(external_id=external_id)
    if status is not None:
        runs = runs.filter(status=status)
    if created_after is not None:
        runs = runs.filter(created_at__gt=created_after)
    if cursor is not None:
        try:
            at, last_id = signing.loads(cursor, salt=_CURSOR_SALT)
            at, last_id = datetime.fromisoformat(at), UUID(last_id)
        except (signing.BadSignature, ValueError, TypeError) as exc:
            raise _bad_cursor() from exc
        runs = runs.filter(Q(created_at__lt=at) | Q(created_at=at, id__lt=last_id))
    found = list(runs.order_by("-created_at", "-id")[: limit + 1])
    next_cursor = None
    if len(found) > limit:
        found = found[:limit]
        last = found[-1]
        next_cursor = signing.dumps(
            [last.created_at.isoformat(), str(last.pk)], salt=_CURSOR_SALT, compress=True
        )
    return RunPage(runs=found, next_cursor=next_cursor)


def run_journal(*, run_id: UUID | str) -> tuple[list[Step], list[Event]]:
    """A run's steps and events, in order; 404 `not_found` when there is no such run."""
    if not Run.objects.filter(pk=run_id).exists():
        raise not_found(run_id)
    steps = list(Step.objects.filter(run_id=run_id).order_by("index"))
    return steps, list(Event.objects.filter(run_id=run_id).order_by("seq"))


__all__ = [
    "KeyStep",
    "RunPage",
    "key_is_journal_shaped",
    "run_journal",
    "runs_find",
    "step_for_key",
]


# --- forks ------------------------------------------------------------------------------------

# a write step in these states never ran: nothing of it happened in the original
_WRITES_NEVER_RAN = ("denied", "awaiting_approval")


@dataclass(frozen=True)
class WriteAfterFork:
    """A tool whose writes the original made at or after a fork point: a fork that goes on from
    there may make them again, so run_fork asks, per tool, whether to hold or run them."""

    name: str
    steps: list[tuple[int, str]]  # (index, state) in the original, oldest first


def fork_writes_after(*, run_id: UUID | str, index: int) -> list[WriteAfterFork]:
    """The original's write steps from `index` on that may have happened, by tool name."""
    by_tool: dict[str, list[tuple[int, str]]] = {}
    rows = (
        Step.objects.filter(run_id=run_id, index__gte=index, effect="write")
        .exclude(state__in=_WRITES_NEVER_RAN)
        .order_by("index")
        .values_list("name", "index", "state")
    )
    for name, step_index, state in rows:
        by_tool.setdefault(name, []).append((step_index, state))
    return [WriteAfterFork(name=name, steps=steps) for name, steps in sorted(by_tool.items())]
