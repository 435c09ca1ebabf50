"""Turn a lost database into a clear 503 instead of a 500 with a trace."""

import logging

from django.db import InterfaceError, OperationalError, connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin

from runs.api_errors import error_body

logger = logging.getLogger(__name__)


class DatabaseUnavailableMiddleware(MiddlewareMixin):
    """Sync and async capable (MiddlewareMixin): under ASGI a sync-only middleware would run
    every request, long polls included, in a thread of its own."""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        logger.warning("database unavailable for %s: %s", request.path, exception)
        for conn in connections.all(initialized_only=True):
            conn.close_if_unusable_or_obsolete()
        body = error_body(
            "database_unavailable", "The database is not reachable right now; retry with backoff."
        )
        response = JsonResponse(body, status=503)
        response["Retry-After"] = "1"
        return response
