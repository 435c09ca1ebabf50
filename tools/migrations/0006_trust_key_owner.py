"""Who owns a free-form idempotency key (issue 40): the token that made it and the agents that
token was limited to, so another token's replay or read of the key is a 404. Both columns are
null for a journal step's key (its run decides who sees it) and for keys made before this."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0001_initial"),
        ("tools", "0005_mcp_tools_and_marks"),
    ]

    operations = [
        migrations.AddField(
            model_name="idempotencykey",
            name="owner_agents",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="idempotencykey",
            name="owner_token",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="runs.workertoken",
            ),
        ),
        migrations.AddConstraint(
            model_name="idempotencykey",
            constraint=models.CheckConstraint(
                condition=models.Q(owner_agents__isnull=True) | models.Q(owner_token__isnull=False),
                name="idempotency_owner_agents_have_a_token",
            ),
        ),
    ]
