from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from audit.verify import add_arguments, load_public_key, render_report, verify_export_file


class Command(BaseCommand):
    help = (
        "Verify a JSONL export offline (no database needed): line order and count against the "
        "signed trailer, every run's hash chain, and the signed checkpoints covering them. "
        "Names the run and event of every break; exit 1 on any. Also runnable without Django "
        "as `python -m audit.verify FILE --public-key KEY`."
    )
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["file"])
        if not path.is_file():
            raise CommandError(f"No file {path}.")
        try:
            public_key = [load_public_key(k) for k in options["public_key"]]
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if not public_key:
            raise CommandError("a JSONL export needs --public-key")
        report = verify_export_file(path, public_key)
        for line in render_report(report):
            self.stdout.write(line)
        if not report.ok:
            raise SystemExit(1)
