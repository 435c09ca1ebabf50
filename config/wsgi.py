"""The WSGI app every server serves (config/serve.py's granian; runserver): Django behind the hot
path's door (runs/hotpath.py) and the request line's limit."""

import os
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_application = get_wsgi_application()

from django.conf import settings  # noqa: E402

from config.warmup import warm_up  # noqa: E402 (needs the apps loaded)
from runs.hotpath import HotPathWSGI  # noqa: E402

TOO_LONG_PAGE = (
    b"<html><head><title>414 Request-URI Too Long</title></head><body>"
    b"<h1>414 Request-URI Too Long</h1><p>The request line is too long.</p></body></html>"
)


class RequestLineLimit:
    """Refuses a request line over LEDGER_MAX_REQUEST_LINE bytes (4,094: gunicorn's limit, which
    the contract has documented since) with a 414 HTML page, before anything parses it. granian
    has no limit of its own on the line but its whole head's (WEB_HTTP1_BUFFER_SIZE, 431)."""

    def __init__(self, app: Callable[..., Iterable[bytes]], limit: int) -> None:
        self.app = app
        self.limit = limit

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if self._line_length(environ) > self.limit:
            start_response(
                "414 Request-URI Too Long",
                [("Content-Type", "text/html"), ("Content-Length", str(len(TOO_LONG_PAGE)))],
            )
            return [TOO_LONG_PAGE]
        return self.app(environ, start_response)

    @staticmethod
    def _line_length(environ: dict[str, Any]) -> int:
        """The request line's length as the client sent it, rebuilt from the environ (the path
        quoted again: PEP 3333 hands it over decoded)."""
        path = quote(environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""), safe="/;=,@:")
        query = environ.get("QUERY_STRING", "")
        method = environ.get("REQUEST_METHOD", "")
        protocol = environ.get("SERVER_PROTOCOL", "")
        return len(method) + 1 + len(path) + (1 + len(query) if query else 0) + 1 + len(protocol)


# the hot worker calls (and create, complete, fail) are answered before Django builds a request
# (runs/hotpath.py)
application = RequestLineLimit(HotPathWSGI(django_application), settings.LEDGER_MAX_REQUEST_LINE)
warm_up()  # before the first request, not in it (under config.serve: once, before the fork)

from config.deployment import settings_missing_log  # noqa: E402

settings_missing_log("web")
