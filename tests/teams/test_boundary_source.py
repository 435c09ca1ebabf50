"""teams/sql/boundary.sql is the boundary's one source: the newest boundary migration holds it."""

from teams.boundary import SOURCE, snapshot_differs, snapshot_sql, snapshots


def test_the_newest_boundary_migration_holds_boundary_sql() -> None:
    assert snapshots(), "no teams/migrations/NNNN_boundary.py"
    assert not snapshot_differs(), "run `manage.py boundary_snapshot`"
    assert snapshot_sql(snapshots()[-1]) == SOURCE.read_text()
