import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_application = get_wsgi_application()

from runs.hotpath import HotPathWSGI  # noqa: E402 (needs the apps loaded)

# the four hot worker calls are answered before Django builds a request (runs/hotpath.py)
application = HotPathWSGI(django_application)
