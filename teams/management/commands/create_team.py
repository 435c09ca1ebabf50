from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from teams.models import Team
from teams.services import team_create


class Command(BaseCommand):
    help = (
        "Create a team (with its default budget policy); an audit entry in the team records it. "
        "Then: create_worker_token NAME --team SLUG, grant_team_role USERNAME SLUG ROLE."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("slug", help="lower-case letters, digits and hyphens (billing)")
        parser.add_argument("--name", default="", help="its name as people read it")

    def handle(self, *args: Any, **options: Any) -> None:
        if Team.objects.filter(slug=options["slug"]).exists():
            raise CommandError(f"A team {options['slug']!r} exists already.")
        try:
            team = team_create(slug=options["slug"], name=options["name"], actor="manage.py")
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from exc
        self.stdout.write(f"Created team {team.slug!r} ({team.name}).")
