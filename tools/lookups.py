"""Asking a tool whether an idempotency key took effect: the optional per-tool lookup.

A tool that keeps its own record of keys (`enforced_by: tool`, or any tool that can answer) may
declare a lookup in `LEDGER_TOOL_LOOKUPS`, a mapping of tool name to either

- a dotted path to a callable `(key: str) -> "completed" | "absent" | None`, or
- an `http(s)://` URL template with `{key}`, answering JSON `{"state": "completed" | "absent"}`.

A lookup that takes longer than LEDGER_TOOL_LOOKUP_TIMEOUT_SECONDS (2 s), errors, or answers anything else is "no answer": the item
stays for a person. Two callers ask it: recovery (runs.services.recovery, for a write step that would
otherwise go to review or be sent again), which records the answer in the run's chain, and the
review item page (review.services) for a step already in review, which records it in the step's
resolution and the audit log. A definite answer settles the step either way.
"""

import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.utils.module_loading import import_string

logger = logging.getLogger(__name__)

ANSWERS = ("completed", "absent")


@dataclass(frozen=True)
class LookupAnswer:
    state: str  # completed | absent | no_answer
    source: str  # the callable or URL asked
    detail: str = ""

    def evidence(self) -> dict[str, str]:
        """The answer as the journal records it (an event's payload)."""
        return {"source": self.source, "answer": self.state, "detail": self.detail}


def _timeout() -> float:
    return float(getattr(settings, "LEDGER_TOOL_LOOKUP_TIMEOUT_SECONDS", 2.0))


def lookup_for(tool: str) -> str | None:
    lookups: dict[str, str] = getattr(settings, "LEDGER_TOOL_LOOKUPS", {}) or {}
    return lookups.get(tool)


def tool_lookup(tool: str, key: str) -> LookupAnswer | None:
    """The tool's answer for `key`, or None when the tool declares no lookup."""
    target = lookup_for(tool)
    if not target:
        return None
    if target.startswith(("http://", "https://")):
        return _ask_url(target, key)
    return _ask_callable(target, key)


def _ask_url(template: str, key: str) -> LookupAnswer:
    import json

    import urllib3

    url = template.replace("{key}", quote(key, safe=""))
    try:
        answer = urllib3.request("GET", url, timeout=_timeout(), retries=False, redirect=False)
        state: Any = json.loads(answer.data).get("state") if answer.status == 200 else None
    except (urllib3.exceptions.HTTPError, ValueError, AttributeError) as exc:
        return LookupAnswer("no_answer", template, f"{type(exc).__name__}: {exc}"[:200])
    if state not in ANSWERS:
        return LookupAnswer("no_answer", template, f"HTTP {answer.status}, state {state!r}")
    return LookupAnswer(str(state), template)


def _ask_callable(path: str, key: str) -> LookupAnswer:
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures import TimeoutError as Late

    try:
        fn = import_string(path)
    except ImportError as exc:
        return LookupAnswer("no_answer", path, f"not importable: {exc}"[:200])
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(fn, key)
    try:
        state = future.result(timeout=_timeout())
    except Late:
        return LookupAnswer("no_answer", path, f"no answer within {_timeout():g} s")
    except Exception as exc:  # the tool's own code: any failure is "no answer"
        logger.warning("lookup %s failed for %s: %r", path, key, exc)
        return LookupAnswer("no_answer", path, f"{type(exc).__name__}: {exc}"[:200])
    finally:
        pool.shutdown(wait=False)
    if state not in ANSWERS:
        return LookupAnswer("no_answer", path, f"answered {state!r}")
    return LookupAnswer(str(state), path)
