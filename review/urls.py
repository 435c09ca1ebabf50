"""The `review` namespace: the desk's pages (the queue, its items, notifications, policies and
approval rules, tokens, MCP tools), and, under the names they have always had, the shell's and
the run pages' routes, which their apps list (dashboard/urls.py, console/urls.py)."""

from django.urls import URLPattern, path

from console.urls import review_namespace as run_pages
from dashboard.urls import review_namespace as shell_pages
from review.views import mcp_tools, notifications, policies, queue, tokens

app_name = "review"

urlpatterns: list[URLPattern] = [
    *shell_pages,  # the shell's sign-in pages and audit log (dashboard/urls.py)
    *run_pages,  # the runs list and a run's page with its actions (console/urls.py)
    path("queue/", queue.queue, name="queue"),
    path("queue/count", queue.queue_count, name="queue_count"),
    path("queue/bulk", queue.queue_bulk, name="bulk"),
    path("queue/<uuid:run_id>/<int:index>/", queue.queue_item, name="item"),
    path("queue/<uuid:run_id>/<int:index>/resolve", queue.queue_resolve, name="resolve"),
    path("queue/<uuid:run_id>/<int:index>/claim", queue.queue_claim, name="claim"),
    path("queue/<uuid:run_id>/<int:index>/release", queue.queue_release, name="release"),
    path("queue/<uuid:run_id>/<int:index>/approve", queue.queue_approve, name="approve"),
    path("queue/<uuid:run_id>/<int:index>/deny", queue.queue_deny, name="deny"),
    path("queue/<uuid:run_id>/<int:index>/assign", queue.queue_assign, name="assign"),
    path("notifications/", notifications.notifications, name="notifications"),
    path(
        "notifications/<int:webhook_id>/active", notifications.webhook_active, name="webhook_active"
    ),
    path(
        "notifications/<int:webhook_id>/delete", notifications.webhook_delete, name="webhook_delete"
    ),
    path("notifications/<int:webhook_id>/test", notifications.webhook_test, name="webhook_test"),
    path("policies/", policies.policies, name="policies"),
    path("approval-rules/", policies.approval_rules, name="approval_rules"),
    path("approval-rules/new", policies.approval_rule_edit, name="approval_rule_new"),
    path("approval-rules/<int:pk>/", policies.approval_rule_edit, name="approval_rule_edit"),
    path("policies/new", policies.policy_edit, name="policy_new"),
    path("policies/<int:pk>/", policies.policy_edit, name="policy_edit"),
    path("policies/<int:pk>/delete", policies.policy_delete, name="policy_delete"),
    path("tokens/", tokens.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke", tokens.token_revoke, name="token_revoke"),
    path("mcp-tools/", mcp_tools.mcp_tools, name="mcp_tools"),
    path("mcp-tools/<int:tool_id>/mark", mcp_tools.mcp_tool_mark, name="mcp_tool_mark"),
]
