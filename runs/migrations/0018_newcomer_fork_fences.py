"""A fork's fences (issue 36): approval rules that belong to one run (`run`), so a fork's writes
of a tool that already happened in the original after the fork point wait for a person instead
of running again. The unique (agent, tool_pattern) holds for the rules of everyone; a run has
one fence per tool. The kernel reads a run's own rules (runs/sql/0018_fork_fences.sql):
ledger_approval_rule takes the run's id and ledger_step_intent passes it (0014's body, that one
call changed). Backwards: 0014's two functions, then the column goes.
"""

import importlib
from pathlib import Path

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
ALTER TABLE runs_approvalrule ADD CONSTRAINT approval_rule_run_fk FOREIGN KEY (run_id)
    REFERENCES runs_run (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED;
"""
FENCE_FK_BACKWARDS = "ALTER TABLE runs_approvalrule DROP CONSTRAINT approval_rule_run_fk;"


class Migration(migrations.Migration):
    dependencies = [("runs", "0016_run_legal_hold_details")]

    operations = [
        migrations.AddField(
            model_name="approvalrule",
            name="run",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="fork_fences",
                to="runs.run",
            ),
        ),
        migrations.RemoveConstraint(
            model_name="approvalrule", name="approval_rule_unique_per_agent_tool"
        ),
        migrations.AddConstraint(
            model_name="approvalrule",
            constraint=models.UniqueConstraint(
                condition=models.Q(run__isnull=True),
                fields=("agent", "tool_pattern"),
                name="approval_rule_unique_per_agent_tool",
                violation_error_message="This agent already has a rule for this tool pattern.",
            ),
        ),
        migrations.AddConstraint(
            model_name="approvalrule",
            constraint=models.UniqueConstraint(
                condition=models.Q(run__isnull=False),
                fields=("run", "tool_pattern"),
                name="approval_rule_fence_once_per_run_tool",
            ),
        ),
        migrations.RunSQL(FENCE_FK, FENCE_FK_BACKWARDS),
        migrations.RunSQL(KERNEL, KERNEL_BACKWARDS),
    ]
