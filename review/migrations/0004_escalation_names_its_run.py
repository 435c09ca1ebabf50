"""Every escalation names its run, and its keys carry run_id (issue 17: distributable by run_id).

A step's escalation gets its step's run; the primary key becomes (id, run_id) in the database
and "once per step" is unique on (step, run). The foreign key to runs_step is gone: runs_step is
partitioned (runs 0012) and its keys carry the partition key.
"""

import django.db.models.deletion
from django.db import migrations, models

RUN_OF_STEP = """
UPDATE review_escalation e SET run_id = s.run_id
FROM runs_step s WHERE e.step_id = s.id AND e.run_id IS NULL;
DELETE FROM review_escalation WHERE run_id IS NULL;
"""

PRIMARY_KEY = """
ALTER TABLE review_escalation DROP CONSTRAINT review_escalation_pkey;
ALTER TABLE review_escalation ADD CONSTRAINT review_escalation_pkey PRIMARY KEY (id, run_id);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("review", "0003_escalation_webhooks"),
        ("runs", "0012_journal_partitioned_by_run_month"),
    ]

    operations = [
        migrations.RemoveConstraint(model_name="escalation", name="escalation_once_per_step"),
        migrations.RemoveConstraint(model_name="escalation", name="escalation_once_per_review_run"),
        migrations.RemoveConstraint(model_name="escalation", name="escalation_has_item"),
        migrations.AlterField(
            model_name="escalation",
            name="step",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="runs.step",
            ),
        ),
        migrations.RunSQL(RUN_OF_STEP, migrations.RunSQL.noop),
        migrations.AlterField(
            model_name="escalation",
            name="run",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="runs.run"
            ),
        ),
        migrations.AddConstraint(
            model_name="escalation",
            constraint=models.UniqueConstraint(
                condition=models.Q(("step__isnull", False)),
                fields=("step", "run"),
                name="escalation_once_per_step",
            ),
        ),
        migrations.AddConstraint(
            model_name="escalation",
            constraint=models.UniqueConstraint(
                condition=models.Q(("step__isnull", True)),
                fields=("run",),
                name="escalation_once_per_review_run",
            ),
        ),
        migrations.RunSQL(PRIMARY_KEY, migrations.RunSQL.noop),
    ]
