"""What recovery asks the tool side about a `ledger`-enforced write step's idempotency key."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.utils.module_loading import import_string


@dataclass(frozen=True)
class KeyState:
    """state: absent | in_progress | completed | failed; stale: an in_progress lock too old to trust."""

    state: str
    stale: bool = False
    response: Any = None


def key_state_lookup() -> Callable[[str], KeyState]:
    """The configured lookup (`settings.LEDGER_KEY_STATE_LOOKUP`); a path that does not import
    is refused at start-up by the system check `runs.E001` and raises here, never guessed."""
    return import_string(settings.LEDGER_KEY_STATE_LOOKUP)  # type: ignore[no-any-return]


@register(Tags.compatibility)
def key_state_lookup_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Without its lookup, recovery could not tell a sent email from one never sent."""
    try:
        lookup = import_string(settings.LEDGER_KEY_STATE_LOOKUP)
    except ImportError as exc:
        return [
            Error(
                f"LEDGER_KEY_STATE_LOOKUP {settings.LEDGER_KEY_STATE_LOOKUP!r} does not import: "
                f"{exc}",
                hint="Name a callable (key) -> runs.recovery.KeyState, such as the default "
                "tools.selectors.key_state_for_recovery.",
                id="runs.E001",
            )
        ]
    if not callable(lookup):
        return [
            Error(
                f"LEDGER_KEY_STATE_LOOKUP {settings.LEDGER_KEY_STATE_LOOKUP!r} is not callable.",
                id="runs.E001",
            )
        ]
    return []
