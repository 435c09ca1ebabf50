from django.urls import URLPattern, path

from review import views

app_name = "review"

urlpatterns: list[URLPattern] = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("password/", views.PasswordChangeView.as_view(), name="password_change"),
    path("", views.runs_list, name="runs"),
    path("runs/<uuid:run_id>/", views.run_detail, name="run"),
    path("runs/<uuid:run_id>/verify", views.run_verify, name="run_verify"),
    path("runs/<uuid:run_id>/decide", views.run_decide, name="run_decide"),
    path("runs/<uuid:run_id>/limits", views.run_limits, name="run_limits"),
    path("queue/", views.queue, name="queue"),
    path("queue/count", views.queue_count, name="queue_count"),
    path("queue/bulk", views.queue_bulk, name="bulk"),
    path("queue/<uuid:run_id>/<int:index>/", views.queue_item, name="item"),
    path("queue/<uuid:run_id>/<int:index>/resolve", views.queue_resolve, name="resolve"),
    path("queue/<uuid:run_id>/<int:index>/claim", views.queue_claim, name="claim"),
    path("queue/<uuid:run_id>/<int:index>/release", views.queue_release, name="release"),
    path("queue/<uuid:run_id>/<int:index>/approve", views.queue_approve, name="approve"),
    path("queue/<uuid:run_id>/<int:index>/deny", views.queue_deny, name="deny"),
    path("queue/<uuid:run_id>/<int:index>/assign", views.queue_assign, name="assign"),
    path("notifications/", views.notifications, name="notifications"),
    path("notifications/<int:webhook_id>/active", views.webhook_active, name="webhook_active"),
    path("notifications/<int:webhook_id>/delete", views.webhook_delete, name="webhook_delete"),
    path("notifications/<int:webhook_id>/test", views.webhook_test, name="webhook_test"),
    path("policies/", views.policies, name="policies"),
    path("approval-rules/", views.approval_rules, name="approval_rules"),
    path("approval-rules/new", views.approval_rule_edit, name="approval_rule_new"),
    path("approval-rules/<int:pk>/", views.approval_rule_edit, name="approval_rule_edit"),
    path("policies/new", views.policy_edit, name="policy_new"),
    path("policies/<int:pk>/", views.policy_edit, name="policy_edit"),
    path("policies/<int:pk>/delete", views.policy_delete, name="policy_delete"),
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke", views.token_revoke, name="token_revoke"),
    path("mcp-tools/", views.mcp_tools, name="mcp_tools"),
    path("mcp-tools/<int:tool_id>/mark", views.mcp_tool_mark, name="mcp_tool_mark"),
    path("audit-log/", views.audit_log, name="audit"),
]
