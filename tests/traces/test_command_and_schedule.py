"""`manage.py export_traces` and beat's schedule follow the standard endpoint variables."""

import subprocess
import sys
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tests.processes import ROOT, server_env
from tests.traces.receiver import OtlpReceiver
from tests.traces.story import Story, told

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def story(transactional_db: Any, api: Any, fake_clock: Any, worker_token: str) -> Story:
    return told(api, fake_clock, worker_token)


def test_export_once_sends_what_is_committed_and_says_so(
    receiver: OtlpReceiver, story: Story
) -> None:
    out = StringIO()
    call_command("export_traces", "--once", stdout=out)

    assert out.getvalue().startswith(f"exported {len(receiver.spans)} spans from ")
    assert receiver.spans


def test_export_once_fails_when_the_collector_refuses(receiver: OtlpReceiver, story: Story) -> None:
    receiver.refuse = True
    with pytest.raises(CommandError, match="not all was exported"):
        call_command("export_traces", "--once", stdout=StringIO())


def test_without_an_endpoint_the_command_says_what_to_set(
    transactional_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    with pytest.raises(CommandError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        call_command("export_traces", "--once")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("variable", "scheduled"),
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", True),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", True),
        (None, False),
    ],
)
def test_beat_schedules_the_export_only_with_an_endpoint(
    variable: str | None, scheduled: bool, transactional_db: Any
) -> None:
    env = server_env(without=("OTEL_",))
    if variable:
        env[variable] = "http://collector.example:4318"
    answer = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(settings.CELERY_BEAT_SCHEDULE.get('export-traces', {}).get('task'))",
        ],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        check=True,
    )
    last = answer.stdout.strip().splitlines()[-1]
    assert last == ("traces.tasks.export_traces" if scheduled else "None")
