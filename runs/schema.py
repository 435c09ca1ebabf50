"""OpenAPI description of the worker token scheme (drf-spectacular finds it on import)."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class WorkerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "runs.authentication.WorkerTokenAuthentication"
    name = "workerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A worker token from `manage.py create_worker_token NAME`.",
        }


# Refused in front of Django (config.wsgi.RequestLineLimit), so no view can declare it
REQUEST_LINE_TOO_LONG = {
    "description": (
        "The request line (method, path and query string) is longer than the server accepts "
        "(LEDGER_MAX_REQUEST_LINE, default 4,094 bytes). An HTML page answered before Django "
        "sees the request, not the JSON error envelope; shorten the query string."
    ),
    "content": {"text/html": {"schema": {"type": "string"}}},
}
OPERATION_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def request_line_too_long(
    result: dict[str, Any], generator: Any, request: Any, public: Any
) -> dict[str, Any]:
    """Adds the 414 of a request line too long to every operation (a drf-spectacular postprocessing hook): any of
    them can be refused that way, and a client, like the fuzzer, should find the answer in the
    contract rather than meet it as an undocumented status."""
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method in OPERATION_METHODS:
                operation.setdefault("responses", {}).setdefault("414", REQUEST_LINE_TOO_LONG)
    return result
