"""Sign-in through the identity provider (start, callback). The people page is the dashboard's
(dashboard/views/people.py).

The start is a GET (a link on /login/): the browser follows its redirect to the provider. A POST
form would not do: browsers apply the page's CSP `form-action 'self'` to a form's redirects too.

Every failed callback ends on a page that says what went wrong, with no session: the session
(and its sign-in state) is flushed, a signed-in user signed out, and an audit entry written.
"""

import logging
from typing import Any

import jwt
import requests
from django.contrib import auth
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.text import capfirst
from django.views.decorators.http import require_GET
from mozilla_django_oidc.views import OIDCAuthenticationRequestView

from sso import services
from sso.backend import LedgerOIDCBackend, TokenRejected, library_settings
from sso.conf import ProviderUnreachable, SsoSettings, discover, local_login_enabled, sso_settings

log = logging.getLogger(__name__)

SESSION_BACKEND = "teams.backends.TeamRoleBackend"


def _conf_or_404() -> SsoSettings:
    conf = sso_settings()
    if conf is None:
        raise Http404("Single sign-on is not configured.")
    return conf


def _client_ip(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR") or "")


# what a person can do when the provider, not they, is the trouble
TRY_AGAIN = (
    "Try again in a few minutes; if it keeps happening, tell your administrator "
    "(the server's log says what failed)."
)


def failed(
    request: HttpRequest,
    conf: SsoSettings,
    reason: str,
    message: str,
    status: int,
    *,
    detail: str = "",
) -> HttpResponse:
    """The sign-in failed: no session (a signed-in user is signed out), an audit entry, a page.

    `message` is for the person at the browser; `detail` (a library's own words: a URL, a
    socket error) goes to the log and the audit entry, never to the page."""
    request.session.flush()
    request.user = AnonymousUser()
    services.sso_failure_record(
        provider=conf.provider_name,
        reason=reason,
        message=message,
        ip=_client_ip(request),
        detail=detail,
    )
    log.warning("sso sign-in failed (%s): %s%s", reason, message, f" [{detail}]" if detail else "")
    context = {
        "provider_name": conf.provider_name,
        "reason": reason,
        "message": message,
        "local_login": local_login_enabled(),
    }
    return render(request, "sso/error.html", context, status=status)


class StartView(OIDCAuthenticationRequestView):
    """mozilla-django-oidc's request view (state, nonce, PKCE S256 kept in the session), with the
    endpoints from discovery, read when the sign-in starts (a provider that is down says so here,
    before the browser is sent to it)."""

    def __init__(self, **kwargs: Any) -> None:
        super(OIDCAuthenticationRequestView, self).__init__(**kwargs)
        self.values: dict[str, Any] = {}

    def get_settings(self, attr: str, *args: Any) -> Any:  # type: ignore[override]
        if attr in self.values:
            return self.values[attr]
        return super().get_settings(attr, *args)

    def get(self, request: HttpRequest) -> HttpResponse:
        conf = _conf_or_404()
        try:
            provider = discover(conf)
        except ProviderUnreachable as exc:
            return failed(
                request,
                conf,
                "provider_unreachable",
                f"{capfirst(conf.provider_name)} could not be reached, so the sign-in could "
                "not start. " + TRY_AGAIN,
                502,
                detail=str(exc),
            )
        self.values = library_settings(conf, provider)
        self.OIDC_OP_AUTH_ENDPOINT = provider.authorization_endpoint
        self.OIDC_RP_CLIENT_ID = conf.client_id
        return super().get(request)


@require_GET
def callback(request: HttpRequest) -> HttpResponse:
    """Where the provider sends the browser back (the redirect URI to register)."""
    conf = _conf_or_404()
    states: dict[str, Any] = request.session.get("oidc_states") or {}
    state = request.GET.get("state", "")
    started = states.pop(state, None) if state else None
    if started is not None:  # a state is used once, whatever happens next
        request.session["oidc_states"] = states
        request.session.save()
    if request.GET.get("error"):
        error = request.GET.get("error", "")
        description = request.GET.get("error_description", "")
        return failed(
            request,
            conf,
            "provider_error",
            f"{conf.provider_name} answered with an error: {error}"
            + (f" ({description})" if description else "")
            + ".",
            400,
        )
    if not state:
        return failed(
            request, conf, "missing_state", "The provider's answer carries no state.", 400
        )
    if started is None:
        return failed(
            request,
            conf,
            "unknown_state",
            "The provider's answer does not belong to a sign-in started in this browser "
            "(its state is unknown or was used already).",
            400,
        )
    if not request.GET.get("code"):
        return failed(request, conf, "missing_code", "The provider's answer carries no code.", 400)
    try:
        provider = discover(conf)
        backend = LedgerOIDCBackend(conf, provider)
        user = backend.authenticate(
            request, nonce=started.get("nonce"), code_verifier=started.get("code_verifier")
        )
    except services.SsoRefused as exc:
        return refused(request, conf, exc)
    except ProviderUnreachable as exc:
        return failed(
            request,
            conf,
            "provider_unreachable",
            f"{capfirst(conf.provider_name)} could not be reached to finish the sign-in. "
            + TRY_AGAIN,
            502,
            detail=str(exc),
        )
    except requests.HTTPError as exc:
        answer = exc.response.text[:300] if exc.response is not None else str(exc)
        if exc.response is None or exc.response.url != provider.token_endpoint:
            # the JWKS or userinfo endpoint answered with an error
            return failed(
                request,
                conf,
                "provider_error",
                f"{capfirst(conf.provider_name)} answered with an error while finishing the "
                "sign-in. " + TRY_AGAIN,
                502,
                detail=str(exc),
            )
        return failed(
            request,
            conf,
            "code_refused",
            f"{conf.provider_name} refused the sign-in code ({answer}). A code works once: "
            "a replayed or stale answer is refused.",
            400,
        )
    except (requests.ConnectionError, requests.Timeout) as exc:
        return failed(
            request,
            conf,
            "provider_unreachable",
            f"{capfirst(conf.provider_name)} stopped answering during the sign-in. " + TRY_AGAIN,
            502,
            detail=str(exc),
        )
    except requests.RequestException as exc:
        return failed(
            request,
            conf,
            "provider_error",
            f"{capfirst(conf.provider_name)} could not finish the sign-in. " + TRY_AGAIN,
            502,
            detail=str(exc),
        )
    except TokenRejected as exc:
        return failed(request, conf, "token_rejected", str(exc), 400)
    except (SuspiciousOperation, jwt.PyJWTError) as exc:
        # the library's own refusals: a nonce that does not match, no key in the JWKS
        return failed(request, conf, "token_rejected", f"The ID token was refused: {exc}", 400)
    if user is None:
        return failed(request, conf, "token_rejected", "The provider's answer was refused.", 400)
    return _signed_in(request, conf, backend.sign_in)


def refused(request: HttpRequest, conf: SsoSettings, exc: services.SsoRefused) -> HttpResponse:
    """The provider vouched for the person; the dashboard refuses them (audited already)."""
    request.session.flush()
    request.user = AnonymousUser()
    context = {
        "provider_name": conf.provider_name,
        "reason": exc.reason,
        "message": exc.message,
        "claim": conf.roles_claim,
        "claim_values": exc.claim_values[:20],
    }
    return render(request, "sso/refused.html", context, status=403)


def _signed_in(request: HttpRequest, conf: SsoSettings, sign_in: Any) -> HttpResponse:
    next_url = request.session.get("oidc_login_next") or "/"
    auth.login(request, sign_in.user, backend=SESSION_BACKEND)
    return HttpResponseRedirect(next_url)
