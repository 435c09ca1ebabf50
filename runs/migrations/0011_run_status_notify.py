"""A run's status change is announced on channel `ledger_run_status` (runs/sql/0007_*.sql)."""

from pathlib import Path

from django.db import migrations

SQL = (Path(__file__).resolve().parent.parent / "sql" / "0011_run_status_notify.sql").read_text()

DROP = """
DROP TRIGGER IF EXISTS runs_run_status_notify ON runs_run;
DROP FUNCTION IF EXISTS runs_run_status_notify();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0010_run_runner"),
    ]

    operations = [migrations.RunSQL(SQL, DROP)]
