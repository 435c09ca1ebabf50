from django.urls import path, re_path

from tools import apis

urlpatterns = [
    path("tools/", apis.ToolListApi.as_view(), name="tools-list"),
    path("mcp/tools/", apis.McpToolsReportApi.as_view(), name="mcp-tools-report"),
    path("tools/<str:name>/invoke", apis.ToolInvokeApi.as_view(), name="tools-invoke"),
    # any characters (slashes and even newlines), so a malformed key gets our 400, not a 404 page
    re_path(
        r"^idempotency/(?P<key>(?s:.+))$",
        apis.IdempotencyKeyDetailApi.as_view(),
        name="idempotency-detail",
    ),
]
