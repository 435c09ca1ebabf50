"""Everything that exists before teams belongs to `default`."""

from typing import Any

from django.db import migrations

from teams.models import DEFAULT_TEAM_SLUG


def default_team(apps: Any, schema_editor: Any) -> None:
    apps.get_model("teams", "Team").objects.get_or_create(
        slug=DEFAULT_TEAM_SLUG, defaults={"name": "Default"}
    )


class Migration(migrations.Migration):
    dependencies = [("teams", "0001_initial")]

    operations = [migrations.RunPython(default_team, migrations.RunPython.noop)]
