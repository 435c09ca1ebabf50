"""Runs record who runs them: `celery` (the agents' task) or `external` (their own process).

Existing runs that a Celery worker ever leased (a lease_acquired event whose worker is
`celery:<node>`, the name support_agent.tasks.run_agent uses) become `celery`, so the reaper keeps
re-dispatching them; every other existing run is `external`.
"""

from typing import Any

from django.db import migrations, models


def mark_celery_runs(apps: Any, schema_editor: Any) -> None:
    Run = apps.get_model("runs", "Run")
    Event = apps.get_model("runs", "Event")
    leased_by_celery = Event.objects.filter(
        type="lease_acquired", payload__worker__startswith="celery:"
    ).values("run_id")
    Run.objects.filter(pk__in=leased_by_celery).update(runner="celery")


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0009_worker_token_agents_and_scopes"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="runner",
            field=models.CharField(
                choices=[("celery", "Celery"), ("external", "External")],
                db_default="external",
                default="external",
                max_length=10,
            ),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(("runner__in", ["celery", "external"])),
                name="run_runner_valid",
            ),
        ),
        migrations.RunPython(mark_celery_runs, migrations.RunPython.noop),
    ]
