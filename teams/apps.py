from typing import Any

from django.apps import AppConfig


class TeamsConfig(AppConfig):
    """Teams: who owns each run, token and policy, and whose rows a transaction may see (issue 47,
    docs/teams.md)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "teams"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate, pre_migrate

        from teams import scope

        connection_created.connect(scope.install, dispatch_uid="teams.scope.install")
        # an already open connection (made before this app was ready) gets its sender too
        from django.db import connections

        for conn in connections.all(initialized_only=True):
            if conn.connection is not None:
                scope.install(connection=conn)
        pre_migrate.connect(_migrations_see_every_team, dispatch_uid="teams.migrate_scope")
        post_migrate.connect(_migrations_done, dispatch_uid="teams.migrate_scope_done")


_during_migrate: list[Any] = []


def _migrations_see_every_team(sender: Any, **kwargs: Any) -> None:
    """`migrate` changes every team's rows: it runs under every team, until its post_migrate."""
    from teams import scope

    if not _during_migrate:
        _during_migrate.append(scope._current.set(scope.every_team_scope("migrations")))


def _migrations_done(sender: Any, **kwargs: Any) -> None:
    from teams import scope

    while _during_migrate:
        scope._current.reset(_during_migrate.pop())
