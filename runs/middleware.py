"""Turn a lost database into a clear 503 instead of a 500 with a trace."""

from collections.abc import Callable

from django.db import InterfaceError, OperationalError, connections
from django.http import HttpRequest, HttpResponse, JsonResponse


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        for conn in connections.all(initialized_only=True):
            conn.close_if_unusable_or_obsolete()
        body = {
            "error": {
                "code": "database_unavailable",
                "message": "The database is not reachable right now; retry with backoff.",
                "details": {},
            }
        }
        response = JsonResponse(body, status=503)
        response["Retry-After"] = "1"
        return response
