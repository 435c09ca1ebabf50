"""Beat task: a thin caller of the login throttle's pruning."""

from celery import shared_task

from dashboard.services.logins import login_failures_prune


@shared_task(name="dashboard.tasks.prune_login_failures")
def prune_login_failures() -> int:
    """Forget login-failure counters whose window and lockout are both over."""
    return login_failures_prune()
