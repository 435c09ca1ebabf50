"""Two live worker tokens may not share a name (a revoked one's name may be used again). Live
tokens that already share one keep the oldest's name; the others get " #<id>" appended."""

from django.db import migrations, models

RENAME_DUPLICATES = """
UPDATE runs_workertoken AS t
   SET name = left(t.name, 88) || ' #' || t.id
 WHERE t.revoked_at IS NULL
   AND EXISTS (SELECT 1 FROM runs_workertoken AS o
                WHERE o.name = t.name AND o.revoked_at IS NULL AND o.id < t.id)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0018_newcomer_fork_fences"),
    ]

    operations = [
        migrations.RunSQL(RENAME_DUPLICATES, reverse_sql=migrations.RunSQL.noop),
        migrations.AddConstraint(
            model_name="workertoken",
            constraint=models.UniqueConstraint(
                condition=models.Q(("revoked_at__isnull", True)),
                fields=("name",),
                name="worker_token_active_name_unique",
                violation_error_message="A token of this name is in use; revoke it first or "
                "choose another name.",
            ),
        ),
    ]
