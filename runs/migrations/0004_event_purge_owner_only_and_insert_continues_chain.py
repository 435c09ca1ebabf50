"""Only the event table's owner may purge, and an inserted event must continue its run's chain.

The purge switch (`agentledger.purge`, a custom setting any role may set) now lets a DELETE
through only for the role that owns runs_event: the one migrations and the retention job run as.
A BEFORE INSERT trigger refuses an event whose seq is not the previous seq + 1 of its run (1 for
the first) or whose prev_hash is not the previous event's hash (64 zeros for the first): one
index lookup on (run_id, seq) per inserted event.
"""

from django.db import migrations

PURGE_OWNER_ONLY = """
CREATE OR REPLACE FUNCTION runs_event_append_only() RETURNS trigger AS $$
BEGIN
    -- the retention purge (a signed checkpoint is written first) is the one sanctioned delete,
    -- and only the table's owner (the role the retention job runs as) may make it
    IF TG_OP = 'DELETE'
        AND current_setting('agentledger.purge', true) = 'on'
        AND current_user = (SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = TG_RELID)
    THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'runs_event is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION runs_event_continues_chain() RETURNS trigger AS $$
DECLARE
    previous text;
BEGIN
    IF NEW.seq = 1 THEN
        previous := repeat('0', 64);
    ELSE
        SELECT hash INTO previous FROM runs_event WHERE run_id = NEW.run_id AND seq = NEW.seq - 1;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'runs_event: event % of run % follows no event %',
                NEW.seq, NEW.run_id, NEW.seq - 1 USING ERRCODE = 'integrity_constraint_violation';
        END IF;
    END IF;
    IF NEW.prev_hash IS DISTINCT FROM previous THEN
        RAISE EXCEPTION 'runs_event: event % of run % does not name the previous event''s hash',
            NEW.seq, NEW.run_id USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER runs_event_continues_chain
    BEFORE INSERT ON runs_event
    FOR EACH ROW EXECUTE FUNCTION runs_event_continues_chain();
"""

BACK_TO_0002 = """
DROP TRIGGER IF EXISTS runs_event_continues_chain ON runs_event;
DROP FUNCTION IF EXISTS runs_event_continues_chain();
CREATE OR REPLACE FUNCTION runs_event_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('agentledger.purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'runs_event is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$ LANGUAGE plpgsql;
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0003_journal_kernel")]

    operations = [migrations.RunSQL(PURGE_OWNER_ONLY, BACK_TO_0002)]
