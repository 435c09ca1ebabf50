"""`LOG_FORMAT=json`: one JSON object per log line, with `run_id` and `step_index` when known.

The hot worker calls put their run and step into runs.observe.log_context; the console's
middleware does the same for every other request under /api/v1/runs/<id>/ and the dashboard's
run pages, so a line written anywhere while such a request runs carries them.
"""

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.http import HttpRequest, HttpResponse

from runs.observe import log_context

_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        body.update(log_context.get() or {})
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                body[key] = value
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str, ensure_ascii=False)


class AccessLogFields(logging.Filter):
    """granian's access lines (logger `granian.access`) carry the request as fields of their own:
    granian passes them as the record's arguments (a dict), which JsonFormatter leaves out."""

    FIELDS = {
        "method": "method",
        "path": "path",
        "query_string": "query_string",
        "status": "status",
        "dt_ms": "duration_ms",
        "addr": "client",
        "protocol": "protocol",
    }

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, dict):
            for name, field in self.FIELDS.items():
                if name in record.args:
                    setattr(record, field, record.args[name])
        return True


class RunLogContextMiddleware:
    """Names the run (and step) of the request's URL in the log context."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        token = log_context.set(None)  # threads serve many requests: start each one clean
        try:
            return self.get_response(request)
        finally:
            log_context.reset(token)

    def process_view(
        self, request: HttpRequest, view: Any, args: Any, kwargs: dict[str, Any]
    ) -> None:
        run_id = kwargs.get("run_id")
        if run_id is not None:
            index = kwargs.get("index")
            log_context.set({"run_id": str(run_id), "step_index": index})
