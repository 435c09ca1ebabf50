"""`GET /healthz` and `GET /readyz`, answered ahead of every other middleware.

Orchestrators probe a pod by its own IP address (the `Host` header is that address), over plain
HTTP: behind the host check (ALLOWED_HOSTS), the HTTPS redirect or a login, a probe would get a
400 or a 301 and never its answer. So the first middleware answers these two paths itself, with
no session, no cookie and no setting in the body; every other path goes on as before. The logic is
config.health's; these views only turn it into HTTP.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin

from config import health


def healthz(request: HttpRequest) -> HttpResponse:
    return _no_store(JsonResponse({"alive": True}))


def readyz(request: HttpRequest) -> HttpResponse:
    state = health.readiness()
    return _no_store(JsonResponse(state.as_json(), status=200 if state.ready else 503))


PROBES: dict[str, Callable[[HttpRequest], HttpResponse]] = {"/healthz": healthz, "/readyz": readyz}


def _no_store(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = "no-store"
    return response


class ProbeMiddleware(MiddlewareMixin):
    """Sync and async capable (MiddlewareMixin): it is first under ASGI too."""

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        view = PROBES.get(request.path_info)
        if view is None:
            return None
        if request.method not in ("GET", "HEAD"):
            response = HttpResponse(status=405)
            response["Allow"] = "GET, HEAD"
            return response
        return view(request)
