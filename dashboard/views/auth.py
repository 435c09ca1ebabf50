"""Signing in and out: Django's login with a failure counter per (username, ip) and a lockout."""

import unicodedata
from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse
from django.urls import reverse_lazy

from dashboard.services.logins import (
    login_failure_record,
    login_locked_until,
    login_refused_record,
    login_success_clear,
)


def _attempted_username(request: HttpRequest) -> str:
    """The username as Django's login form reads it (NFKC, stripped), so variants share a lockout."""
    return unicodedata.normalize("NFKC", str(request.POST.get("username", ""))).strip()


def _client_ip(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR") or "0.0.0.0")  # noqa: S104


class LoginView(auth_views.LoginView):
    """Django's login with a per-(username, ip) failure counter and a lockout window."""

    template_name = "registration/login.html"
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        from sso.conf import local_login_enabled, sso_settings

        return super().get_context_data(
            sso=sso_settings(), local_login=local_login_enabled(), **kwargs
        )

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        from sso.conf import local_login_enabled

        if not local_login_enabled():  # LOCAL_LOGIN=0: the identity provider only
            response = self.render_to_response(self.get_context_data(local_refused=True))
            response.status_code = 403
            return response
        username = _attempted_username(request)
        until = login_locked_until(username=username, ip=_client_ip(request))
        if until is not None:
            login_refused_record(username=username, ip=_client_ip(request), until=until)
            form = self.get_form()
            form.errors.clear()
            form.add_error(
                None,
                f"Too many failed logins. Try again after {until:%H:%M:%S} UTC.",
            )
            response = self.render_to_response(self.get_context_data(form=form))
            response.status_code = 429
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        username = _attempted_username(self.request)
        if username:
            login_failure_record(username=username, ip=_client_ip(self.request))
        return super().form_invalid(form)

    def form_valid(self, form: Any) -> HttpResponse:
        login_success_clear(user=form.get_user(), ip=_client_ip(self.request))
        return super().form_valid(form)


class LogoutView(auth_views.LogoutView):
    pass


class PasswordChangeView(auth_views.PasswordChangeView):
    template_name = "registration/password_change.html"
    success_url = reverse_lazy("review:runs")

    def form_valid(self, form: Any) -> HttpResponse:
        response = super().form_valid(form)
        messages.success(self.request, "Your password was changed.")
        return response
