"""What the proxy is told about its upstream's tools: `--read`, `--write`, `--keyed`, and how they
rank against an admin's mark and the upstream's own hint."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolPolicy:
    """Tool names said to be reads (`--read`), writes despite a read-only hint (`--write`), and
    writes whose upstream honours the step's key (`--keyed`)."""

    read: frozenset[str] = frozenset()
    write: frozenset[str] = frozenset()
    keyed: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls, read: Iterable[str] = (), write: Iterable[str] = (), keyed: Iterable[str] = ()
    ) -> ToolPolicy:
        return cls(frozenset(read), frozenset(write), frozenset(keyed))

    def effect(self, name: str, *, mark: str | None, hinted: bool) -> tuple[str, Any]:
        """(effect, enforced_by): an admin's mark (the dashboard) first, then `--read` /
        `--write`, then the upstream's read-only hint; a write is enforced by the tool when
        `--keyed` names it, by nobody otherwise."""
        write = ("write", "tool" if name in self.keyed else "nobody")
        if mark:
            return ("read", None) if mark == "read" else write
        if name in self.read or (hinted and name not in self.write):
            return "read", None
        return write
