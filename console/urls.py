from django.urls import URLPattern, path

from console import views

app_name = "console"

urlpatterns: list[URLPattern] = [
    path("", views.overview, name="overview"),
    path("runs/<uuid:run_id>/cancel", views.run_cancel, name="run_cancel"),
    path("runs/<uuid:run_id>/fork", views.run_fork, name="run_fork"),
    path("bulk/", views.bulk, name="bulk"),
]
