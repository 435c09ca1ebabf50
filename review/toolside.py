"""What the tool side knows about idempotency keys, read in bulk through `tools.selectors`.

When the tool side's read fails (its table mid-migration), each key shows as "unavailable"
instead of breaking the page.
"""

import logging
from typing import Any

from tools import selectors as tool_side
from tools.selectors import KeyRecord as KeyInfo

logger = logging.getLogger(__name__)

UNAVAILABLE = KeyInfo(state="unavailable")


def key_states(keys: list[str]) -> dict[str, KeyInfo]:
    """One query for every key on a page (no per-step lookups)."""
    keys = [k for k in keys if k]
    if not keys:
        return {}
    try:
        return tool_side.key_records(keys)
    except Exception:  # the tool side's table may be mid-migration; show, do not crash
        logger.exception("reading idempotency keys failed")
        return {k: UNAVAILABLE for k in keys}


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
            out["ticket"] = tool_side.ticket_get(ticket_id)
        except Exception:
            logger.exception("reading ticket %s failed", ticket_id)
    return out
