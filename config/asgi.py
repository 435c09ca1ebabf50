"""The ASGI app: what serves `GET /api/v1/runs/{id}/?wait=N` long polls without a thread each.

Every middleware must be async-capable here, or Django would run each request (and so each
waiter) in a thread of its own: LEDGER_ASGI=1 leaves out WhiteNoise (sync only; static files
are served by the WSGI app, config.serve).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ["LEDGER_ASGI"] = "1"
application = get_asgi_application()

from config.warmup import warm_up  # noqa: E402 (needs the apps loaded)

warm_up()  # before the first request, not in it
