"""The journal kernel: the hot worker calls as SQL functions (runs/sql/0003_journal_kernel.sql)."""

from pathlib import Path

from django.db import migrations

KERNEL = (Path(__file__).resolve().parent.parent / "sql" / "0003_journal_kernel.sql").read_text()

DROP = """
DROP FUNCTION IF EXISTS ledger_lease(uuid, text, text, integer, timestamptz, text, text);
DROP FUNCTION IF EXISTS ledger_heartbeat(uuid, bigint, timestamptz);
DROP FUNCTION IF EXISTS ledger_step_outcome(uuid, bigint, integer, boolean, text, bigint, bigint,
    numeric, timestamptz, text, text, text);
DROP FUNCTION IF EXISTS ledger_step_intent(uuid, bigint, integer, text, text, text, text, text,
    text, text, timestamptz, text, text, text, text, boolean, boolean, text, bigint, bigint,
    numeric, text);
DROP FUNCTION IF EXISTS ledger_run_counters_save(runs_run);
DROP FUNCTION IF EXISTS ledger_outcome_apply(runs_run, boolean, bigint, bigint, numeric,
    timestamptz, text, text, text, boolean);
DROP FUNCTION IF EXISTS ledger_answer_fill(ledger_step_answer, runs_step, runs_run, boolean, boolean);
DROP TYPE IF EXISTS ledger_step_answer;
DROP FUNCTION IF EXISTS ledger_status_refusal(runs_run);
DROP FUNCTION IF EXISTS ledger_exceeded_limit(runs_run, timestamptz, boolean);
DROP FUNCTION IF EXISTS ledger_event_append(uuid, integer, text, text, text, text, text,
    timestamptz);
DROP FUNCTION IF EXISTS ledger_money(numeric);
DROP FUNCTION IF EXISTS ledger_iso(timestamptz);
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0002_event_append_only_and_default_policy")]

    operations = [migrations.RunSQL(KERNEL, DROP)]
