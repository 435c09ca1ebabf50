from typing import Any

from django.core.management.base import BaseCommand

from audit.checkpoints import checkpoint_create
from teams.scope import command_scope


class Command(BaseCommand):
    help = (
        "Recompute every run's hash chain and write the next signed checkpoint (what the beat "
        "task does). Refuses over a broken chain, raises a dashboard alert and exits 1."
    )

    @command_scope("checkpoints")
    def handle(self, *args: Any, **options: Any) -> None:
        result = checkpoint_create(actor="system:command")
        check = result.check
        if result.checkpoint is None:
            self.stderr.write(f"refused: {result.refused}")
            for b in check.breaks:
                self.stdout.write(f"BROKEN run {b.run_id} event {b.seq}: {b.problem}")
            raise SystemExit(1)
        c = result.checkpoint
        self.stdout.write(
            f"checkpoint {c.seq} signed: {c.leaves} new heads, {check.runs} runs and "
            f"{check.events} events verified, hash {c.hash}"
        )
