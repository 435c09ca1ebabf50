"""Steps and events partitioned by the month their run was created in (issue 17, item 4).

runs_run gets `journal_month` (the first day, UTC, of the month of its created_at); runs_step and
runs_event are re-made as PARTITION BY RANGE (journal_month) tables, one partition a month and a
DEFAULT partition (`_keep`) for the rows of runs retention keeps back when it drops their month,
and every existing row is copied into them. Their keys carry run_id (a customer can distribute
them on Citus by run_id) and the partition key:

- runs_step:  primary key (id, run_id, journal_month); unique (run_id, index, journal_month)
- runs_event: primary key (id, run_id, journal_month); unique (run_id, seq, journal_month)
- both: foreign key (run_id, journal_month) -> runs_run (id, journal_month), so a run's rows all
  carry its month and the uniques hold per run.

The foreign keys from runs_approvalrequest and review_escalation to runs_step(id) are dropped
(a partitioned table's unique keys must include its partition key). The journal kernel learns the
month (runs/sql/0012_journal_partitioned_by_run_month.sql). Not reversible: going back would mean
copying every row again into unpartitioned tables.
"""

from pathlib import Path

import django.db.models.deletion
from django.db import migrations, models

import runs.models

SQL = Path(__file__).resolve().parent.parent / "sql"
KERNEL = (SQL / "0012_journal_partitioned_by_run_month.sql").read_text()

RUN_MONTH = """
ALTER TABLE runs_run ADD COLUMN journal_month date;
UPDATE runs_run SET journal_month = date_trunc('month', created_at AT TIME ZONE 'UTC')::date;
ALTER TABLE runs_run
    ALTER COLUMN journal_month SET NOT NULL,
    ALTER COLUMN journal_month SET DEFAULT (date_trunc('month', now() AT TIME ZONE 'UTC'))::date;
ALTER TABLE runs_run ADD CONSTRAINT run_id_journal_month_unique UNIQUE (id, journal_month);
"""

CONVERT = """
-- a function whose argument is the old runs_step row type (0003); re-made by the kernel file
DROP FUNCTION ledger_answer_fill(ledger_step_answer, runs_step, runs_run, boolean, boolean);

ALTER TABLE runs_step RENAME TO runs_step_unpartitioned;
ALTER TABLE runs_event RENAME TO runs_event_unpartitioned;
CREATE TABLE runs_step (
    LIKE runs_step_unpartitioned INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS,
    journal_month date NOT NULL
) PARTITION BY RANGE (journal_month);
CREATE TABLE runs_event (
    LIKE runs_event_unpartitioned INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS,
    journal_month date NOT NULL
) PARTITION BY RANGE (journal_month);
CREATE TABLE runs_step_keep PARTITION OF runs_step DEFAULT;
CREATE TABLE runs_event_keep PARTITION OF runs_event DEFAULT;
"""

