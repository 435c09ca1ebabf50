"""An auditor takes 1,000 runs out of the system and proves offline that nothing was changed."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction

from audit.checkpoints import checkpoint_create
from audit.exports import ExportFilters, export_jsonl
from audit.signing import private_key_generate, private_key_parse, public_key_text
from audit.verify import Report, load_public_key, verify_export_file
from bench.testdata import runs_bulk_create
from tests.audit.conftest import PUBLIC_KEY, SIGNING_KEY

ROOT = Path(__file__).resolve().parents[2]
# the marker makes pytest-django create the test database the module fixture writes to
pytestmark = pytest.mark.django_db


class _Rollback(Exception):
    pass


@pytest.fixture(scope="module")
def exported(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[Path]:
    """1,000 runs (5 steps each), a signed checkpoint, one JSONL export; the data is rolled back.

    The tests below only read the file: verification needs no database.
    """
    from django.db import connection
    from django.test import override_settings

    path = tmp_path_factory.mktemp("export") / "runs.jsonl"
    with django_db_blocker.unblock(), override_settings(AUDIT_SIGNING_KEY=SIGNING_KEY):
        assert connection.settings_dict["NAME"].startswith("test_"), "not the test database"
        try:
            with transaction.atomic():
                runs_bulk_create(runs=1000, steps_per_run=5)
                assert checkpoint_create().checkpoint is not None
                with path.open("wb") as handle:
                    for chunk in export_jsonl(filters=ExportFilters()):
                        handle.write(chunk)
                raise _Rollback
        except _Rollback:
            pass
    yield path


def _verify(path: Path) -> Report:
    return verify_export_file(path, load_public_key(PUBLIC_KEY))


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _run_lines(lines: list[bytes]) -> list[int]:
    return [i for i, raw in enumerate(lines) if raw.startswith(b'{"kind":"run"')]


def _tampered(path: Path, lines: list[bytes], name: str) -> Path:
    out = path.parent / name
    out.write_bytes(b"".join(lines))
    return out


def test_an_export_of_1000_runs_verifies_offline(exported: Path) -> None:
    report = _verify(exported)
    assert report.problems == []
    assert report.ok
    assert report.runs == 1000
    assert report.runs_covered == 1000  # every head was signed before the export
    assert report.events_uncovered == 0
    assert report.checkpoints == 1


def test_changing_one_byte_of_one_event_names_that_run_and_event(exported: Path) -> None:
    lines = _lines(exported)
    target = _run_lines(lines)[500]
    record = json.loads(lines[target])
    run_id = record["run"]["id"]
    event = record["events"][2]  # seq 3: the first step_intent
    key = event["payload"]["idempotency_key"].encode()
    events_start = lines[target].index(b'"events":')
    position = lines[target].index(key, events_start) + 2  # inside the event's copy of the key
    raw = bytearray(lines[target])
    raw[position] = ord("0") if raw[position] != ord("0") else ord("1")  # one byte
    lines[target] = bytes(raw)
    report = _verify(_tampered(exported, lines, "one-byte.jsonl"))
    assert not report.ok
    broken_hashes = {
        (p.run, p.event) for p in report.problems if "hash does not match" in p.message
    }
    assert broken_hashes == {(run_id, 3)}
    # the edited key no longer vouches for step 0's key either (its last event is seq 4)
    step_problems = {(p.event, p.message) for p in report.problems if p.message.startswith("step")}
    assert step_problems == {(4, "step 0 idempotency_key does not match its events")}
    # the line chain points at the same run's line, and nothing else is accused
    assert {p.run for p in report.problems} == {run_id}


def test_deleting_one_line_is_detected(exported: Path) -> None:
    lines = _lines(exported)
    deleted = _run_lines(lines)[123]
    next_run = json.loads(lines[deleted + 1])["run"]["id"]
    del lines[deleted]
    report = _verify(_tampered(exported, lines, "deleted.jsonl"))
    assert not report.ok
    assert report.runs == 999
    messages = [str(p) for p in report.problems]
    assert any(f"line {deleted + 1} run {next_run}" in m and "deleted" in m for m in messages)
    assert any("counts 1000 runs, found 999" in m for m in messages)


def test_deleting_the_last_line_the_trailer_is_detected(exported: Path) -> None:
    lines = _lines(exported)[:-1]
    report = _verify(_tampered(exported, lines, "truncated.jsonl"))
    assert not report.ok
    assert any("no signed trailer" in p.message for p in report.problems)


def test_reordering_events_in_a_run_is_detected_and_named(exported: Path) -> None:
    lines = _lines(exported)
    target = _run_lines(lines)[42]
    record = json.loads(lines[target])
    events = record["events"]
    events[5], events[6] = events[6], events[5]
    lines[target] = json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    report = _verify(_tampered(exported, lines, "reordered-events.jsonl"))
    assert not report.ok
    run_id = record["run"]["id"]
    assert {p.run for p in report.problems} == {run_id}
    assert any(p.event == 7 and "seq 7 where 6 was expected" in p.message for p in report.problems)


def test_reordering_lines_is_detected(exported: Path) -> None:
    lines = _lines(exported)
    a, b = _run_lines(lines)[10], _run_lines(lines)[11]
    lines[a], lines[b] = lines[b], lines[a]
    report = _verify(_tampered(exported, lines, "reordered-lines.jsonl"))
    assert not report.ok
    assert any("moved" in p.message for p in report.problems)


def test_a_forged_checkpoint_or_another_key_is_refused(exported: Path) -> None:
    lines = _lines(exported)
    cp = next(i for i, raw in enumerate(lines) if raw.startswith(b'{"kind":"checkpoint"'))
    record = json.loads(lines[cp])
    record["statement"]["leaves"] += 1
    lines[cp] = json.dumps(record, separators=(",", ":")).encode() + b"\n"
    report = _verify(_tampered(exported, lines, "forged-checkpoint.jsonl"))
    assert any("checkpoint 1: signature does not verify" in p.message for p in report.problems)

    other = public_key_text(private_key_parse(private_key_generate()).public_key())
    report = verify_export_file(exported, load_public_key(other))
    assert not report.ok
    assert any("signature does not verify" in p.message for p in report.problems)


def _env_without_database() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    # nothing listens on port 1: any attempt to reach a database would fail loudly
    env |= {"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "SECRET_KEY": "offline"}
    return env


@pytest.mark.slow  # a verifier process of its own (about 2 s)
def test_verify_export_command_needs_no_database(exported: Path) -> None:
    ok = subprocess.run(
        [sys.executable, "manage.py", "verify_export", str(exported), "--public-key", PUBLIC_KEY],
        cwd=ROOT,
        env=_env_without_database(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip().endswith("OK")
    assert "checked 1000 runs" in ok.stdout

    lines = _lines(exported)
    target = _run_lines(lines)[7]
    run_id = json.loads(lines[target])["run"]["id"]
    lines[target] = lines[target].replace(b'"type":"step_done"', b'"type":"step_dona"', 1)
    broken = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "verify_export",
            str(_tampered(exported, lines, "cli.jsonl")),
            "--public-key",
            PUBLIC_KEY,
        ],
        cwd=ROOT,
        env=_env_without_database(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert broken.returncode == 1
    assert f"run {run_id} event 4: hash does not match" in broken.stdout


@pytest.mark.slow  # a verifier process of its own (about 2 s)
def test_verify_export_needs_none_of_the_servers_settings(exported: Path) -> None:
    """An auditor's laptop has the export and the public key, not SECRET_KEY or a database."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SECRET_KEY", "DATABASE_URL", "DEBUG", "DJANGO_SETTINGS_MODULE")
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "verify_export", str(exported), "--public-key", PUBLIC_KEY],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("OK")


