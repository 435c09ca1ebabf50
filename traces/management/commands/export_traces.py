"""`manage.py export_traces [--once]`: the journal's committed events as OTLP/HTTP traces."""

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from teams.scope import command_scope
from traces.exporter import endpoint_configured, export_pending


class Command(BaseCommand):
    help = (
        "Export the committed journal as OpenTelemetry traces (OTLP/HTTP) to "
        "OTEL_EXPORTER_OTLP_ENDPOINT; in the foreground, or --once: what is committed, then exit "
        "(0 when the collector took it)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true", help="export what is committed, exit")
        parser.add_argument(
            "--wait",
            type=float,
            default=60.0,
            help="--once: seconds to wait for transactions in flight at the start to end",
        )
        parser.add_argument(
            "--interval", type=float, default=2.0, help="seconds between rounds (foreground)"
        )

    @command_scope("traces")
    def handle(self, *args: Any, once: bool, interval: float, **options: Any) -> None:
        if not endpoint_configured():
            raise CommandError(
                "set OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)"
            )
        if once:
            started = time.monotonic()
            report = export_pending(committed_wait_seconds=options["wait"])
            self.stdout.write(
                f"exported {report.spans} spans from {report.events} events "
                f"in {report.batches} batches in {time.monotonic() - started:.3f} s"
            )
            if report.failed:
                raise CommandError(
                    "not all was exported (the collector refused a batch, or a transaction in "
                    "flight at the start outlasted --wait); the rest waits for the next run"
                )
            return
        delay = interval
        while True:
            report = export_pending()
            if report.spans:
                self.stdout.write(f"exported {report.spans} spans", ending="\n")
                self.stdout.flush()
            # a collector that refuses: wait longer each time, up to a minute
            delay = min(delay * 2, 60.0) if report.failed else interval
            time.sleep(delay)
