"""The tools MCP proxies found upstream, and an admin's mark on one."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from dashboard.views.common import page_action, person, require_perm
from review.services import mcp_tools as mcp_tool_services
from tools.models import McpTool, McpToolMark


@require_GET
@require_perm("manage_policies", narrow=True)
def mcp_tools(request: HttpRequest) -> HttpResponse:
    """The tools MCP proxies found upstream: the server's hint and the admins' mark on each."""
    rows = list(McpTool.objects.order_by("server", "name"))
    return render(
        request,
        "review/mcp_tools.html",
        {"nav": "mcp_tools", "tools": rows, "marks": McpToolMark.choices},
    )


@page_action("manage_policies", back="review:mcp_tools")
def mcp_tool_mark(request: HttpRequest, tool_id: int) -> str:
    """An admin's mark on an upstream tool (read, write, or the upstream's hint), with a note."""
    get_object_or_404(McpTool, pk=tool_id)
    tool = mcp_tool_services.mcp_tool_mark(
        user=person(request),
        tool_id=tool_id,
        mark=request.POST.get("mark", ""),
        note=request.POST.get("note", ""),
    )
    return (
        f"{tool.server}/{tool.name} is now treated as a {tool.effect}; "
        "proxies honour it from their next tools/list."
    )
