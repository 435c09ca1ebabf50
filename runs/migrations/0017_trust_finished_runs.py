"""A finished run answers run_finished whatever the epoch, and an outcome in flight when the run
was cancelled is still recorded (runs/sql/0017_trust_finished_runs.sql): cancel now moves the
epoch (issue 40). Backwards: 0014's ledger_run_locked and ledger_step_outcome."""

import importlib
from pathlib import Path

from django.db import migrations

SQL = Path(__file__).resolve().parent.parent / "sql"
_function = importlib.import_module("runs.migrations.0014_kernel_sql_factored")._function
_FACTORED = (SQL / "0014_kernel_sql_factored.sql").read_text()
BACKWARDS = "\n\n".join(
    _function(_FACTORED, name) for name in ("ledger_run_locked", "ledger_step_outcome")
)


class Migration(migrations.Migration):
    dependencies = [("runs", "0016_run_legal_hold_details")]

    operations = [
        migrations.RunSQL((SQL / "0017_trust_finished_runs.sql").read_text(), BACKWARDS),
    ]
