"""The Celery app. Tasks are safe to redeliver (the journal makes them so), hence acks_late."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("intentledger")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
