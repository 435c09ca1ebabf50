from django.db import migrations, models


def cursor_row(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("traces", "TraceCursor").objects.get_or_create(id=1)


class Migration(migrations.Migration):
    initial = True

    dependencies = [("runs", "0004_trace_context")]

    operations = [
        migrations.CreateModel(
            name="TraceCursor",
            fields=[
                (
                    "id",
                    models.PositiveSmallIntegerField(default=1, primary_key=True, serialize=False),
                ),
                ("event_xact", models.BigIntegerField(default=0)),
                ("event_id", models.BigIntegerField(default=0)),
                ("spans_exported", models.BigIntegerField(default=0)),
                ("batches_exported", models.BigIntegerField(default=0)),
                ("exported_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("id", 1)), name="trace_cursor_one_row"
                    )
                ]
            },
        ),
        migrations.RunPython(cursor_row, migrations.RunPython.noop),
    ]
