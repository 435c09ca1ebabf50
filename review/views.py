"""Dashboard views: thin callers of runs/services and review selectors."""

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse_lazy

from review.templatetags.review import waiting_badge


class LoginView(auth_views.LoginView):
    template_name = "registration/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    pass


class PasswordChangeView(auth_views.PasswordChangeView):
    template_name = "registration/password_change.html"
    success_url = reverse_lazy("review:runs")


@login_required
def _pending(request: HttpRequest) -> HttpResponse:
    # interim page while the dashboard is built (replaced in the next commits)
    return render(request, "review/pending.html", {})


runs_list = queue = policies = tokens = audit_log = _pending


@login_required
def queue_count(request: HttpRequest) -> HttpResponse:
    return HttpResponse(waiting_badge())
