"""The teams' boundary as teams/sql/boundary.sql held it when this copy was taken
(`manage.py boundary_snapshot`); frozen: a later edit makes a new copy. Every statement
is idempotent. Backwards leaves it in place.
"""

from django.db import migrations

SQL = r"""-- The teams' boundary (issue 47, docs/teams.md): which team owns each row, and which rows a
-- transaction may see. One source: the newest teams/migrations/NNNN_boundary.py freezes this
-- file's text (tests/teams/test_boundary_source.py holds the two together). Every statement is
-- idempotent.
--
-- A transaction names its teams with two settings, set in the transaction itself (set_config
-- with is_local true, which holds behind PgBouncer's transaction pooling): teams.scope sends
-- them ahead of each transaction's first statement (teams/scope.py).
--   ledger.teams  the teams whose rows it sees: '1,4' (ids), '*' (every team: the uses
--                 teams/scope.py lists), '' or unset: none, so nothing is seen
--   ledger.team   the one team a new top-level row is filed in when the writer names none
--                 ('' when the transaction sees several or none)

-- Whether a row of `team` is visible to the current transaction.
CREATE OR REPLACE FUNCTION teams_visible(team bigint) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT current_setting('ledger.teams', true) = '*'
        OR team = ANY (string_to_array(replace(current_setting('ledger.teams', true), '*', ''), ',')::bigint[])
$$;

-- BEFORE INSERT: a row whose team_id is NULL gets its parent's team (TG_ARGV[0]: 'run',
-- 'ticket', 'webhook', 'incident'), or for a top-level row ('home') the transaction's one named
-- team; TG_ARGV[1] = 'check': a team given by the writer must be the parent's (the journal's
-- tables need no check: their composite key to the run holds the team, runs/migrations/0011);
-- 'org': a top-level row of no team is org-wide (audit entries of sign-ins and accounts).
CREATE OR REPLACE FUNCTION teams_team_fill() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    parent bigint;
BEGIN
    IF TG_ARGV[0] = 'home' THEN
        IF NEW.team_id IS NULL THEN
            NEW.team_id := NULLIF(current_setting('ledger.team', true), '')::bigint;
            IF NEW.team_id IS NULL AND TG_ARGV[1] IS DISTINCT FROM 'org' THEN
                RAISE EXCEPTION '%: a new row needs its team, and the transaction names no single team', TG_TABLE_NAME
                    USING ERRCODE = 'not_null_violation', HINT = 'Name the team (team=...) or write under teams.scope.team_scope.';
            END IF;
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.team_id IS NOT NULL AND TG_ARGV[1] IS DISTINCT FROM 'check' THEN
        RETURN NEW;
    END IF;
    CASE TG_ARGV[0]
        WHEN 'run' THEN SELECT team_id INTO parent FROM runs_run WHERE id = NEW.run_id;
        WHEN 'ticket' THEN SELECT team_id INTO parent FROM tools_ticket WHERE id = NEW.ticket_id;
        WHEN 'webhook' THEN
            SELECT team_id INTO parent FROM review_escalationwebhook WHERE id = NEW.webhook_id;
        WHEN 'incident' THEN
            SELECT team_id INTO parent FROM audit_incident WHERE id = NEW.incident_id;
    END CASE;
    IF parent IS NULL THEN
        RAISE EXCEPTION '%: its % is not visible to this transaction', TG_TABLE_NAME, TG_ARGV[0]
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF NEW.team_id IS NULL THEN
        NEW.team_id := parent;
    ELSIF NEW.team_id <> parent THEN
        RAISE EXCEPTION '%: team % is not its %''s team %', TG_TABLE_NAME, NEW.team_id, TG_ARGV[0], parent
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

-- Row-level security on one table: enabled and forced (the table's owner is bound too), one
-- policy for every command, keyed on ledger.teams. p_org_rows: a row of no team (org-wide: a
-- sign-in's audit entry) may be written by anyone, and is seen with `default`'s rows (so an
-- install of one team sees its audit log as before) and by the every-team scope.
DROP FUNCTION IF EXISTS teams_boundary_apply(regclass);
CREATE OR REPLACE FUNCTION teams_boundary_apply(p_table regclass, p_org_rows boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', p_table);
    EXECUTE format('ALTER TABLE %s FORCE ROW LEVEL SECURITY', p_table);
    EXECUTE format('DROP POLICY IF EXISTS team_boundary ON %s', p_table);
    IF p_org_rows THEN
        EXECUTE format('CREATE POLICY team_boundary ON %s USING (teams_visible(team_id) '
            'OR (team_id IS NULL AND teams_visible((SELECT id FROM teams_team WHERE slug = %L)))) '
            'WITH CHECK (team_id IS NULL OR teams_visible(team_id))', p_table, 'default');
    ELSE
        EXECUTE format('CREATE POLICY team_boundary ON %s USING (teams_visible(team_id)) '
            'WITH CHECK (teams_visible(team_id))', p_table);
    END IF;
END
$$;

-- Every team-owned table, with where a new row's team comes from. tests/teams/test_rls.py fails
-- while a model with a TeamField (teams/fields.py) is missing here.
DO $boundary$
DECLARE
    t record;
    part record;
BEGIN
    FOR t IN SELECT * FROM (VALUES
        ('runs_run', 'home', NULL, false),
        ('runs_budgetpolicy', 'home', NULL, false),
        ('runs_approvalrule', 'home', NULL, false),
        ('runs_workertoken', 'home', NULL, false),
        ('runs_step', 'run', NULL, true),
        ('runs_event', 'run', NULL, true),
        ('runs_approvalrequest', 'run', NULL, true),
        ('runs_approval', 'run', 'check', false),
        ('runs_forkfence', 'run', 'check', false),
        ('tools_idempotencykey', 'home', NULL, false),
        ('tools_ticket', 'home', NULL, false),
        ('tools_ticketcomment', 'ticket', 'check', false),
        ('tools_outboundemail', 'home', NULL, false),
        ('tools_mcptool', 'home', NULL, false),
        ('review_auditentry', 'home', 'org', false),
        ('review_escalation', 'run', 'check', false),
        ('review_escalationwebhook', 'home', NULL, false),
        ('review_webhookdelivery', 'webhook', 'check', false),
        ('audit_exportjob', 'home', NULL, false),
        ('audit_incident', 'home', NULL, false),
        ('audit_incidentrun', 'incident', 'check', false),
        ('console_runday', 'home', NULL, false),
        ('teams_membership', 'home', NULL, false)
    ) AS v(name, source, mode, only_when_null)
    LOOP
        EXECUTE format('DROP TRIGGER IF EXISTS teams_team_fill ON %I', t.name);
        -- the journal's hot writers (runs/sql/ledger.sql) name the team: no call at all then
        EXECUTE format('CREATE TRIGGER teams_team_fill BEFORE INSERT ON %I FOR EACH ROW %s '
            'EXECUTE FUNCTION teams_team_fill(%L%s)', t.name,
            CASE WHEN t.only_when_null THEN 'WHEN (NEW.team_id IS NULL)' ELSE '' END,
            t.source, CASE WHEN t.mode IS NULL THEN '' ELSE format(', %L', t.mode) END);
        PERFORM teams_boundary_apply(t.name::regclass, t.mode = 'org');
        -- a month partition of the journal, read directly, is bound as its parent is
        FOR part IN SELECT inhrelid::regclass AS child FROM pg_inherits
                    WHERE inhparent = t.name::regclass LOOP
            PERFORM teams_boundary_apply(part.child);
        END LOOP;
    END LOOP;
END
$boundary$;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("teams", "0003_roles_from_groups"),
        ("runs", "0012_kernel_snapshot"),
        ("tools", "0002_team"),
        ("review", "0005_auditentry_org_wide"),
        ("audit", "0004_team"),
        ("console", "0002_team"),
    ]

    operations = [migrations.RunSQL(SQL, migrations.RunSQL.noop)]
