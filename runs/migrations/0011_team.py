"""Every run and every row of a run carries its team (issue 47, docs/teams.md); what existed
before teams is filed in `default` (a constant DEFAULT on ADD COLUMN: PostgreSQL rewrites no row,
so the append-only event table sees no UPDATE). Names, agents' policies, external ids and the
forks' fence rule are unique per team now.

A row of a run has its run's team, held by the database: the journal's composite keys to the
run, (run_id, journal_month), take the team in too, so a step, event or approval request filed
in another team than its run's cannot commit (the other rows of a run are checked by the fill
trigger, teams/sql/boundary.sql).
"""

import django.db.models.deletion
from django.db import migrations, models

import teams.fields

COMPOSITE_KEYS = """
ALTER TABLE runs_run ADD CONSTRAINT run_id_month_team_unique UNIQUE (id, journal_month, team_id);
ALTER TABLE runs_step DROP CONSTRAINT step_run_month_fk;
ALTER TABLE runs_step ADD CONSTRAINT step_run_month_team_fk FOREIGN KEY (run_id, journal_month, team_id)
    REFERENCES runs_run (id, journal_month, team_id) DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE runs_event DROP CONSTRAINT event_run_month_fk;
ALTER TABLE runs_event ADD CONSTRAINT event_run_month_team_fk FOREIGN KEY (run_id, journal_month, team_id)
    REFERENCES runs_run (id, journal_month, team_id) DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE runs_approvalrequest DROP CONSTRAINT approval_request_run_month_fk;
ALTER TABLE runs_approvalrequest ADD CONSTRAINT approval_request_run_month_team_fk
    FOREIGN KEY (run_id, journal_month, team_id)
    REFERENCES runs_run (id, journal_month, team_id) DEFERRABLE INITIALLY DEFERRED;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0010_plural_names"),
        ("teams", "0002_default_team"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="approvalrule",
            name="approval_rule_unique_per_agent_tool",
        ),
        migrations.RemoveConstraint(
            model_name="approvalrule",
            name="approval_rule_one_fork_fence",
        ),
        migrations.RemoveConstraint(
            model_name="budgetpolicy",
            name="one_default_policy",
        ),
        migrations.RemoveConstraint(
            model_name="run",
            name="run_external_id_unique_per_agent",
        ),
        migrations.RemoveConstraint(
            model_name="workertoken",
            name="worker_token_active_name_unique",
        ),
        migrations.AddField(
            model_name="approval",
            name="team",
            field=teams.fields.TeamField(
                blank=True,
                db_constraint=False,
                db_index=False,
                default=teams.fields.default_team_id,
                editable=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="teams.team",
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="approvalrequest",
            name="team",
            field=teams.fields.TeamField(
                blank=True,
                db_constraint=False,
                db_index=False,
                default=teams.fields.default_team_id,
                editable=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="teams.team",
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="approvalrule",
            name="team",
            field=teams.fields.TeamField(
                blank=True,
                default=teams.fields.default_team_id,
                editable=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="teams.team",
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="budgetpolicy",
            name="team",
            field=teams.fields.TeamField(
                blank=True,
                default=teams.fields.default_team_id,
                editable=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="teams.team",
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="event",
            name="team",
            field=teams.fields.TeamField(
                blank=True,
                db_constraint=False,
                db_index=False,
                default=teams.fields.default_team_id,
                editable=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="teams.team",
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="forkfence",
            name="team",
            field=teams.fields.TeamField(
                blank=True,
                db_constraint=False,
                db_index=False,
                default=teams.fields.default_team_id,
                editable=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="teams.team",
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="run",
            name="team",
            field=teams.fields.TeamField(
                blank=True,
                default=teams.fields.default_team_id,
                editable=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="teams.team",
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="step",
            name="team",
            field=teams.fields.TeamField(
                blank=True,
                db_constraint=False,
                db_index=False,
                default=teams.fields.default_team_id,
                editable=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="teams.team",
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="workertoken",
            name="team",
            field=teams.fields.TeamField(
                blank=True,
                default=teams.fields.default_team_id,
                editable=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="teams.team",
            ),
            preserve_default=False,
        ),
        migrations.AlterField(
            model_name="budgetpolicy",
            name="agent",
            field=models.CharField(blank=True, max_length=100, null=True),
        ),
        migrations.AlterField(
            model_name="budgetpolicy",
            name="name",
            field=models.CharField(max_length=100),
        ),
        migrations.AddConstraint(
            model_name="approvalrule",
            constraint=models.UniqueConstraint(
                fields=("team", "agent", "tool_pattern"),
                name="approval_rule_unique_per_agent_tool",
                violation_error_message="This agent already has a rule for this tool pattern.",
            ),
        ),
        migrations.AddConstraint(
            model_name="approvalrule",
            constraint=models.UniqueConstraint(
                condition=models.Q(("is_fork_fence", True)),
                fields=("team", "is_fork_fence"),
                name="approval_rule_one_fork_fence",
            ),
        ),
        migrations.AddConstraint(
            model_name="budgetpolicy",
            constraint=models.UniqueConstraint(
                condition=models.Q(("is_default", True)),
                fields=("team",),
                name="one_default_policy",
            ),
        ),
        migrations.AddConstraint(
            model_name="budgetpolicy",
            constraint=models.UniqueConstraint(
                fields=("team", "name"),
                name="policy_name_unique_per_team",
                violation_error_message="Budget policy with this Name already exists.",
            ),
        ),
        migrations.AddConstraint(
            model_name="budgetpolicy",
            constraint=models.UniqueConstraint(
                condition=models.Q(("agent__isnull", False)),
                fields=("team", "agent"),
                name="policy_agent_unique_per_team",
                violation_error_message="Budget policy with this Agent already exists.",
            ),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.UniqueConstraint(
                condition=models.Q(("external_id__isnull", False)),
                fields=("team", "agent", "external_id"),
                name="run_external_id_unique_per_agent",
            ),
        ),
        migrations.AddConstraint(
            model_name="workertoken",
            constraint=models.UniqueConstraint(
                condition=models.Q(("revoked_at__isnull", True)),
                fields=("team", "name"),
                name="worker_token_active_name_unique",
                violation_error_message="A token of this name is in use; revoke it first or choose another name.",
            ),
        ),
        migrations.RunSQL(COMPOSITE_KEYS, migrations.RunSQL.noop),
    ]
