from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runs.api_errors import ApplicationError
from runs.tokens import worker_token_create


class Command(BaseCommand):
    help = "Create a named worker token and print it (alone, on the last line). Only its hash is stored."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("name", help="a name that says which worker or deployment uses it")
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
        try:
            token, raw = worker_token_create(
                name=options["name"],
                created_by="manage.py",
                scopes=tuple(options["scope"]),
                agents=tuple(options["agent"]),
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        limited = f" for agents {', '.join(token.agents)}" if token.agents else ""
        self.stderr.write(
            f"Created worker token {token.name!r} ({token.prefix}…){limited}, scope {token.scope}. "
            "It is shown once:"
        )
        self.stdout.write(raw)
