"""The journal kernel with each rule written once (issue 18): the hot calls' prologue (lock the
run, not_found, stale_epoch, the status refusal) in ledger_run_locked, stopping a run at a limit
in ledger_run_budget_stop, the approval rules of a new write intent in ledger_approval_rule and
ledger_approval_request. Same signatures and answers: replaces ledger_step_intent,
ledger_step_outcome, ledger_lease, ledger_outcome_apply (0012) and ledger_heartbeat (0003)
(runs/sql/0014_kernel_sql_factored.sql).

Backwards: 0012's kernel functions and 0003's ledger_heartbeat as they were, then the helpers
are dropped.
"""

from pathlib import Path

from django.db import migrations

SQL = Path(__file__).resolve().parent.parent / "sql"
FACTORED = (SQL / "0014_kernel_sql_factored.sql").read_text()


def _function(text: str, name: str) -> str:
    """One CREATE OR REPLACE FUNCTION statement of a kernel file, up to its closing `$$;`."""
    start = text.index(f"CREATE OR REPLACE FUNCTION {name}(")
    body = text.index("$$", start)
    return text[start : text.index("$$;", body + 2) + 3]


_KERNEL_0012 = (SQL / "0012_journal_partitioned_by_run_month.sql").read_text()
BACKWARDS = "\n\n".join(
    [
        *(
            _function(_KERNEL_0012, name)
            for name in (
                "ledger_outcome_apply",
                "ledger_step_intent",
                "ledger_step_outcome",
                "ledger_lease",
            )
        ),
        _function((SQL / "0003_journal_kernel.sql").read_text(), "ledger_heartbeat"),
        "DROP FUNCTION ledger_run_locked(uuid, bigint, boolean);",
        "DROP FUNCTION ledger_run_budget_stop(runs_run, text, timestamptz, text, text);",
        "DROP FUNCTION ledger_approval_rule(text, text);",
        "DROP FUNCTION ledger_approval_request("
        "runs_run, runs_step, runs_approvalrule, timestamptz, text, text);",
    ]
)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0013_review_desk_indexes"),
    ]

    operations = [
        migrations.RunSQL(FACTORED, BACKWARDS),
    ]
