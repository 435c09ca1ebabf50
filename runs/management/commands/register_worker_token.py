import os
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runs.api_errors import ApplicationError
from runs.tokens import worker_token_register
from teams.models import DEFAULT_TEAM_SLUG, Team
from teams.scope import team_scope


class Command(BaseCommand):
    help = (
        "Register the worker token in the environment variable INTENTLEDGER_TOKEN under NAME, "
        "unless it is registered already (a deployment's one-shot runs it at every start). The "
        "token is read from the environment, never from the command line."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("name", help="a name that says which worker or deployment uses it")
        parser.add_argument(
            "--team", default=DEFAULT_TEAM_SLUG, help="the token's team (default: default)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        raw = os.environ.get("INTENTLEDGER_TOKEN", "").strip()
        if not raw:
            raise CommandError("INTENTLEDGER_TOKEN is not set: nothing to register.")
        team = Team.objects.filter(slug=options["team"]).first()
        if team is None:
            raise CommandError(f"No team {options['team']!r} (manage.py create_team SLUG).")
        try:
            with team_scope(team.pk):
                token, created = worker_token_register(
                    name=options["name"], raw=raw, created_by="manage.py"
                )
        except ApplicationError as error:
            raise CommandError(str(error)) from error
        if created:
            self.stdout.write(f"Registered worker token {token.name!r} ({token.prefix}…).")
        elif token.is_active:
            self.stdout.write(
                f"Worker token {token.name!r} ({token.prefix}…) is registered already."
            )
        else:
            raise CommandError(f"Worker token {token.name!r} ({token.prefix}…) was revoked.")
