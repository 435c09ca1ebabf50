from django.apps import AppConfig


class TeamsConfig(AppConfig):
    """Teams: who owns each run, token and policy, and whose rows a transaction may see (issue 47,
    docs/teams.md)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "teams"
