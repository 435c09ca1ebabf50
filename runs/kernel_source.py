"""The journal kernel's one source (runs/sql/ledger.sql), its frozen snapshots and the database.

A kernel change is: edit ledger.sql, run `manage.py kernel_snapshot`, which freezes the file's
text into a new migration `runs/migrations/NNNN_kernel_snapshot.py`. Migrations never read
ledger.sql (a later edit must not change what an old migration does); the snapshot is the copy
they run. Two checks keep the three in step:

- `snapshot_differs`: the newest snapshot holds exactly ledger.sql (`kernel_snapshot --check`,
  as `makemigrations --check` does for models);
- `database_drift`: the database runs no kernel function or trigger the source does not hold,
  and lacks nothing the source defines. It executes ledger.sql inside a transaction it rolls
  back and reports what executing it would change, so it compares the definitions PostgreSQL
  itself prints (pg_get_functiondef, pg_get_triggerdef), not our reading of the file.

One block of ledger.sql is generated, not written: `ledger_transition_allowed`, the transition
tables of runs/constants.py (the one source) as SQL, which the guard triggers on runs_run and
runs_step enforce. `kernel_snapshot` renders it into the source before freezing it, and
`--check` fails while the block in the file is not what the tables render (`transitions_stale`).
"""

import ast
import re
from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from pathlib import Path

from django.db import connection, transaction

from runs.constants import RUN_TRANSITIONS, STEP_TRANSITIONS

RUNS = Path(__file__).resolve().parent
SOURCE = RUNS / "sql" / "ledger.sql"
MIGRATIONS = RUNS / "migrations"
SNAPSHOT_SUFFIX = "_kernel_snapshot.py"
_NUMBERED = re.compile(r"^(\d{4})_\w+\.py$")

# what the kernel is in the database: the ledger_* functions, the journal's trigger functions
# (runs_*, returning trigger) and the triggers on its tables; partitions' clones of a parent's
# trigger are not counted
_FUNCTIONS = r"""
SELECT p.oid, p.xmin::text, format('%s(%s)', p.proname, pg_get_function_identity_arguments(p.oid)),
       pg_get_functiondef(p.oid)
FROM pg_proc p
WHERE p.pronamespace = current_schema()::regnamespace
  AND (p.proname LIKE 'ledger\_%'
       OR (p.proname LIKE 'runs\_%' AND p.prorettype = 'trigger'::regtype))
"""
_TRIGGERS = r"""
SELECT t.oid, format('%s on %s', t.tgname, c.relname), pg_get_triggerdef(t.oid)
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE NOT t.tgisinternal AND t.tgparentid = 0
  AND c.relnamespace = current_schema()::regnamespace AND c.relname LIKE 'runs\_%'
  AND t.tgname NOT LIKE 'teams\_%'
"""
# (the teams' boundary puts a trigger of its own on the journal's tables, `teams_team_fill`:
# teams/sql/boundary.sql is its source, not ledger.sql)


GENERATED_BEGIN = "-- BEGIN generated from the transition tables in runs/constants.py"
GENERATED_END = "-- END generated"
Tables = Mapping[str, Mapping[str, Set[str]]]


def transitions_sql(tables: Tables | None = None) -> str:
    """`ledger_transition_allowed(kind, from, to)`: the tables (kind `run`: RUN_TRANSITIONS,
    `step`: STEP_TRANSITIONS) as one immutable CASE; a state missing from a table allows nothing."""
    if tables is None:
        tables = {"run": RUN_TRANSITIONS, "step": STEP_TRANSITIONS}
    lines = [
        GENERATED_BEGIN,
        "-- by `manage.py kernel_snapshot`: edit the tables, not this block (kernel_snapshot --check",
        "-- fails while it is stale). The guard triggers below hold every status and state change",
        "-- to it, the kernel's own assignments included.",
        "CREATE OR REPLACE FUNCTION ledger_transition_allowed(p_kind text, p_from text, p_to text)",
        "RETURNS boolean",
        "LANGUAGE sql IMMUTABLE AS $$",
        "    SELECT COALESCE(CASE p_kind",
    ]
    for kind, table in tables.items():
        lines.append(f"        WHEN '{kind}' THEN CASE p_from")
        for source in sorted(table):
            targets = ", ".join(f"'{t}'" for t in sorted(str(t) for t in table[source]))
            lines.append(
                f"            WHEN '{source}' THEN "
                + (f"p_to IN ({targets})" if targets else "false")
            )
        lines.append("        END")
    lines += ["    END, false)", "$$;", GENERATED_END]
    return "\n".join(lines)


def source_rendered(text: str, tables: Tables | None = None) -> str:
    """`text` (ledger.sql) with its generated block rendered from the tables."""
    begin = text.index(GENERATED_BEGIN)
    end = text.index(GENERATED_END, begin) + len(GENERATED_END)
    return text[:begin] + transitions_sql(tables) + text[end:]


def transitions_stale(source: Path = SOURCE, tables: Tables | None = None) -> bool:
    text = source.read_text()
    return source_rendered(text, tables) != text


