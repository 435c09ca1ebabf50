"""Login throttling: a failure counter per (username, ip), a lockout window, audited attempts.

Lock precondition: none held by the caller; `login_failure_record` locks the counter row
(`select_for_update`, created if missing) in its own transaction, so concurrent failures all count.
"""

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from dashboard.audit import audit_record
from review.models import LoginFailure


def login_max_failures() -> int:
    return int(getattr(settings, "LOGIN_MAX_FAILURES", 5))


def login_lockout_seconds() -> int:
    return int(getattr(settings, "LOGIN_LOCKOUT_SECONDS", 15 * 60))


def login_locked_until(*, username: str, ip: str) -> Any:
    """When the (username, ip) pair may try again, or None if it may now."""
    row = LoginFailure.objects.filter(username=username.lower()[:150], ip=ip).first()
    if row and row.locked_until and row.locked_until > timezone.now():
        return row.locked_until
    return None


def login_failure_record(*, username: str, ip: str) -> LoginFailure:
    """Count one failure; the window restarts after a lockout period without failures."""
    now = timezone.now()
    window = timedelta(seconds=login_lockout_seconds())
    with transaction.atomic():
        row, _ = LoginFailure.objects.select_for_update().get_or_create(
            username=username.lower()[:150], ip=ip, defaults={"first_failure_at": now}
        )
        if now - row.first_failure_at > window or (row.locked_until and row.locked_until <= now):
            row.failures = 0
            row.first_failure_at = now
            row.locked_until = None
        row.failures += 1
        locks = row.failures >= login_max_failures() and row.locked_until is None
        if row.failures >= login_max_failures():
            row.locked_until = now + window
        row.save()
        audit_record(
            actor="anonymous",
            action="login.failed",
            target=f"user:{username[:150]}",
            details={"ip": ip, "failures": row.failures},
        )
        if locks:
            assert row.locked_until is not None
            audit_record(
                actor="system:login",
                action="login.lockout",
                target=f"user:{username[:150]}",
                details={"ip": ip, "until": row.locked_until.isoformat()},
            )
        return row


def login_refused_record(*, username: str, ip: str, until: Any) -> None:
    """A login attempt during a lockout: refused without checking the password, audited."""
    audit_record(
        actor="anonymous",
        action="login.refused_locked",
        target=f"user:{username[:150]}",
        details={"ip": ip, "until": until.isoformat()},
    )


def login_success_clear(*, user: AbstractBaseUser, ip: str) -> None:
    """A successful login: the failure counter goes, the audit log gets the login."""
    username = user.get_username()
    LoginFailure.objects.filter(username=username.lower()[:150], ip=ip).delete()
    audit_record(actor=user, action="login", target=f"user:{username}", details={"ip": ip})


def login_failures_prune() -> int:
    """Forget failure counters whose window and lockout are both over (guessed names pile up)."""
    cutoff = timezone.now() - timedelta(seconds=login_lockout_seconds())
    deleted, _ = (
        LoginFailure.objects.filter(first_failure_at__lt=cutoff)
        .exclude(locked_until__gt=timezone.now())
        .delete()
    )
    return deleted
