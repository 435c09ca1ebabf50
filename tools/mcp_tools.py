"""MCP upstream tools as the proxies report them, and the admins' marks on them.

A proxy reports every upstream tool it lists (`mcp_tools_report`, with the tool's `readOnlyHint`)
and gets back the marks admins set in the dashboard (`mcp_tool_mark`, in review.services, audited).
"""

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from tools.models import McpTool


@transaction.atomic
def mcp_tools_report(*, server: str, tools: Iterable[Mapping[str, Any]]) -> list[McpTool]:
    """Record (or refresh) the tools `server` lists; the rows, with their marks, by name."""
    now = timezone.now()
    hints = {str(tool["name"]): bool(tool.get("read_only_hint")) for tool in tools}
    rows = []
    for name in sorted(hints):  # in one order, so two proxies reporting at once cannot deadlock
        row, created = McpTool.objects.get_or_create(
            server=server,
            name=name,
            defaults={"read_only_hint": hints[name], "first_seen": now, "last_seen": now},
        )
        if not created:
            row.read_only_hint = hints[name]
            row.last_seen = now
            row.save(update_fields=["read_only_hint", "last_seen"])
        rows.append(row)
    return rows


__all__ = ["mcp_tools_report"]
