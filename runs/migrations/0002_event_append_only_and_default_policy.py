"""Events are append-only at the database level; a default budget policy exists from the start."""

from django.db import migrations

from runs.default_policy import seed_default_policy

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION runs_event_append_only() RETURNS trigger AS $$
BEGIN
    -- the retention purge (a signed checkpoint is written first) is the one sanctioned delete
    IF TG_OP = 'DELETE' AND current_setting('agentledger.purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'runs_event is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER runs_event_append_only
    BEFORE UPDATE OR DELETE ON runs_event
    FOR EACH ROW EXECUTE FUNCTION runs_event_append_only();
"""

DROP = """
DROP TRIGGER IF EXISTS runs_event_append_only ON runs_event;
DROP FUNCTION IF EXISTS runs_event_append_only();
"""


def create_default_policy(apps, schema_editor):
    seed_default_policy(apps.get_model("runs", "BudgetPolicy"))


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]

    operations = [
        migrations.RunSQL(APPEND_ONLY, DROP),
        migrations.RunPython(create_default_policy, migrations.RunPython.noop),
    ]
