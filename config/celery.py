"""The Celery app. Tasks are safe to redeliver (the journal makes them so), hence acks_late.

With LOG_FORMAT=json the worker and beat write what the web app writes: one JSON object a line
(settings.LOGGING, at the level `-l` names), Python's warnings included, and no banner. Celery
configures its own text logging only where nobody answers its `setup_logging` signal, so the
worker and beat answer it in that mode, and only in that mode.
"""

import logging
import logging.config
import os
from typing import Any

from celery import Celery, signals
from celery.apps import worker as celery_worker
from celery.apps.beat import Beat
from celery.apps.worker import Worker
from kombu.utils.objects import cached_property

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def logs_are_json() -> bool:
    from django.conf import settings

    return bool(settings.LOG_FORMAT == "json")


def logging_as_the_web_app(loglevel: int | str | None = None, **kwargs: Any) -> None:
    """settings.LOGGING (JSON lines), at the worker's or beat's own level."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)
    logging.captureWarnings(True)


def _json_logging_take_over() -> bool:
    if not logs_are_json():
        return False
    logging_as_the_web_app()  # now: the worker warns (root privileges) before it sets up logging
    signals.setup_logging.connect(logging_as_the_web_app, weak=False, dispatch_uid="ledger-json")
    return True


WORKER_SHUTDOWN_HANDLERS = (
    "install_worker_term_handler",
    "install_worker_term_hard_handler",
    "install_worker_int_handler",
)


class LedgerWorker(Worker):
    def on_before_init(self, quiet: bool = False, **kwargs: Any) -> None:
        self.json_logs = _json_logging_take_over()
        super().on_before_init(quiet=self.json_logs or quiet, **kwargs)

    def install_platform_tweaks(self, worker: Any) -> None:
        """In JSON mode the shutdown is a log line, not Celery's raw text on stdout."""
        super().install_platform_tweaks(worker)
        if self.json_logs:
            # Celery's own SIGTERM, SIGQUIT and SIGINT handlers, without their text on stdout
            for handler in WORKER_SHUTDOWN_HANDLERS:
                getattr(celery_worker, handler)(worker, verbose=False)
            signals.worker_shutting_down.connect(_shutdown_logged, weak=False)


def _shutdown_logged(sig: str = "", how: str = "", **kwargs: Any) -> None:
    logging.getLogger("celery.worker").warning("worker: %s shutdown (%s)", how, sig)


class LedgerBeat(Beat):
    def __init__(self, **kwargs: Any) -> None:
        kwargs["quiet"] = _json_logging_take_over() or kwargs.get("quiet", False)
        super().__init__(**kwargs)


class LedgerCelery(Celery):
    """Celery whose `worker` and `beat` commands log as the web app does (see above)."""

    @cached_property
    def Worker(self) -> Any:
        return self.subclass_with_self(LedgerWorker)

    @cached_property
    def Beat(self) -> Any:
        return self.subclass_with_self(LedgerBeat)


app = LedgerCelery("intentledger")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
