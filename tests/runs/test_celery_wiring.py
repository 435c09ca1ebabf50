"""Every periodic task beat would send exists in the worker's registry under that name."""

from django.conf import settings

from config.celery import app


def test_every_beat_schedule_entry_names_a_registered_task() -> None:
    app.loader.import_default_modules()
    missing = {
        entry: spec["task"]
        for entry, spec in settings.CELERY_BEAT_SCHEDULE.items()
        if spec["task"] not in app.tasks
    }
    assert missing == {}


def test_tasks_are_acknowledged_late_and_requeued_when_the_worker_dies() -> None:
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1
