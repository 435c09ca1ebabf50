"""The shell's routes. Their paths and names are the ones the contract and the tests know, and
the names carry the namespace of the app each page grew up in (`review:login`, `review:audit`,
`sso:people`), so review/urls.py and sso/urls.py serve these lists under their namespaces."""

from django.urls import URLPattern, path

from dashboard.views import audit_log, auth, people, teams

# under the namespace `review` (review/urls.py)
review_namespace: list[URLPattern] = [
    path("login/", auth.LoginView.as_view(), name="login"),
    path("logout/", auth.LogoutView.as_view(), name="logout"),
    path("password/", auth.PasswordChangeView.as_view(), name="password_change"),
    path("audit-log/", audit_log.audit_log, name="audit"),
    path("team/", teams.team_switch, name="team_switch"),
    path("teams/", teams.teams_page, name="teams"),
    path("team/settings", teams.team_settings, name="team_settings"),
]

# under the namespace `sso` (sso/urls.py)
sso_namespace: list[URLPattern] = [
    path("people/", people.people, name="people"),
    path("people/new", people.people_create, name="people_create"),
    path("people/<int:user_id>/groups", people.people_groups, name="people_groups"),
    path("people/<int:user_id>/role", people.people_role, name="people_role"),
    path("people/<int:user_id>/deactivate", people.people_deactivate, name="people_deactivate"),
    path("people/<int:user_id>/reactivate", people.people_reactivate, name="people_reactivate"),
]
