from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runs.chain import run_chain_breaks
from runs.models import Run
from teams.scope import command_scope


class Command(BaseCommand):
    help = "Recompute the hash chain of every run (or one) and report each break; exit 1 on any."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--run", dest="run_id", help="only this run id")

    @command_scope("operator command")
    def handle(self, *args: Any, **options: Any) -> None:
        runs = Run.objects.order_by("created_at")
        if options["run_id"]:
            runs = runs.filter(pk=options["run_id"])
            if not runs.exists():
                raise CommandError(f"No run {options['run_id']}.")
        checked_runs = checked_events = broken = 0
        for run in runs.iterator(chunk_size=500):
            breaks = run_chain_breaks(run)
            checked_runs += 1
            checked_events += run.event_seq
            for b in breaks:
                broken += 1
                self.stdout.write(f"BROKEN run {b.run_id} event {b.seq}: {b.problem}")
        self.stdout.write(f"checked {checked_runs} runs, {checked_events} events: {broken} breaks")
        if broken:
            raise SystemExit(1)
