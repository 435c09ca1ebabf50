"""A fork's fences (issue 36): `runs_forkfence` (run, tool), keyed on the run like the journal,
holds the tools whose writes the original already made after the fork point and the admin chose
not to run again; a fork's write of such a tool waits for a person, under the one approval rule
marked `is_fork_fence` (never active by itself; made by the first fork that needs it). The kernel reads the fences
(runs/sql/0018_fork_fences.sql): ledger_approval_rule takes the run's id and ledger_step_intent
passes it (0014's body, that one call changed). Backwards: 0014's two functions, then the
table, the rule and the column go.
"""

import importlib
from pathlib import Path
from typing import Any

import django.db.models.deletion
from django.db import migrations, models

SQL = Path(__file__).resolve().parent.parent / "sql"
_function = importlib.import_module("runs.migrations.0014_kernel_sql_factored")._function
_KERNEL_0014 = (SQL / "0014_kernel_sql_factored.sql").read_text()
_INTENT_0014 = _function(_KERNEL_0014, "ledger_step_intent")
_OLD_CALL = "ledger_approval_rule(r.agent, p_name)"
assert _INTENT_0014.count(_OLD_CALL) == 1
INTENT = _INTENT_0014.replace(_OLD_CALL, "ledger_approval_rule(r.agent, p_name, r.id)")

KERNEL = "\n\n".join(
    [
        (SQL / "0018_fork_fences.sql").read_text(),
        INTENT,
        "DROP FUNCTION ledger_approval_rule(text, text);",
    ]
)
KERNEL_BACKWARDS = "\n\n".join(
    [
        _function(_KERNEL_0014, "ledger_approval_rule"),
        _INTENT_0014,
        "DROP FUNCTION ledger_approval_rule(text, text, uuid);",
    ]
)

FENCE_FK = """
ALTER TABLE runs_forkfence ADD CONSTRAINT fork_fence_run_fk FOREIGN KEY (run_id)
    REFERENCES runs_run (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED;
"""
FENCE_FK_BACKWARDS = "ALTER TABLE runs_forkfence DROP CONSTRAINT fork_fence_run_fk;"


def fence_rule_gone(apps: Any, schema_editor: Any) -> None:
    apps.get_model("runs", "ApprovalRule").objects.filter(is_fork_fence=True).delete()
    # the delete's deferred foreign key checks now: a table with pending trigger events cannot
    # be altered (as 0015)
    schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [("runs", "0017_trust_finished_runs")]

    operations = [
        migrations.AddField(
            model_name="approvalrule",
            name="is_fork_fence",
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.AddConstraint(
            model_name="approvalrule",
            constraint=models.UniqueConstraint(
                condition=models.Q(is_fork_fence=True),
                fields=("is_fork_fence",),
                name="approval_rule_one_fork_fence",
            ),
        ),
        migrations.AddConstraint(
            model_name="approvalrule",
            constraint=models.CheckConstraint(
                condition=models.Q(is_fork_fence=False) | models.Q(active=False),
                name="approval_rule_fork_fence_inactive",
            ),
        ),
        # the rule is made by the first fork that holds a write (runs.services.fork_fence_rule)
        migrations.RunPython(migrations.RunPython.noop, fence_rule_gone),
        migrations.CreateModel(
            name="ForkFence",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id",
                        "tool",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("tool", models.CharField(max_length=200)),
                ("created_by", models.CharField(max_length=150)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "run",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="fork_fences",
                        to="runs.run",
                    ),
                ),
            ],
        ),
        migrations.RunSQL(FENCE_FK, FENCE_FK_BACKWARDS),
        migrations.RunSQL(KERNEL, KERNEL_BACKWARDS),
    ]
