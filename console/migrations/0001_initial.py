"""The console app at 0.1.0, squashed (its permission `review.run_actions` is made with the
other groups' permissions by review 0001). A database that applied the old chain (`replaces`)
marks this one applied."""

from decimal import Decimal

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("console", "0001_run_actions_permission"),
        ("console", "0002_run_days"),
    ]

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="RunDay",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("day", models.DateField()),
                ("agent", models.CharField(max_length=100)),
                ("status", models.CharField(max_length=20)),
                ("runs", models.PositiveIntegerField()),
                ("tokens", models.PositiveBigIntegerField()),
                (
                    "cost_usd",
                    models.DecimalField(decimal_places=6, default=Decimal("0"), max_digits=18),
                ),
                ("recoveries", models.PositiveBigIntegerField()),
                ("refreshed_at", models.DateTimeField()),
            ],
            options={
                "ordering": ["day", "agent", "status"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("day", "agent", "status"), name="runday_unique"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("runs__gte", 1)), name="runday_has_runs"
                    ),
                ],
            },
        ),
    ]
