"""Worker tokens: the list with its create form, and revoking one (after a confirmation)."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from dashboard.views.common import require_home_team, require_perm
from review.forms import TokenForm
from review.services.tokens import review_token_create, review_token_revoke
from runs.api_errors import ApplicationError
from runs.models import WorkerToken


@require_http_methods(["GET", "POST"])
@require_perm("manage_tokens", narrow=True)
def tokens(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST or None)
    created: tuple[WorkerToken, str] | None = None
    if request.method == "POST" and form.is_valid():
        try:
            require_home_team(request)  # a new token goes to the switched team
            created = review_token_create(
                user=request.user,  # type: ignore[arg-type]
                name=form.cleaned_data["name"],
                agents=form.cleaned_data["agents"],
                tools_direct=form.cleaned_data["tools_direct"],
            )
        except ApplicationError as exc:
            form.add_error("name", exc.message)
        else:
            form = TokenForm()
    rows = list(WorkerToken.objects.order_by("name", "-created_at"))
    response = render(
        request,
        "review/tokens.html",
        {"nav": "tokens", "form": form, "tokens": rows, "created": created},
        status=400 if request.method == "POST" and form.errors else 200,
    )
    if created:
        response["Cache-Control"] = "no-store"
    return response


@require_http_methods(["GET", "POST"])
@require_perm("manage_tokens", narrow=True)
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    """Revoking asks first (every worker using the token stops at once); a POST without
    `confirm=yes` shows the same question instead of revoking."""
    if request.method == "GET" or request.POST.get("confirm") != "yes":
        token = get_object_or_404(WorkerToken, pk=token_id)
        return render(request, "review/token_revoke.html", {"nav": "tokens", "token": token})
    try:
        token = review_token_revoke(user=request.user, token_id=token_id)  # type: ignore[arg-type]
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Token “{token.name}” ({token.prefix}…) revoked.")
    return HttpResponseRedirect(reverse("review:tokens"))
