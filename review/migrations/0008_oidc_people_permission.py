"""The people page's permission, `review.manage_people` (issue 39), given to the admins group."""

from django.db import migrations

from review.roles import groups_ensure_migration, permission_drop_migration


class Migration(migrations.Migration):
    dependencies = [("review", "0006_proxyhooks_webhook_url_unique")]

    operations = [
        migrations.AlterModelOptions(
            name="auditentry",
            options={
                "ordering": ["-at", "-id"],
                "permissions": [
                    ("browse", "Browse runs, transcripts and the review queue"),
                    ("resolve", "Resolve review items and claim them"),
                    ("raise_limits", "Raise one run's limits"),
                    ("manage_policies", "Create and edit budget policies"),
                    ("manage_tokens", "Create and revoke worker tokens"),
                    ("export", "Export journals"),
                    ("run_actions", "Cancel, fork and bulk-act on runs (the console)"),
                    (
                        "manage_audit",
                        "Sign checkpoints, acknowledge alerts, set retention, see all exports",
                    ),
                    (
                        "manage_people",
                        "See everyone who can sign in, create local users, deactivate",
                    ),
                ],
            },
        ),
        migrations.RunPython(groups_ensure_migration, permission_drop_migration("manage_people")),
    ]
