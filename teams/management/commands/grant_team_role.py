from argparse import ArgumentParser
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from teams.models import Role, Team
from teams.services import grant_role


class Command(BaseCommand):
    help = (
        "Grant a person a role (supervisor, admin, auditor) in a team; an audit entry records it."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("username")
        parser.add_argument("slug", help="the team")
        parser.add_argument("role", choices=Role.values)

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model()._default_manager.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No person {options['username']!r}.")
        team = Team.objects.filter(slug=options["slug"]).first()
        if team is None:
            raise CommandError(f"No team {options['slug']!r} (manage.py create_team SLUG).")
        grant_role(user, team, options["role"], actor="manage.py")
        self.stdout.write(f"{user.get_username()} is {options['role']} in {team.slug}.")
