"""Admins may cancel, fork and bulk-act on runs: the `review.run_actions` permission.

Kept in the console's own migrations (review.roles lists it with the other groups' permissions),
so the review app's migration history is untouched.
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
        content_type__app_label="review", codename="run_actions"
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("review", "0002_groups_and_append_only_audit"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
