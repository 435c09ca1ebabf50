from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from review.services.tokens import review_token_create
from runs.api_errors import ApplicationError
from teams.models import DEFAULT_TEAM_SLUG, Team
from teams.scope import team_scope


class Command(BaseCommand):
    help = (
        "Create a named worker token of a team and print it (alone, on the last line). Only its "
        "hash is stored; the creation is an audit entry in the team."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("name", help="a name that says which worker or deployment uses it")
        parser.add_argument(
            "--team",
            default=DEFAULT_TEAM_SLUG,
            help="the team whose runs the token creates and sees (default: default)",
        )
        parser.add_argument(
            "--agent",
            action="append",
            default=[],
            help="limit the token to this agent's runs (repeat for more; none: every agent)",
        )
        parser.add_argument(
            "--scope",
            action="append",
            default=[],
            choices=["tools:direct"],
            help="tools:direct: may invoke write tools under free-form keys (not for agents)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        team = Team.objects.filter(slug=options["team"]).first()
        if team is None:
            raise CommandError(f"No team {options['team']!r} (manage.py create_team SLUG).")
        try:
            with team_scope(team.pk):
                token, raw = review_token_create(
                    user="manage.py",
                    name=options["name"],
                    agents=tuple(options["agent"]),
                    tools_direct="tools:direct" in options["scope"],
                )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        limited = f" for agents {', '.join(token.agents)}" if token.agents else ""
        self.stderr.write(
            f"Created worker token {token.name!r} ({token.prefix}…) in team {team.slug}{limited}, "
            f"scope {token.scope}. "
            "It is shown once:"
        )
        self.stdout.write(raw)