def transitions_render(source: Path = SOURCE, tables: Tables | None = None) -> bool:
    """Write the generated block into `source`; answers whether it changed."""
    text = source.read_text()
    rendered = source_rendered(text, tables)
    if rendered != text:
        source.write_text(rendered)
    return rendered != text


def snapshots(folder: Path = MIGRATIONS) -> list[Path]:
    """The snapshot migrations, oldest first."""
    return sorted(folder.glob(f"[0-9][0-9][0-9][0-9]{SNAPSHOT_SUFFIX}"))


def snapshot_sql(migration: Path) -> str:
    """The SQL a snapshot migration froze: its module-level `SQL` string, read without
    importing it (the command also reads copies outside the package)."""
    for node in ast.parse(migration.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["SQL"]
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    raise ValueError(f"{migration} has no SQL = '...' string")


def snapshot_differs(source: Path = SOURCE, folder: Path = MIGRATIONS) -> bool:
    """True when ledger.sql is not what the newest snapshot migration holds (or none exists)."""
    taken = snapshots(folder)
    return not taken or snapshot_sql(taken[-1]) != source.read_text()


def snapshot_write(source: Path = SOURCE, folder: Path = MIGRATIONS) -> Path:
    """Writes ledger.sql's text as the next migration of `folder` and returns its path."""
    sql = source.read_text()
    if '"""' in sql or sql.endswith("\\"):
        raise ValueError('ledger.sql cannot be embedded in r"""...""": it holds """ or ends in \\')
    numbered = sorted(p for p in folder.glob("*.py") if _NUMBERED.match(p.name))
    if not numbered:
        raise ValueError(f"{folder} has no numbered migration to follow")
    latest = numbered[-1]
    number = int(latest.name[:4]) + 1
    path = folder / f"{number:04d}{SNAPSHOT_SUFFIX}"
    path.write_text(
        f'"""The journal kernel as runs/sql/ledger.sql held it when this snapshot was\n'
        f"taken (`manage.py kernel_snapshot`); frozen: a later edit of ledger.sql makes a new\n"
        f"snapshot. Every statement is idempotent, so a database that already runs these bodies\n"
        f"is unchanged. Backwards leaves the functions as they are: a snapshot is not undone by\n"
        f"the one before it.\n"
        f'"""\n'
        f"\n"
        f"from django.db import migrations\n"
        f"\n"
        f'SQL = r"""{sql}"""\n'
        f"\n"
        f"\n"
        f"class Migration(migrations.Migration):\n"
        f'    dependencies = [("runs", "{latest.stem}")]\n'
        f"\n"
        f"    operations = [migrations.RunSQL(SQL, migrations.RunSQL.noop)]\n"
    )
    return path


@dataclass
class Drift:
    """How the database's kernel differs from the source; empty when they agree."""

    differs: list[str] = field(default_factory=list)  # both define it, not alike
    not_in_source: list[str] = field(default_factory=list)  # the database runs what no source holds
    not_in_database: list[str] = field(default_factory=list)  # the source defines what is missing

    def __bool__(self) -> bool:
        return bool(self.differs or self.not_in_source or self.not_in_database)

    def __str__(self) -> str:
        parts = [
            f"{label}: {', '.join(sorted(names))}"
            for label, names in (
                ("differs from ledger.sql", self.differs),
                ("the database runs, ledger.sql does not define", self.not_in_source),
                ("ledger.sql defines, the database lacks", self.not_in_database),
            )
            if names
        ]
        return "; ".join(parts) or "the database runs exactly ledger.sql"


def database_drift(sql: str | None = None) -> Drift:
    """Compares the kernel the database runs with `sql` (ledger.sql by default).

    Executes the source in a savepoint and rolls it back: a function the source defines has a
    new row version afterwards (CREATE OR REPLACE rewrites it even when alike), a trigger it
    defines a new oid (DROP then CREATE). It locks runs_event and runs_run while it runs; meant
    for tests and for a maintainer's `kernel_snapshot --drift`, not for a busy database."""
    sql = SOURCE.read_text() if sql is None else sql
    drift = Drift()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_FUNCTIONS)
        functions = {name: (oid, xmin, definition) for oid, xmin, name, definition in cursor}
        cursor.execute(_TRIGGERS)
        triggers = {name: (oid, definition) for oid, name, definition in cursor}
        sid = transaction.savepoint_create()
        try:
            cursor.execute(sql)
            cursor.execute(_FUNCTIONS)
            after = {name: (oid, xmin, definition) for oid, xmin, name, definition in cursor}
            cursor.execute(_TRIGGERS)
            triggers_after = {name: (oid, definition) for oid, name, definition in cursor}
        finally:
            transaction.savepoint_rollback(sid)
    for name, (oid, xmin, definition) in after.items():
        if name not in functions:
            drift.not_in_database.append(name)
        elif (oid, xmin) == functions[name][:2]:
            drift.not_in_source.append(name)
        elif definition != functions[name][2]:
            drift.differs.append(name)
    for name, (oid, definition) in triggers_after.items():
        if name not in triggers:
            drift.not_in_database.append(f"trigger {name}")
        elif oid == triggers[name][0]:
            drift.not_in_source.append(f"trigger {name}")
        elif definition != triggers[name][1]:
            drift.differs.append(f"trigger {name}")
    return drift
