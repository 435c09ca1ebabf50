import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_application = get_wsgi_application()

from config.warmup import warm_up  # noqa: E402 (needs the apps loaded)
from runs.hotpath import HotPathWSGI  # noqa: E402

# the hot worker calls (and create, complete, fail) are answered before Django builds a request
# (runs/hotpath.py)
application = HotPathWSGI(django_application)
warm_up()  # before the first request, not in it (under gunicorn --preload: once, before forking)

from config.deployment import settings_missing_log  # noqa: E402

settings_missing_log("web")
