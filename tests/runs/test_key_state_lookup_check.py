"""Recovery's question to the tool side is configured by a dotted path: a wrong one fails loudly.

Before, a path that did not import made recovery treat every ledger-enforced key as "in progress
with a stale lock": every crash went to review and nothing said why.
"""

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from runs.recovery import key_state_lookup
from tools.selectors import key_state_for_recovery


def test_the_default_lookup_is_the_tool_sides_selector_and_the_check_passes():
    assert key_state_lookup() is key_state_for_recovery
    call_command("check", "--fail-level", "ERROR")


def test_a_lookup_path_that_does_not_import_stops_the_start_up_check(settings):
    settings.LEDGER_KEY_STATE_LOOKUP = "tools.nowhere.key_state"

    with pytest.raises(SystemCheckError, match=r"runs\.E001.*tools\.nowhere\.key_state"):
        call_command("check")


def test_a_lookup_path_that_does_not_import_is_never_answered_with_a_guess(settings):
    settings.LEDGER_KEY_STATE_LOOKUP = "tools.nowhere.key_state"

    with pytest.raises(ImportError):
        key_state_lookup()
