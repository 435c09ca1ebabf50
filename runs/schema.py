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
