import uuid
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from audit.permissions import is_admin
from audit.retention import legal_hold_change
from runs.api_errors import ApplicationError
from teams.scope import command_scope


class Command(BaseCommand):
    help = (
        "Put a run on legal hold (--on) or lift it (--off), as the run's page does: retention "
        "keeps a run on hold whatever its age. Recorded as --by (a dashboard user) in the run's "
        "event chain and in the audit log, with the note."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", type=uuid.UUID, help="the run's id")
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--on", action="store_true", help="put the run on legal hold")
        which.add_argument("--off", action="store_true", help="lift the run's legal hold")
        parser.add_argument("--note", required=True, help="why (the matter, who asked)")
        parser.add_argument(
            "--by", required=True, help="the username of the admin who decided (a dashboard user)"
        )

    @command_scope("operator command")
    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model()._default_manager.filter(username=options["by"]).first()
        if user is None:
            raise CommandError(f"No user {options['by']!r}: --by names a dashboard user.")
        if not is_admin(user):
            raise CommandError(f"{options['by']} may not set legal holds (admins only).")
        on = bool(options["on"])
        try:
            run = legal_hold_change(
                actor=user, run_id=options["run_id"], on=on, note=options["note"]
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        self.stdout.write(
            f"run {run.pk} {'on legal hold' if on else 'legal hold lifted'} by "
            f"{user.get_username()} (event {run.event_seq})"
        )
