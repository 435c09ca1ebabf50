"""Every member of the dashboard's groups (supervisors, admins, auditors) holds that role in
`default`: roles are held per team from here on (teams.backends). The groups stay, unused by the
permission checks, so a downgrade finds them as they were."""

from typing import Any

from django.db import migrations

from teams.models import DEFAULT_TEAM_SLUG

GROUP_ROLES = {"supervisors": "supervisor", "admins": "admin", "auditors": "auditor"}


def roles_from_groups(apps: Any, schema_editor: Any) -> None:
    team = apps.get_model("teams", "Team").objects.get(slug=DEFAULT_TEAM_SLUG)
    membership = apps.get_model("teams", "Membership")
    for group in apps.get_model("auth", "Group").objects.filter(name__in=GROUP_ROLES):
        for user in group.user_set.all():
            membership.objects.get_or_create(user=user, team=team, role=GROUP_ROLES[group.name])


class Migration(migrations.Migration):
    dependencies = [
        ("teams", "0002_default_team"),
        ("review", "0004_team"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [migrations.RunPython(roles_from_groups, migrations.RunPython.noop)]
