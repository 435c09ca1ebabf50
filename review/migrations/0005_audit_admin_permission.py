"""The audit pages' admin rights as a permission, `review.manage_audit`, given to the admins group.

The audit app checked "admin" by the group's name; every other page checks a permission.
"""

from django.db import migrations

from review.roles import groups_ensure_migration, permission_drop_migration


class Migration(migrations.Migration):
    dependencies = [
        ("review", "0004_escalation_names_its_run"),
        ("console", "0001_run_actions_permission"),
    ]

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
                ],
            },
        ),
        migrations.RunPython(groups_ensure_migration, permission_drop_migration("manage_audit")),
    ]
