"""Tool lookups for the desk's tests: a mail provider that can say whether a key was sent."""

import time

SENT_KEYS: set[str] = set()


def provider_lookup(key: str) -> str:
    return "completed" if key in SENT_KEYS else "absent"


def slow_lookup(key: str) -> str:
    time.sleep(3)
    return "completed"


def broken_lookup(key: str) -> str:
    raise ConnectionError("provider API down")
