"""Who may do what on the audit pages (the groups come from review.roles)."""

from typing import Any

from review.roles import ADMINS


def can_export(user: Any) -> bool:
    """Auditors and admins (the `review.export` permission); supervisors may not."""
    return bool(user.is_authenticated and user.has_perm("review.export"))


def is_admin(user: Any) -> bool:
    return bool(
        user.is_authenticated and (user.is_superuser or user.groups.filter(name=ADMINS).exists())
    )
