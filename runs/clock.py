"""The one place the journal reads the time, so tests can move it."""

from datetime import datetime

from django.utils import timezone


def now() -> datetime:
    return timezone.now()
