from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from runs.tokens import worker_token_create


class Command(BaseCommand):
    help = "Create a named worker token and print it (alone, on the last line). Only its hash is stored."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("name", help="a name that says which worker or deployment uses it")

    def handle(self, *args: Any, **options: Any) -> None:
        token, raw = worker_token_create(name=options["name"], created_by="manage.py")
        self.stderr.write(
            f"Created worker token {token.name!r} ({token.prefix}…). It is shown once:"
        )
        self.stdout.write(raw)
