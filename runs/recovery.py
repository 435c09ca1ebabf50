"""What recovery asks the tool side about a `ledger`-enforced write step's idempotency key."""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeyState:
    """state: absent | in_progress | completed | failed; stale: an in_progress lock too old to trust."""

    state: str
    stale: bool = False
    response: Any = None


def _unknown_lookup(key: str) -> KeyState:
    return KeyState(state="in_progress", stale=True)


def key_state_lookup() -> Callable[[str], KeyState]:
    """The configured lookup; without a tool side every ledger key is treated as unknowable."""
    try:
        return import_string(settings.LEDGER_KEY_STATE_LOOKUP)  # type: ignore[no-any-return]
    except ImportError:
        logger.warning(
            "LEDGER_KEY_STATE_LOOKUP %s not importable", settings.LEDGER_KEY_STATE_LOOKUP
        )
        return _unknown_lookup
