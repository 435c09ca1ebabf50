import os
import sys
import time
from argparse import ArgumentParser
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from audit.evidence import evidence_pack_write, evidence_scope_parse
from runs.api_errors import ApplicationError
from teams.scope import command_scope


class Command(BaseCommand):
    help = (
        "Write one team's evidence pack: one signed ZIP with the team's runs created in a "
        "period (their "
        "journals, hash chains and signed checkpoints), every person's decision on a step, the "
        "people and their roles, budget policies and approval rules with their changes, legal "
        "holds, purges, retention, incidents and a README mapping the EU AI Act's record-keeping "
        "articles to its files. Verify it offline with `python -m audit.verify FILE.zip`."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--from", dest="period_from", required=True, help="YYYY-MM-DD (UTC)")
        parser.add_argument("--to", dest="period_to", required=True, help="YYYY-MM-DD (UTC)")
        parser.add_argument(
            "--agent", action="append", default=[], help="only this agent's runs (repeatable)"
        )
        parser.add_argument(
            "--team",
            help="the team whose pack this is (a pack is one team's: its runs, decisions, people, "
            "policies, rules and incidents only); may be left out while there is one team",
        )
        parser.add_argument("--output", "-o", required=True, help="the .zip file to write")

    @command_scope("operator command")
    def handle(self, *args: Any, **options: Any) -> None:
        try:
            scope = evidence_scope_parse(
                period_from=options["period_from"],
                period_to=options["period_to"],
                agents=options["agent"],
                team=options["team"],
            )
        except ApplicationError as exc:
            problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.details.items())
            raise CommandError(f"{exc.message} {problems}") from exc
        path = Path(options["output"])
        if path.is_dir():
            raise CommandError(f"{path} is a directory.")
        partial = path.with_name(f".{path.name}.part")
        started = time.monotonic()
        show = sys.stderr.isatty()

        def progress(runs: int, written: int) -> None:
            if show:
                sys.stderr.write(f"\r{runs} runs, {written / 1e6:.1f} MB")
                sys.stderr.flush()

        try:
            with partial.open("wb") as handle:
                summary = evidence_pack_write(
                    scope=scope, target=handle, progress=progress, generated_by="manage.py"
                )
            os.replace(partial, path)
        except ImproperlyConfigured as exc:  # no signing key: nothing was written
            partial.unlink(missing_ok=True)
            raise CommandError(str(exc)) from exc
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        if show:
            sys.stderr.write("\n")
        self.stdout.write(
            f"evidence pack {path} of team {scope.team_slug}: {summary.runs} runs, {summary.decisions} decisions, "
            f"{summary.incidents} incidents, {path.stat().st_size} bytes, "
            f"{time.monotonic() - started:.1f} s"
        )
        self.stdout.write(f"signing key fingerprint (SHA-256): {summary.fingerprint}")
