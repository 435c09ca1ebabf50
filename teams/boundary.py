"""The teams' boundary in SQL (teams/sql/boundary.sql): its one source, and the frozen copy the
migrations run. Changing it: edit boundary.sql, then `manage.py boundary_snapshot` writes the
next `teams/migrations/NNNN_boundary.py` (as `kernel_snapshot` does for the journal kernel);
tests/teams/test_boundary_source.py fails while the newest copy differs from the file."""

import re
from pathlib import Path

from runs.kernel_source import snapshot_sql

TEAMS = Path(__file__).resolve().parent
SOURCE = TEAMS / "sql" / "boundary.sql"
MIGRATIONS = TEAMS / "migrations"
_NUMBERED = re.compile(r"^(\d{4})_\w+\.py$")


def snapshots(folder: Path = MIGRATIONS) -> list[Path]:
    return sorted(folder.glob("[0-9][0-9][0-9][0-9]_boundary.py"))


def snapshot_differs(source: Path = SOURCE, folder: Path = MIGRATIONS) -> bool:
    taken = snapshots(folder)
    return not taken or snapshot_sql(taken[-1]) != source.read_text()


def snapshot_write(
    source: Path = SOURCE, folder: Path = MIGRATIONS, dependencies: tuple[tuple[str, str], ...] = ()
) -> Path:
    """boundary.sql's text as the next migration of `folder`; answers its path."""
    sql = source.read_text()
    if '"""' in sql or sql.endswith("\\"):
        raise ValueError(
            'boundary.sql cannot be embedded in r"""...""": it holds """ or ends in \\'
        )
    numbered = sorted(p for p in folder.glob("*.py") if _NUMBERED.match(p.name))
    latest = numbered[-1]
    path = folder / f"{int(latest.name[:4]) + 1:04d}_boundary.py"
    needs = [("teams", latest.stem), *dependencies]
    path.write_text(
        '"""The teams\' boundary as teams/sql/boundary.sql held it when this copy was taken\n'
        "(`manage.py boundary_snapshot`); frozen: a later edit makes a new copy. Every statement\n"
        'is idempotent. Backwards leaves it in place.\n"""\n\n'
        "from django.db import migrations\n\n"
        f'SQL = r"""{sql}"""\n\n\n'
        "class Migration(migrations.Migration):\n"
        f"    dependencies = {needs!r}\n\n"
        "    operations = [migrations.RunSQL(SQL, migrations.RunSQL.noop)]\n"
    )
    return path