@pytest.mark.slow  # a verifier process of its own (about 2 s)
def test_the_verifier_runs_without_django_at_all(exported: Path, tmp_path: Path) -> None:
    key_file = tmp_path / "public.key"
    key_file.write_text(PUBLIC_KEY + "\n")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)}
    script = (
        "import sys, runpy; sys.modules['django'] = None; "  # importing Django would fail
        "sys.argv = ['verify', sys.argv[1], '--public-key', sys.argv[2]]; "
        "runpy.run_module('audit.verify', run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(exported), str(key_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("OK")


@pytest.mark.slow  # a verifier process of its own (about 2 s)
def test_the_files_the_exports_page_lists_are_all_the_verifier_needs(
    exported: Path, tmp_path: Path
) -> None:
    """An auditor copies only audit.verify.OFFLINE_FILES (the exports page lists them) into an
    empty folder and runs `python -m audit.verify` there, Django unimportable."""
    from audit.verify import OFFLINE_FILES

    auditor = tmp_path / "auditor"
    for path in OFFLINE_FILES:
        (auditor / path).parent.mkdir(parents=True, exist_ok=True)
        (auditor / path).write_bytes((ROOT / path).read_bytes())
    key_file = tmp_path / "public.key"
    key_file.write_text(PUBLIC_KEY + "\n")
    script = (
        "import sys, runpy; sys.modules['django'] = None; "
        "sys.argv = ['verify', sys.argv[1], '--public-key', sys.argv[2]]; "
        "runpy.run_module('audit.verify', run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(exported), str(key_file)],
        cwd=auditor,
        env={"PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("OK")
