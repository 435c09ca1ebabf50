"""An incident holds only its own team's runs: a database rule, not only incident_open's check.

`audit_incidentrun.run_id` is no foreign key (an incident outlives a run purged after it closed),
so the boundary's trigger (teams_team_fill) checks the row's team against its incident's only.
This trigger checks the run too: when the row is written, its run must exist, be visible to the
transaction, and be in the incident's team."""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION audit_incidentrun_run_team() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    run_team bigint;
    incident_team bigint;
BEGIN
    SELECT team_id INTO run_team FROM runs_run WHERE id = NEW.run_id;
    SELECT team_id INTO incident_team FROM audit_incident WHERE id = NEW.incident_id;
    IF run_team IS NULL THEN
        RAISE EXCEPTION 'audit_incidentrun: run % is not visible to this transaction', NEW.run_id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF run_team IS DISTINCT FROM incident_team THEN
        RAISE EXCEPTION 'audit_incidentrun: run % is of team %, incident % of team %',
            NEW.run_id, run_team, NEW.incident_id, incident_team
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS audit_incidentrun_run_team ON audit_incidentrun;
CREATE TRIGGER audit_incidentrun_run_team BEFORE INSERT OR UPDATE OF run_id, incident_id
    ON audit_incidentrun FOR EACH ROW EXECUTE FUNCTION audit_incidentrun_run_team();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS audit_incidentrun_run_team ON audit_incidentrun;
DROP FUNCTION IF EXISTS audit_incidentrun_run_team();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0004_team"),
        ("teams", "0004_boundary"),
    ]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
