from django.urls import URLPattern, path

from review import views

app_name = "review"

urlpatterns: list[URLPattern] = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", views.LogoutView.as_view(), name="logout"),
    path("password/", views.PasswordChangeView.as_view(), name="password_change"),
    path("", views.runs_list, name="runs"),
    path("queue/", views.queue, name="queue"),
    path("queue/count", views.queue_count, name="queue_count"),
    path("policies/", views.policies, name="policies"),
    path("tokens/", views.tokens, name="tokens"),
    path("audit/", views.audit_log, name="audit"),
]
