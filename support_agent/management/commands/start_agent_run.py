"""Queue a support run for the Celery workers: `manage.py start_agent_run --ticket T-1001`."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from celery_agents.services import agent_run_start
from support_agent.support import AGENT, ticket_input
from teams.scope import command_scope


class Command(BaseCommand):
    help = (
        "Create (or attach to) a support-agent run for an inbound ticket and queue it for the "
        "Celery workers. The same ticket attaches to the same run. Prints the run id."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--ticket", required=True, help="inbound ticket id (T-1001..T-1003)")
        parser.add_argument("--customer", help="customer email (overrides the demo inbox)")
        parser.add_argument("--subject", help="subject (overrides the demo inbox)")
        parser.add_argument("--body", help="body (overrides the demo inbox)")

    @command_scope("operator command", home_default=True)
    def handle(self, *args: Any, **options: Any) -> None:
        try:
            run_input = ticket_input(
                options["ticket"],
                customer=options["customer"],
                subject=options["subject"],
                body=options["body"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        run, created = agent_run_start(
            agent=AGENT,
            input=run_input,
            external_id=f"ticket:{options['ticket']}",
            actor="manage.py start_agent_run",
        )
        state = "queued" if created or run.status == "pending" else f"already {run.status}"
        self.stderr.write(f"run {run.pk}: {state}")
        self.stdout.write(str(run.pk))
