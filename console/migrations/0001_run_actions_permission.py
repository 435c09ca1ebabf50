"""Admins may cancel, fork and bulk-act on runs: the `review.run_actions` permission.

Kept in the console's own migrations (review.roles lists it with the other groups' permissions),
so the review app's migration history is untouched.
"""

from django.db import migrations

from review.roles import groups_ensure_migration, permission_drop_migration


class Migration(migrations.Migration):
    dependencies = [
        ("review", "0002_groups_and_append_only_audit"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.RunPython(groups_ensure_migration, permission_drop_migration("run_actions"))
    ]
