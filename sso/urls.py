from django.urls import URLPattern, path

from dashboard.urls import sso_namespace
from sso import views

app_name = "sso"

urlpatterns: list[URLPattern] = [
    path("sso/start/", views.StartView.as_view(), name="start"),
    path("sso/callback/", views.callback, name="callback"),
    *sso_namespace,  # the people page (dashboard/urls.py)
]
