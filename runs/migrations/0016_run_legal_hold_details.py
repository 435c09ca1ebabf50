"""Who put a run on legal hold, when and why (an admin, from the run's page or
`manage.py legal_hold`), only while it is on hold; and a partial index for the runs list's
"on legal hold" filter, built CONCURRENTLY so a big runs table keeps taking writes (as 0013)."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("runs", "0015_approvals_keyed_by_run")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="legal_hold_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="legal_hold_by",
            field=models.CharField(blank=True, db_default="", default="", max_length=150),
        ),
        migrations.AddField(
            model_name="run",
            name="legal_hold_note",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(("legal_hold", True))
                | models.Q(
                    ("legal_hold_at__isnull", True), ("legal_hold_by", ""), ("legal_hold_note", "")
                ),
                name="run_legal_hold_details_only_on_hold",
            ),
        ),
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                condition=models.Q(("legal_hold", True)),
                fields=["-created_at"],
                name="run_legal_hold_idx",
            ),
        ),
    ]
