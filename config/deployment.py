"""What a deployment left out that a person would meet later, named before they meet it.

A ledger started without these still serves, and fails only when someone reaches the part that
needs them: an export answers 503, an email step fails, an escalation mail links to a host
nobody can reach. So each process says so when it starts (the web server, the worker and beat
log one warning per missing setting), and `manage.py check --deploy` lists them (ledger.W001…).
Only names are said, never values.

The agents' worker is stricter: with LEDGER_AGENT_TRANSPORT=http and no INTENTLEDGER_TOKEN every
run it takes would fail, so it refuses to start, with a sentence naming what is missing.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core import checks

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MissingSetting:
    check_id: str
    name: str
    consequence: str

    @property
    def sentence(self) -> str:
        return f"{self.name} is not set: {self.consequence} (docs/settings.md)."


def settings_missing() -> list[MissingSetting]:
    """The settings this deployment left out whose absence a person would meet; none with DEBUG
    (the demo and a developer's machine have a generated key, a mail catcher, localhost)."""
    if settings.DEBUG:
        return []
    missing: list[MissingSetting] = []
    if not settings.AUDIT_SIGNING_KEY:
        missing.append(
            MissingSetting(
                "ledger.W001",
                "AUDIT_SIGNING_KEY",
                "exports answer 503 and no checkpoint is signed",
            )
        )
    smtp = settings.EMAIL_BACKEND == "django.core.mail.backends.smtp.EmailBackend"
    if smtp and "EMAIL_HOST" not in os.environ:
        missing.append(
            MissingSetting(
                "ledger.W002",
                "EMAIL_HOST",
                f"mail (the email.send tool, escalations) goes to {settings.EMAIL_HOST}:"
                f"{settings.EMAIL_PORT}, where no mail server may listen",
            )
        )
    if "LEDGER_DASHBOARD_URL" not in os.environ:
        missing.append(
            MissingSetting(
                "ledger.W003",
                "LEDGER_DASHBOARD_URL",
                f"escalation mails and webhooks link to {settings.LEDGER_DASHBOARD_URL}",
            )
        )
    return missing


def agents_transport_refusal() -> str | None:
    """Why the agents' Celery worker cannot run a single run as configured, or None."""
    if settings.LEDGER_AGENT_TRANSPORT == "http" and not settings.INTENTLEDGER_TOKEN:
        from celery_agents.tasks import AGENTS_OVER_HTTP_REFUSAL

        return AGENTS_OVER_HTTP_REFUSAL
    return None


def settings_missing_log(process: str) -> None:
    """One warning per missing setting, at the start of `process` (web, worker, beat)."""
    for missing in settings_missing():
        logger.warning("%s: %s", process, missing.sentence)


@checks.register(checks.Tags.compatibility, deploy=True)
def settings_missing_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return [checks.Warning(m.sentence, id=m.check_id) for m in settings_missing()]


def worker_start_check(**kwargs: Any) -> None:
    """celery's worker_init: refuse a worker that could run no run; name what else is missing."""
    refusal = agents_transport_refusal()
    if refusal:
        # SystemExit, not an exception: celery logs a signal handler's exception and goes on
        logger.error("celery worker: %s", refusal)
        raise SystemExit(f"celery worker: {refusal}")
    settings_missing_log("celery worker")


def beat_start_check(**kwargs: Any) -> None:
    settings_missing_log("celery beat")
