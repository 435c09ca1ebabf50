"""What every dashboard view shares: the permission check, htmx, forms' errors and a service's
refusal told to a person, the POST-then-redirect of a page's action."""

from collections.abc import Callable, Iterable
from functools import wraps
from typing import Any, cast

from django import forms
from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling
from django_htmx.middleware import HtmxDetails

from dashboard.audit import audit_record
from runs.api_errors import ApplicationError
from teams import scope
from teams.backends import scope_with_permission
from teams.scope import home_team_id

View = Callable[..., HttpResponse]


class NotPermittedHere(Exception):
    """The person sees the object but holds no role granting review.<codename> in its team."""

    def __init__(self, codename: str) -> None:
        super().__init__(codename)
        self.codename = codename


def require_perm(codename: str, *, narrow: bool = False) -> Callable[[View], View]:
    """Logged in (else the login page) and holding review.<codename> in a team they see (else
    403). `narrow`: the view sees only the teams where they hold it (a settings page: another
    team's rows answer 404 there). A `NotPermittedHere` the view raises (`require_perm_on`: the
    object's team is one where the role is missing) is a 403 too."""

    def decorate(view: View) -> View:
        @wraps(view)
        @login_required
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.has_perm(f"review.{codename}"):
                return refused(request, codename)
            if narrow:
                scope.set_current(scope_with_permission(request.user, f"review.{codename}"))
            try:
                return view(request, *args, **kwargs)
            except NotPermittedHere as exc:
                return refused(request, exc.codename)

        return wrapped

    return decorate


def require_perm_on(request: HttpRequest, codename: str, obj: Any) -> None:
    """The person holds review.<codename> in `obj`'s team (teams.backends.TeamRoleBackend);
    else NotPermittedHere (a 403 from `require_perm`). The object was found, so the person sees
    it: one they may not see is a 404 before this (row-level security hides it)."""
    if not request.user.has_perm(f"review.{codename}", obj):
        raise NotPermittedHere(codename)


def require_home_team(request: HttpRequest) -> None:
    """A new top-level row (a policy, a token, a webhook, a rule) goes to the team the person
    switched to; with several teams in sight and none chosen, a 400 asks them to choose."""
    if home_team_id() is None:
        raise ApplicationError(
            "team_required",
            "You see several teams: choose the team in the header first.",
            status_code=400,
        )


def refused(request: HttpRequest, codename: str) -> HttpResponse:
    """A 403 page, an audit entry, and one log line ("Forbidden: /path", from Django's request
    log): an expected refusal is not an error with a traceback."""
    audit_record(
        actor=request.user,  # type: ignore[arg-type]
        action="access.refused",
        target=request.path[:300],
        details={"method": request.method, "permission": codename},
    )
    return render(request, "403.html", {}, status=403)


class HtmxHttpRequest(HttpRequest):
    """A request as django-htmx's middleware (installed in settings) leaves it: with `htmx`, the
    typing django-htmx documents."""

    htmx: HtmxDetails


def is_htmx(request: HttpRequest) -> bool:
    """True for requests htmx made (`request.htmx`; a missing middleware fails loudly)."""
    return bool(cast(HtmxHttpRequest, request).htmx)


def render_polled(
    request: HttpRequest, template_name: str, context: dict[str, Any], *, stop: bool
) -> HttpResponse:
    """A fragment htmx polls for. When `stop` (the run is final, the item decided), it comes as
    django-htmx's `HttpResponseStopPolling`: htmx swaps it in and polls no more."""
    if not stop:
        return render(request, template_name, context)
    return HttpResponseStopPolling(render_to_string(template_name, context, request))


def form_errors(form: Any) -> str:
    """A form's errors as one message for a person: each after its field's label (never the
    field's name in the code), unless the sentence names the field itself."""
    parts: list[str] = []
    for field, errors in form.errors.items():
        known = form.fields.get(field)
        label = "" if field == "__all__" else str(known.label if known and known.label else field)
        label = label.replace("_", " ").strip()
        for error in errors:
            named = not label or label.split(" (")[0].lower() in str(error).lower()
            parts.append(str(error) if named else f"{label[:1].upper()}{label[1:]}: {error}")
    return " ".join(parts)


def error_text(exc: ApplicationError) -> str:
    """A service's refusal for a person: its message, and what its details add to it (the
    details name fields for API clients; a person reads the sentence)."""
    details = exc.details or {}
    extra = [
        str(why)
        for value in details.values()
        if isinstance(value, list)
        for why in value
        if str(why) not in ("Required.",) and str(why) not in exc.message
    ]
    return " ".join([exc.message, *extra])


def posted[F: forms.Form](request: HttpRequest, form_class: type[F]) -> F | None:
    """The POSTed form when it is valid; otherwise None, its errors told as a message."""
    form = form_class(request.POST)
    if form.is_valid():
        return form
    messages.error(request, form_errors(form))
    return None


def tell[T](request: HttpRequest, call: Callable[[], T], ok: Callable[[T], str]) -> T | None:
    """One service call for a page that answers with a redirect: a refusal becomes an error
    message (with its field details) and None, a success the message `ok(result)` and the result."""
    try:
        result = call()
    except ApplicationError as exc:
        messages.error(request, error_text(exc))
        return None
    messages.success(request, ok(result))
    return result


def save_form[T](
    request: HttpRequest,
    form: forms.ModelForm,
    fields: Iterable[str],
    save: Callable[[dict[str, Any]], T],
) -> T | None:
    """An edit page's POST: `save` gets the valid form's `fields` and its note; a refusal goes on
    the form (None). None too when nothing valid was posted."""
    if request.method != "POST" or not form.is_valid():
        return None
    values = {f: form.cleaned_data[f] for f in fields}
    values["note"] = form.cleaned_data.get("note", "")
    for name in getattr(form, "confirmations", ()):  # a person's "yes, I mean it", if asked
        values[name] = bool(form.cleaned_data.get(name))
    try:
        return save(values)
    except ApplicationError as exc:
        form.add_error(None, error_text(exc))
        return None


def person(request: HttpRequest) -> AbstractBaseUser:
    """The signed-in person making the request (views behind `require_perm` have one)."""
    assert isinstance(request.user, AbstractBaseUser)
    return request.user


def page_action(permission: str, back: str) -> Callable[[Callable[..., str]], View]:
    """Makes a POST action of a list page (review.<permission>) of a function that calls one
    service and returns what to tell the person; a refusal is told instead (`tell`). Back to
    the page whose URL name is `back` either way. The view keeps the function's name."""

    def decorate(act: Callable[..., str]) -> View:
        @require_POST
        @require_perm(permission, narrow=True)
        @wraps(act)
        def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            tell(request, lambda: act(request, *args, **kwargs), str)
            return HttpResponseRedirect(reverse(back))

        return view

    return decorate
