"""An admin's mark on a tool an MCP proxy found upstream (read, write, or the upstream's hint).

Lock precondition: none held by the caller; `mcp_tool_mark` locks the tool row in its own
transaction, so two admins marking the same tool are applied one after the other.
"""

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from dashboard.audit import audit_record
from runs.api_errors import invalid, note_required
from tools.models import McpTool, McpToolMark


def mcp_tool_mark(*, user: AbstractBaseUser, tool_id: int, mark: str, note: str) -> McpTool:
    """An admin says what an MCP upstream tool is: `read`, `write`, or "" (the upstream's hint
    stands). Proxies honour it from their next `tools/list`; audited as `mcp_tool.mark`."""
    if mark not in McpToolMark.values:
        raise invalid(
            "mark", f"A mark is one of {McpToolMark.values}.", f"One of {McpToolMark.values}."
        )
    note = note_required(note, "Say why in a note.")
    with transaction.atomic():
        tool = McpTool.objects.select_for_update().get(pk=tool_id)
        before = tool.mark
        tool.mark = mark
        tool.marked_by = user.get_username() if mark else ""
        tool.marked_at = timezone.now() if mark else None
        tool.save(update_fields=["mark", "marked_by", "marked_at"])
        audit_record(
            actor=user,
            action="mcp_tool.mark",
            target=f"mcp_tool:{tool.server}/{tool.name}",
            note=note,
            details={
                "server": tool.server,
                "tool": tool.name,
                "read_only_hint": tool.read_only_hint,
                "before": before,
                "after": mark,
            },
        )
    return tool
