"""`manage.py demo_story`: the demo's story, told against the running web server and worker."""

import os
import signal
import time
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from demo.story import deployment_watch, run_story
from teams.models import default_team
from teams.scope import every_team


class Command(BaseCommand):
    help = (
        "Wait for the web server at --url, print where everything is, then tell the story: "
        "support-agent runs through the Celery worker, one whose worker process is SIGKILLed "
        "after step 12 and recovers, one killed inside email.send (it waits in the review "
        "queue as 'maybe sent'), one stopped by its token budget; then a summary read back from "
        "the database. Needs INTENTLEDGER_TOKEN (a worker token) and the demo's mail catcher."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--url", required=True, help="the web server, e.g. http://127.0.0.1:8000"
        )
        parser.add_argument("--no-story", action="store_true", help="only wait and print where")
        parser.add_argument(
            "--again",
            action="store_true",
            help="tell the story even when the database has it already (a new round, new "
            "ticket numbers); without it, a restart only says where the told story stands",
        )
        parser.add_argument(
            "--seed",
            action="store_true",
            help="run demo_seed first, in this process (migrations, users, token, policies): "
            "the demo's web server and workers start meanwhile",
        )
        parser.add_argument(
            "--stay",
            action="store_true",
            help="then wait until stopped (a Procfile's processes end together: the demo's "
            "services keep running while this one does)",
        )

    def handle(
        self,
        *args: Any,
        url: str,
        no_story: bool,
        again: bool,
        seed: bool,
        stay: bool,
        **options: Any,
    ) -> None:
        if seed:  # first: the teams' table exists only once it migrated
            call_command("demo_seed", stdout=self.stdout)
        # the demo's rows: every team seen (billing's too), new ones in `default` (teams.scope)
        with every_team("operator command", home=default_team().pk):
            self._tell(url=url, no_story=no_story, again=again, stay=stay)

    def _tell(self, *, url: str, no_story: bool, again: bool, stay: bool) -> None:
        started = float(os.environ.get("DEMO_STARTED_AT") or time.time())
        story = run_story(url=url.rstrip("/"), started=started, no_story=no_story, again=again)
        if stay:
            self.stdout.write("Press Ctrl-C to stop.")
            self.stdout.flush()
            if story is not None:
                # the pods' runs are external: their deployment restarts them when they can go
                # on (after a supervisor's decision), as an orchestrator would
                deployment_watch(story)
            while True:
                signal.pause()
