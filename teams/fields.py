"""The team column every team-owned table carries (issue 47, docs/teams.md)."""

from typing import Any

from django.db import models


class TeamField(models.ForeignKey):
    """A row's team: NOT NULL, never deleted under its rows (PROTECT), never edited in a form.

    Writers need not name it: the database fills a NULL team from the row's parent (a run's
    steps and events take the run's team) or, for a top-level row (a token, a policy), from the
    one team the transaction names (teams/sql/boundary.sql, `teams_team_fill`). `db_returning`
    makes Django read the filled value back from INSERT ... RETURNING, so `obj.team_id` is set
    after `create()` as a primary key is.
    """

    db_returning = True  # type: ignore[assignment]

    def __init__(self, to: Any = "teams.Team", on_delete: Any = models.PROTECT, **kwargs: Any):
        kwargs.setdefault("related_name", "+")
        kwargs.setdefault("editable", False)
        kwargs.setdefault("blank", True)
        super().__init__(to, on_delete, **kwargs)


def default_team_id() -> int:
    """The `default` team's id, for the migrations that add a team column: every row that existed
    before teams is filed in `default` (a constant DEFAULT on ADD COLUMN, so PostgreSQL writes no
    row and the append-only tables' triggers never see an UPDATE)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM teams_team WHERE slug = 'default'")
        row = cursor.fetchone()
    if row is None:
        raise RuntimeError("teams_team holds no `default` team (teams/0002 makes it)")
    return int(row[0])
