"""One webhook per URL (issue 36.9): the same URL twice posted every escalation twice.

Duplicates made before the constraint are folded into the oldest webhook of their URL (their
undelivered posts are dropped with them: the oldest one posts the same escalations).
"""

from typing import Any

from django.db import migrations, models


def fold_duplicates(apps: Any, schema_editor: Any) -> None:
    webhook = apps.get_model("review", "EscalationWebhook")
    seen: set[str] = set()
    for row in webhook.objects.order_by("created_at", "pk"):
        if row.url in seen:
            row.delete()
        else:
            seen.add(row.url)


class Migration(migrations.Migration):
    dependencies = [("review", "0005_audit_admin_permission")]

    operations = [
        migrations.RunPython(fold_duplicates, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="escalationwebhook",
            constraint=models.UniqueConstraint(fields=("url",), name="webhook_url_unique"),
        ),
    ]
