import sys
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any, BinaryIO

from django.core.management.base import BaseCommand, CommandError

from audit.exports import export_filters_parse, export_stream
from runs.api_errors import ApplicationError
from teams.scope import command_scope


class Command(BaseCommand):
    help = (
        "Export run histories as JSONL (one run per line with steps, resolutions, events and "
        "checkpoint proofs; verifiable offline with verify_export) or CSV (one step per row). "
        "Streams with constant memory. Shows a progress bar when stderr is a terminal."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
        parser.add_argument("--output", "-o", help="file to write (default: standard output)")
        parser.add_argument(
            "--from", dest="created_from", help="runs created on or after (YYYY-MM-DD)"
        )
        parser.add_argument(
            "--to", dest="created_to", help="runs created on or before (YYYY-MM-DD)"
        )
        parser.add_argument("--agent", help="only this agent's runs")
        parser.add_argument("--status", help="only runs in this status")
        parser.add_argument("--run", dest="run_id", help="only this run id")
        parser.add_argument(
            "--no-progress", action="store_true", help="no progress bar even on a terminal"
        )

    @command_scope("operator command")
    def handle(self, *args: Any, **options: Any) -> None:
        try:
            filters = export_filters_parse(
                created_from=options["created_from"],
                created_to=options["created_to"],
                agent=options["agent"],
                status=options["status"],
                run_id=options["run_id"],
            )
        except ApplicationError as exc:
            problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.details.items())
            raise CommandError(f"{exc.message} {problems}") from exc
        total = filters.queryset().count()
        show = not options["no_progress"] and sys.stderr.isatty()
        started = time.monotonic()

        def progress(runs: int, written: int) -> None:
            if not show:
                return
            width = 30
            done = int(width * runs / total) if total else width
            rate = runs / max(time.monotonic() - started, 1e-6)
            sys.stderr.write(
                f"\r[{'#' * done}{' ' * (width - done)}] {runs}/{total} runs "
                f"{written / 1e6:.1f} MB {rate:.0f} runs/s"
            )
            sys.stderr.flush()

        output = options["output"]
        target: BinaryIO
        if output:
            path = Path(output)
            if path.is_dir():
                raise CommandError(f"{path} is a directory.")
            target = path.open("wb")
        else:
            target = sys.stdout.buffer
        try:
            for chunk in export_stream(
                filters=filters, format=options["format"], progress=progress
            ):
                target.write(chunk)
        finally:
            if output:
                target.close()
            else:
                target.flush()
        if show:
            sys.stderr.write("\n")
        if output:
            self.stderr.write(
                f"exported {total} runs to {output} in {time.monotonic() - started:.1f} s"
            )
