"""What a web process would otherwise do lazily in its first requests, done when it loads the app.

A fresh process spends about 0.4 s of CPU (here) on its first few requests importing every view
as the URL resolver fills, compiling templates into the cached loader and the validators'
regular expressions, and DRF's renderer and parser classes; later requests cost a tenth of
that. `wsgi.py` and `asgi.py` call `warm_up()` once the app is built, so that work happens before
the first request arrives and not inside it. Under `python -m config.serve` it happens once, in
granian's main process before it forks its workers, and every worker inherits it.

No database: a connection opened in the main process would be shared by its forked workers.
"""

from __future__ import annotations

import asyncio
from pathlib import Path


def warm_up() -> None:
    from django.conf import settings
    from django.core.validators import EmailValidator, URLValidator
    from django.db import connections
    from django.template import TemplateDoesNotExist, engines
    from django.urls import get_resolver
    from rest_framework.settings import api_settings

    get_resolver()._populate()  # type: ignore[attr-defined]  # imports every view and URLconf
    # the validators compile their expressions on first use (the email domain's: 50 ms)
    EmailValidator()("warm-up@example.com")
    URLValidator()("https://example.com/")
    for name in (
        "DEFAULT_RENDERER_CLASSES",
        "DEFAULT_PARSER_CLASSES",
        "DEFAULT_AUTHENTICATION_CLASSES",
        "DEFAULT_PERMISSION_CLASSES",
        "DEFAULT_CONTENT_NEGOTIATION_CLASS",
        "DEFAULT_VERSIONING_CLASS",
        "DEFAULT_SCHEMA_CLASS",
        "EXCEPTION_HANDLER",
    ):
        getattr(api_settings, name)
    engine = engines["django"]
    folders: list[str | Path] = settings.TEMPLATES[0]["DIRS"]  # type: ignore[assignment]
    for folder in map(Path, folders):
        for path in sorted(folder.rglob("*.html")):
            try:
                engine.get_template(str(path.relative_to(folder)))
            except TemplateDoesNotExist:  # pragma: no cover (listed a moment ago)
                continue
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        connections.close_all()  # nothing above should connect; make sure no connection is inherited
    # else: imported inside an event loop (uvicorn --workers N loads the app in each worker's
    # loop), where Django refuses the synchronous close; nothing above connected, so none to close
