from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from teams.boundary import snapshot_differs, snapshot_write


class Command(BaseCommand):
    help = (
        "Freeze teams/sql/boundary.sql (the teams' row-level security, its one source) into a new "
        "migration teams/migrations/NNNN_boundary.py when it differs from the newest copy; "
        "--check writes nothing and exits 1 while it differs."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--check", action="store_true", help="exit 1 when a copy is due")

    def handle(self, *args: Any, **options: Any) -> None:
        if not snapshot_differs():
            self.stdout.write("teams/sql/boundary.sql is what its newest copy holds.")
            return
        if options["check"]:
            raise CommandError("teams/sql/boundary.sql differs from its newest copy.")
        self.stdout.write(f"wrote {snapshot_write()}")
