"""runs/sql/ledger.sql is the journal kernel's one source (issue 37): the newest snapshot
migration holds exactly its text, and the database runs exactly what it defines. Both checks are
shown failing: on a copy of the source with an edit, and on a database with a drifted body."""

import shutil
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from runs.constants import RUN_TRANSITIONS, STEP_TRANSITIONS, RunStatus
from runs.kernel_source import (
    MIGRATIONS,
    SOURCE,
    database_drift,
    snapshot_differs,
    snapshot_sql,
    snapshots,
    source_rendered,
    transitions_sql,
)


def _check(source: Path, folder: Path) -> int:
    try:
        call_command("kernel_snapshot", check=True, source=source, migrations=folder)
    except SystemExit as exit:
        return int(exit.code or 0)
    return 0


def test_the_newest_snapshot_migration_holds_exactly_ledger_sql() -> None:
    assert snapshot_sql(snapshots()[-1]) == SOURCE.read_text()
    assert _check(SOURCE, MIGRATIONS) == 0


def test_an_edit_of_the_source_fails_the_check_until_a_snapshot_is_written(tmp_path: Path) -> None:
    folder = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    source = tmp_path / "ledger.sql"
    edited = SOURCE.read_text().replace(
        "CREATE OR REPLACE FUNCTION ledger_money(value numeric) RETURNS text",
        "-- a deliberate edit\nCREATE OR REPLACE FUNCTION ledger_money(value numeric) RETURNS text",
    )
    assert edited != SOURCE.read_text()
    source.write_text(edited)
    newest = snapshots(folder)[-1]

    assert _check(source, folder) == 1

    call_command("kernel_snapshot", source=source, migrations=folder)
    written = snapshots(folder)[-1]
    numbered = sorted(folder.glob("[0-9]*.py"))
    assert written == numbered[-1] != newest
    assert int(written.name[:4]) == int(numbered[-2].name[:4]) + 1
    assert snapshot_sql(written) == edited
    assert f'dependencies = [("runs", "{numbered[-2].stem}")]' in written.read_text()
    assert _check(source, folder) == 0
    # the snapshot before it is frozen: untouched by the edit
    assert snapshot_sql(newest) == SOURCE.read_text()
    assert not snapshot_differs(source, folder)


def test_no_migration_reads_the_kernel_source() -> None:
    for migration in MIGRATIONS.glob("*.py"):
        text = migration.read_text()
        for reads in ("read_text", "open(", "importlib", "pathlib"):
            assert reads not in text, (migration, reads)


@pytest.mark.django_db
def test_the_database_runs_exactly_what_ledger_sql_defines() -> None:
    drift = database_drift()
    assert not drift, str(drift)


@pytest.mark.django_db
def test_a_drifted_body_an_extra_function_and_a_missing_trigger_are_each_reported() -> None:
    with transaction.atomic():
        sid = transaction.savepoint_create()
        with connection.cursor() as cursor:
            cursor.execute(
                "CREATE OR REPLACE FUNCTION ledger_money(value numeric) RETURNS text "
                "LANGUAGE sql IMMUTABLE AS $$ SELECT to_char(value, 'FM0.00') $$"
            )
            cursor.execute(
                "CREATE FUNCTION ledger_stray() RETURNS integer LANGUAGE sql AS 'SELECT 1'"
            )
            cursor.execute("DROP TRIGGER runs_run_status_notify ON runs_run")
        drift = database_drift()
        transaction.savepoint_rollback(sid)

    assert drift.differs == ["ledger_money(value numeric)"]
    assert drift.not_in_source == ["ledger_stray()"]
    assert drift.not_in_database == ["trigger runs_run_status_notify on runs_run"]
    assert "ledger_money" in str(drift)
    # rolled back: the database agrees with the source again
    assert not database_drift()


@pytest.mark.django_db
def test_a_source_missing_a_function_reports_it_as_run_by_the_database_only() -> None:
    source = SOURCE.read_text()
    start = source.index("CREATE OR REPLACE FUNCTION ledger_money(")
    end = source.index("$$;", source.index("$$", start) + 2) + 3
    drift = database_drift(source[:start] + source[end:])

    assert drift.not_in_source == ["ledger_money(value numeric)"]
    assert not drift.differs and not drift.not_in_database


@pytest.mark.django_db
def test_the_drift_command_exits_non_zero_on_drift(tmp_path: Path) -> None:
    call_command("kernel_snapshot", drift=True)  # no drift: returns
    source = tmp_path / "ledger.sql"
    source.write_text(SOURCE.read_text().replace("'FM999999999999990.000000'", "'FM990.00'"))
    with pytest.raises(SystemExit) as exit:
        call_command("kernel_snapshot", drift=True, source=source)
    assert exit.value.code == 1


def test_the_generated_transition_block_is_what_the_tables_render() -> None:
    assert transitions_sql() in SOURCE.read_text()
    assert source_rendered(SOURCE.read_text()) == SOURCE.read_text()


def test_a_changed_transition_table_fails_the_check_until_rendered(tmp_path: Path) -> None:
    """Change a table (a run may no longer be cancelled while pending): --check fails on the
    source until kernel_snapshot renders the block again, and the new block says so."""
    folder = tmp_path / "migrations"
    shutil.copytree(MIGRATIONS, folder, ignore=shutil.ignore_patterns("__pycache__"))
    source = tmp_path / "ledger.sql"
    source.write_text(SOURCE.read_text())
    changed = {
        "run": {**RUN_TRANSITIONS, "pending": RUN_TRANSITIONS["pending"] - {RunStatus.CANCELLED}},
        "step": STEP_TRANSITIONS,
    }
    pending = "WHEN 'pending' THEN p_to IN ('abandoned', 'budget_exceeded', 'running')"
    assert pending in transitions_sql(changed) and pending not in source.read_text()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            "runs.kernel_source.transitions_sql", lambda tables=None: transitions_sql(changed)
        )
        assert _check(source, folder) == 1
        call_command("kernel_snapshot", source=source, migrations=folder)
        assert pending in source.read_text()
        assert pending in snapshot_sql(snapshots(folder)[-1])
        assert _check(source, folder) == 0
