"""The command-line side: export_runs, generate_signing_key, audit_checkpoint, legal_hold."""

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from audit.signing import private_key_parse, public_key_text
from audit.verify import load_public_key, verify_export_file
from bench.testdata import runs_bulk_create
from tests.audit.conftest import PUBLIC_KEY


@pytest.mark.parametrize(
    "command",
    ["export_runs", "verify_export", "generate_signing_key", "audit_checkpoint", "legal_hold"],
)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        call_command(command, "--help")
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_export_runs_writes_a_verifiable_file_with_a_progress_bar(
    db: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    runs_bulk_create(runs=7, steps_per_run=2, agent="alpha")
    runs_bulk_create(runs=3, steps_per_run=2, agent="beta")
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    out = tmp_path / "alpha.jsonl"
    call_command("export_runs", "--agent", "alpha", "--output", str(out), stderr=io.StringIO())
    assert "\r[" in terminal.getvalue() and "7/7 runs" in terminal.getvalue()
    report = verify_export_file(out, load_public_key(PUBLIC_KEY))
    assert report.ok and report.runs == 7
    header = json.loads(out.read_bytes().splitlines()[0])
    assert header["filters"]["agent"] == "alpha"

    csv_out = tmp_path / "all.csv"
    call_command("export_runs", "--format", "csv", "-o", str(csv_out), "--no-progress")
    assert len(csv_out.read_text().splitlines()) == 1 + 10 * 2


def test_export_runs_refuses_bad_filters_and_writes_nothing(db: Any, tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    with pytest.raises(CommandError, match="not a date"):
        call_command("export_runs", "--from", "yesterday", "-o", str(out))
    with pytest.raises(CommandError, match="status"):
        call_command("export_runs", "--status", "happy", "-o", str(out))
    assert not out.exists()


def test_generate_signing_key_prints_a_working_pair(tmp_path: Path) -> None:
    out = io.StringIO()
    call_command("generate_signing_key", stdout=out)
    lines = out.getvalue().splitlines()
    private = lines[0].removeprefix("AUDIT_SIGNING_KEY=")
    public = lines[1].removeprefix("public key: ")
    assert public_key_text(private_key_parse(private).public_key()) == public
    key_file = tmp_path / "key"
    call_command("generate_signing_key", "--write", str(key_file), stdout=io.StringIO())
    assert key_file.stat().st_mode & 0o777 == 0o600
    with pytest.raises(CommandError, match="refusing to overwrite"):
        call_command("generate_signing_key", "--write", str(key_file), stdout=io.StringIO())


def test_audit_checkpoint_command_signs(db: Any) -> None:
    runs_bulk_create(runs=2, steps_per_run=1)
    out = io.StringIO()
    call_command("audit_checkpoint", stdout=out)
    assert out.getvalue().startswith("checkpoint 1 signed: 2 new heads")
    assert load_public_key(PUBLIC_KEY)  # the session key the checkpoint was signed with


def test_with_debug_and_no_key_a_demo_key_is_generated_once(settings: Any, tmp_path: Path) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from audit.signing import signing_key_id

    settings.AUDIT_SIGNING_KEY = ""
    settings.AUDIT_SIGNING_KEY_FILE = str(tmp_path / "demo" / "key")
    settings.DEBUG = False
    with pytest.raises(ImproperlyConfigured, match="generate_signing_key"):
        signing_key_id()
    settings.DEBUG = True
    first = signing_key_id()
    assert (tmp_path / "demo" / "key").stat().st_mode & 0o777 == 0o600
    assert signing_key_id() == first  # the same key after a restart


def test_beat_runs_checkpoints_expiry_and_retention(settings: Any) -> None:
    from config.celery import app

    app.loader.import_default_modules()
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    for task in (
        "audit.tasks.checkpoint_write",
        "audit.tasks.exports_expire",
        "audit.tasks.retention_purge",
    ):
        assert task in scheduled and task in app.tasks
    assert "audit.tasks.export_job_run" in app.tasks
