"""Approval requests and approvals keyed by their run, like the journal (issue 17, item 4).

Both tables get `run_id` (and the request `journal_month`), copied from the step and the
request; a request whose step is gone (nothing held it since 0012 dropped the foreign key) is
deleted. Then, as 0012 did for steps (Django keeps `id` as its primary key):

- runs_approvalrequest: primary key (id, run_id); unique (run_id, step_id);
  (step_id, run_id, journal_month) -> runs_step ON DELETE CASCADE, the foreign key 0012 had to
  drop, now with the step's whole key; (run_id, journal_month) -> runs_run (id, journal_month)
- runs_approval: primary key (id, run_id); unique (run_id, request_id, by);
  (request_id, run_id) -> runs_approvalrequest ON DELETE CASCADE; run_id -> runs_run

so a customer can distribute both on Citus by run_id, and the database refuses a request whose
run is not its step's. The kernel's ledger_approval_request writes the new columns
(runs/sql/0015_approvals_keyed_by_run.sql). Backwards: the keys and foreign keys as they were,
0014's ledger_approval_request, then the columns go.
"""

import importlib
from pathlib import Path

import django.db.models.deletion
from django.db import migrations, models

SQL = Path(__file__).resolve().parent.parent / "sql"
KERNEL = (SQL / "0015_approvals_keyed_by_run.sql").read_text()
KERNEL_BACKWARDS = importlib.import_module("runs.migrations.0014_kernel_sql_factored")._function(
    (SQL / "0014_kernel_sql_factored.sql").read_text(), "ledger_approval_request"
)

BACKFILL = """
UPDATE runs_approvalrequest ar SET run_id = s.run_id, journal_month = s.journal_month
FROM runs_step s WHERE s.id = ar.step_id;
DELETE FROM runs_approval a USING runs_approvalrequest ar
WHERE ar.id = a.request_id AND ar.run_id IS NULL;
DELETE FROM runs_approvalrequest WHERE run_id IS NULL;
UPDATE runs_approval a SET run_id = ar.run_id
FROM runs_approvalrequest ar WHERE ar.id = a.request_id;
-- the deletes' deferred foreign key checks now: a table with pending trigger events cannot be
-- altered
SET CONSTRAINTS ALL IMMEDIATE;
"""

KEYS = """
ALTER TABLE runs_approvalrequest DROP CONSTRAINT runs_approvalrequest_pkey,
    ADD CONSTRAINT runs_approvalrequest_pkey PRIMARY KEY (id, run_id);
ALTER TABLE runs_approval DROP CONSTRAINT runs_approval_pkey,
    ADD CONSTRAINT runs_approval_pkey PRIMARY KEY (id, run_id);
ALTER TABLE runs_approvalrequest
    ADD CONSTRAINT approval_request_step_fk FOREIGN KEY (step_id, run_id, journal_month)
        REFERENCES runs_step (id, run_id, journal_month) ON DELETE CASCADE
        DEFERRABLE INITIALLY DEFERRED,
    ADD CONSTRAINT approval_request_run_month_fk FOREIGN KEY (run_id, journal_month)
        REFERENCES runs_run (id, journal_month) DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE runs_approval
    ADD CONSTRAINT approval_request_fk FOREIGN KEY (request_id, run_id)
        REFERENCES runs_approvalrequest (id, run_id) ON DELETE CASCADE
        DEFERRABLE INITIALLY DEFERRED,
    ADD CONSTRAINT approval_run_fk FOREIGN KEY (run_id)
        REFERENCES runs_run (id) DEFERRABLE INITIALLY DEFERRED;
"""

KEYS_BACKWARDS = """
SET CONSTRAINTS ALL IMMEDIATE;
ALTER TABLE runs_approval DROP CONSTRAINT approval_request_fk, DROP CONSTRAINT approval_run_fk;
ALTER TABLE runs_approvalrequest DROP CONSTRAINT approval_request_step_fk,
    DROP CONSTRAINT approval_request_run_month_fk;
ALTER TABLE runs_approval DROP CONSTRAINT runs_approval_pkey,
    ADD CONSTRAINT runs_approval_pkey PRIMARY KEY (id);
ALTER TABLE runs_approvalrequest DROP CONSTRAINT runs_approvalrequest_pkey,
    ADD CONSTRAINT runs_approvalrequest_pkey PRIMARY KEY (id);
"""


def _run(*, null: bool) -> models.ForeignKey:  # type: ignore[type-arg]
    return models.ForeignKey(
        db_constraint=False,
        db_index=False,
        null=null,
        on_delete=django.db.models.deletion.CASCADE,
        related_name="+",
        to="runs.run",
    )


class Migration(migrations.Migration):
    dependencies = [("runs", "0014_kernel_sql_factored")]

    operations = [
        migrations.AddField(model_name="approvalrequest", name="run", field=_run(null=True)),
        migrations.AddField(
            model_name="approvalrequest",
            name="journal_month",
            field=models.DateField(editable=False, null=True),
        ),
        migrations.AddField(model_name="approval", name="run", field=_run(null=True)),
        migrations.RunSQL(BACKFILL, migrations.RunSQL.noop),
        migrations.AlterField(model_name="approvalrequest", name="run", field=_run(null=False)),
        migrations.AlterField(
            model_name="approvalrequest",
            name="journal_month",
            field=models.DateField(editable=False),
        ),
        migrations.AlterField(model_name="approval", name="run", field=_run(null=False)),
        # the single-column keys the composite ones replace
        migrations.AlterField(
            model_name="approval",
            name="request",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="approvals",
                to="runs.approvalrequest",
            ),
        ),
        migrations.AlterField(
            model_name="approvalrequest",
            name="step",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="approval_requests",
                to="runs.step",
            ),
        ),
        migrations.RemoveConstraint(model_name="approval", name="approval_once_per_person"),
        migrations.AddConstraint(
            model_name="approval",
            constraint=models.UniqueConstraint(
                fields=("run", "request", "by"), name="approval_once_per_person"
            ),
        ),
        migrations.AddConstraint(
            model_name="approvalrequest",
            constraint=models.UniqueConstraint(
                fields=("run", "step"), name="approval_request_once_per_step"
            ),
        ),
        migrations.RunSQL(KEYS, KEYS_BACKWARDS),
        migrations.RunSQL(KERNEL, KERNEL_BACKWARDS),
    ]
