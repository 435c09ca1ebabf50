"""The audit pages' admin rights as a permission, `review.manage_audit`, given to the admins group.

The audit app checked "admin" by the group's name; every other page checks a permission.
"""

from typing import Any

from django.db import migrations


def grant(apps: Any, schema_editor: Any) -> None:
    from review.roles import groups_ensure

    groups_ensure(
        group_model=apps.get_model("auth", "Group"),
        permission_model=apps.get_model("auth", "Permission"),
        content_type_model=apps.get_model("contenttypes", "ContentType"),
    )


def revoke(apps: Any, schema_editor: Any) -> None:
    apps.get_model("auth", "Permission").objects.filter(
        content_type__app_label="review", codename="manage_audit"
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("review", "0003_escalation_webhooks"),
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
        migrations.RunPython(grant, revoke),
    ]
