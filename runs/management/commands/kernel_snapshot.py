from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runs.kernel_source import (
    MIGRATIONS,
    SOURCE,
    database_drift,
    snapshot_differs,
    snapshot_write,
    transitions_render,
    transitions_stale,
)


class Command(BaseCommand):
    help = (
        "Freeze runs/sql/ledger.sql (the journal kernel's one source) into a new migration "
        "runs/migrations/NNNN_kernel_snapshot.py, when it differs from the newest snapshot, "
        "after rendering its generated block (the transition tables of runs/constants.py). "
        "--check writes nothing and exits 1 when either is stale (as makemigrations --check); "
        "--drift compares the database's kernel functions and triggers with ledger.sql "
        "(executed in a transaction that is rolled back) and exits 1 on any difference."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--check", action="store_true", help="exit 1 when ledger.sql has no snapshot yet"
        )
        parser.add_argument(
            "--drift",
            action="store_true",
            help="exit 1 when the database runs a kernel body or trigger ledger.sql does not hold",
        )
        parser.add_argument("--source", type=Path, default=SOURCE, help="the kernel source file")
        parser.add_argument(
            "--migrations", type=Path, default=MIGRATIONS, help="the folder of snapshots"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        source: Path = options["source"]
        folder: Path = options["migrations"]
        if not source.is_file() or not folder.is_dir():
            raise CommandError(f"No {source} or no folder {folder}.")
        if options["drift"]:
            drift = database_drift(source.read_text())
            self.stdout.write(str(drift))
            if drift:
                raise SystemExit(1)
            return
        if options["check"] and transitions_stale(source):
            self.stdout.write(
                f"{source.name}: its generated block differs from the transition tables in "
                "runs/constants.py"
            )
            raise SystemExit(1)
        if not options["check"] and transitions_render(source):
            self.stdout.write(f"rendered the transition tables into {source}")
        if not snapshot_differs(source, folder):
            self.stdout.write(f"{source.name}: no changes since the newest snapshot")
            return
        if options["check"]:
            self.stdout.write(f"{source.name} differs from the newest snapshot in {folder}")
            raise SystemExit(1)
        try:
            path = snapshot_write(source, folder)
        except ValueError as error:
            raise CommandError(str(error)) from error
        self.stdout.write(f"wrote {path}")