COPY = """
SELECT ledger_journal_partitions_ensure(
    LEAST(COALESCE((SELECT min(journal_month) FROM runs_run), now()::date), now()::date),
    (now() + interval '3 months')::date);

INSERT INTO runs_step
SELECT o.*, r.journal_month FROM runs_step_unpartitioned o JOIN runs_run r ON r.id = o.run_id;
INSERT INTO runs_event
SELECT o.*, r.journal_month FROM runs_event_unpartitioned o JOIN runs_run r ON r.id = o.run_id;
SELECT setval(pg_get_serial_sequence('runs_step', 'id'), COALESCE(max(id), 0) + 1, false)
FROM runs_step;
SELECT setval(pg_get_serial_sequence('runs_event', 'id'), COALESCE(max(id), 0) + 1, false)
FROM runs_event;

-- the old tables' plain indexes, re-made on the partitioned ones under the same names; not the
-- single-column run_id ones (the unique keys below lead with run_id)
DO $$
DECLARE
    d record;
    defs text[] := '{}';
    x text;
BEGIN
    FOR d IN
        SELECT pg_get_indexdef(i.indexrelid) AS def FROM pg_index i
        JOIN pg_class c ON c.oid = i.indrelid
        WHERE c.relname IN ('runs_step_unpartitioned', 'runs_event_unpartitioned')
          AND NOT i.indisunique
          AND NOT (i.indnatts = 1 AND i.indpred IS NULL AND EXISTS (
              SELECT 1 FROM pg_attribute a
              WHERE a.attrelid = i.indrelid AND a.attnum = i.indkey[0] AND a.attname = 'run_id'))
    LOOP
        defs := defs || replace(d.def, '_unpartitioned USING', ' USING');
    END LOOP;
    -- CASCADE: the foreign keys other tables had to runs_step(id) (review_escalation's too)
    DROP TABLE runs_step_unpartitioned CASCADE;
    DROP TABLE runs_event_unpartitioned CASCADE;
    FOREACH x IN ARRAY defs LOOP
        EXECUTE x;
    END LOOP;
END
$$;

ALTER TABLE runs_step ADD CONSTRAINT runs_step_pkey PRIMARY KEY (id, run_id, journal_month);
ALTER TABLE runs_step ADD CONSTRAINT step_index_unique_per_run
    UNIQUE (run_id, "index", journal_month);
ALTER TABLE runs_step ADD CONSTRAINT step_run_month_fk FOREIGN KEY (run_id, journal_month)
    REFERENCES runs_run (id, journal_month) DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE runs_step ADD CONSTRAINT step_claimed_by_fk FOREIGN KEY (claimed_by_id)
    REFERENCES auth_user (id) DEFERRABLE INITIALLY DEFERRED;

ALTER TABLE runs_event ADD CONSTRAINT runs_event_pkey PRIMARY KEY (id, run_id, journal_month);
ALTER TABLE runs_event ADD CONSTRAINT event_seq_unique_per_run
    UNIQUE (run_id, seq, journal_month);
ALTER TABLE runs_event ADD CONSTRAINT event_run_month_fk FOREIGN KEY (run_id, journal_month)
    REFERENCES runs_run (id, journal_month) DEFERRABLE INITIALLY DEFERRED;

CREATE TRIGGER runs_event_append_only
    BEFORE UPDATE OR DELETE ON runs_event
    FOR EACH ROW EXECUTE FUNCTION runs_event_append_only();
CREATE TRIGGER runs_event_continues_chain
    BEFORE INSERT ON runs_event
    FOR EACH ROW EXECUTE FUNCTION runs_event_continues_chain();
ANALYZE runs_step;
ANALYZE runs_event;
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0011_run_status_notify")]

    operations = [
        # the foreign key from approval requests to runs_step(id) goes first
        migrations.AlterField(
            model_name="approvalrequest",
            name="step",
            field=models.OneToOneField(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="approval_request",
                to="runs.step",
            ),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(RUN_MONTH),
                migrations.RunSQL(CONVERT),
                migrations.RunSQL(KERNEL),
                migrations.RunSQL(COPY),
            ],
            state_operations=[
                migrations.AddField(
                    model_name="run",
                    name="journal_month",
                    field=models.DateField(default=runs.models.journal_month_now, editable=False),
                ),
                migrations.AddField(
                    model_name="step",
                    name="journal_month",
                    field=models.DateField(default=None, editable=False),
                    preserve_default=False,
                ),
                migrations.AddField(
                    model_name="event",
                    name="journal_month",
                    field=models.DateField(default=None, editable=False),
                    preserve_default=False,
                ),
                migrations.AlterField(
                    model_name="step",
                    name="run",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="steps",
                        to="runs.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="event",
                    name="run",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="events",
                        to="runs.run",
                    ),
                ),
                migrations.RemoveConstraint(model_name="step", name="step_index_unique_per_run"),
                migrations.AddConstraint(
                    model_name="step",
                    constraint=models.UniqueConstraint(
                        fields=("run", "index", "journal_month"), name="step_index_unique_per_run"
                    ),
                ),
                migrations.RemoveConstraint(model_name="event", name="event_seq_unique_per_run"),
                migrations.AddConstraint(
                    model_name="event",
                    constraint=models.UniqueConstraint(
                        fields=("run", "seq", "journal_month"), name="event_seq_unique_per_run"
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="run",
            name="legal_hold",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["journal_month"], name="run_journal_month_idx"),
        ),
    ]
