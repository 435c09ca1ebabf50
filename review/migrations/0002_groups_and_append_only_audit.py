"""The dashboard's groups (supervisors, admins, auditors) and an append-only audit log."""

from django.db import migrations

from review.roles import groups_ensure

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION review_audit_append_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('agentledger.purge', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'review_auditentry is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$ LANGUAGE plpgsql;
CREATE TRIGGER review_audit_append_only
    BEFORE UPDATE OR DELETE ON review_auditentry
    FOR EACH ROW EXECUTE FUNCTION review_audit_append_only();
"""

DROP = """
DROP TRIGGER IF EXISTS review_audit_append_only ON review_auditentry;
DROP FUNCTION IF EXISTS review_audit_append_only();
"""


def create_groups(apps, schema_editor):
    groups_ensure(
        group_model=apps.get_model("auth", "Group"),
        permission_model=apps.get_model("auth", "Permission"),
        content_type_model=apps.get_model("contenttypes", "ContentType"),
    )


class Migration(migrations.Migration):
    dependencies = [
        ("review", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.RunSQL(APPEND_ONLY, DROP),
        migrations.RunPython(create_groups, migrations.RunPython.noop),
    ]
