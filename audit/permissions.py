"""Who may do what on the audit pages: permissions (dashboard.roles hands them to the groups)."""

from typing import Any


def can_export(user: Any) -> bool:
    """Auditors and admins (the `review.export` permission); supervisors may not."""
    return bool(user.is_authenticated and user.has_perm("review.export"))


def is_admin(user: Any) -> bool:
    """Checkpoints, alerts, retention and everyone's exports (`review.manage_audit`)."""
    return bool(user.is_authenticated and user.has_perm("review.manage_audit"))
