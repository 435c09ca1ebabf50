from django.urls import URLPattern, path

from sso import views

app_name = "sso"

urlpatterns: list[URLPattern] = [
    path("sso/start/", views.StartView.as_view(), name="start"),
    path("sso/callback/", views.callback, name="callback"),
    path("people/", views.people, name="people"),
    path("people/new", views.people_create, name="people_create"),
    path("people/<int:user_id>/groups", views.people_groups, name="people_groups"),
    path("people/<int:user_id>/deactivate", views.people_deactivate, name="people_deactivate"),
    path("people/<int:user_id>/reactivate", views.people_reactivate, name="people_reactivate"),
]
