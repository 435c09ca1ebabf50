"""What the tool side knows about idempotency keys, read in bulk; degrades when tools/ is absent.

The tool side (tools/) is optional for the dashboard: before it exists, or when its lookup
fails, each key shows as "not known to the tool side" instead of breaking the page.
"""

import logging
from dataclasses import dataclass
from typing import Any

from django.apps import apps

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyInfo:
    state: str  # absent | in_progress | completed | failed | unavailable
    response: Any = None
    replays: int = 0  # duplicate calls the tool side answered from its store
    locked_at: Any = None
    created_at: Any = None
    internal_error: str = ""  # a tool's exception text: shown to staff, never sent to callers


UNAVAILABLE = KeyInfo(state="unavailable")


def _key_model() -> Any:
    try:
        return apps.get_model("tools", "IdempotencyKey")
    except LookupError:
        return None


def key_states(keys: list[str]) -> dict[str, KeyInfo]:
    """One query for every key on a page (no per-step lookups)."""
    keys = [k for k in keys if k]
    if not keys:
        return {}
    model = _key_model()
    if model is None:
        return {k: UNAVAILABLE for k in keys}
    try:
        rows = {row.key: row for row in model.objects.filter(key__in=keys)}
    except Exception:  # the tool side's table may be mid-migration; show, do not crash
        logger.exception("reading idempotency keys failed")
        return {k: UNAVAILABLE for k in keys}
    out: dict[str, KeyInfo] = {}
    for k in keys:
        row = rows.get(k)
        if row is None:
            out[k] = KeyInfo(state="absent")
            continue
        replays = next(
            (
                int(getattr(row, f) or 0)
                for f in ("replays", "replay_count", "hits")
                if hasattr(row, f)
            ),
            0,
        )
        out[k] = KeyInfo(
            state=str(getattr(row, "state", "unknown")),
            response=getattr(row, "response", None),
            replays=replays,
            locked_at=getattr(row, "locked_at", None),
            created_at=getattr(row, "created_at", None),
            internal_error=str(getattr(row, "internal_error", "") or ""),
        )
    return out


def key_state(key: str) -> KeyInfo:
    return key_states([key]).get(key, UNAVAILABLE)


def concerned_records(arguments: dict[str, Any]) -> dict[str, Any]:
    """The customer and ticket a step's arguments name, with the ticket row when tools/ has it."""
    out: dict[str, Any] = {}
    if not isinstance(arguments, dict):
        return out
    customer = arguments.get("customer") or arguments.get("to")
    if customer:
        out["customer"] = customer
    ticket_id = arguments.get("ticket_id")
    if ticket_id is not None:
        out["ticket_id"] = ticket_id
        try:
            ticket_model = apps.get_model("tools", "Ticket")
        except LookupError:
            ticket_model = None
        if ticket_model is not None:
            try:
                out["ticket"] = ticket_model.objects.filter(pk=ticket_id).first()
            except Exception:
                logger.exception("reading ticket %s failed", ticket_id)
    return out
