"""Typed exceptions: one per thing a worker must react to differently."""

from typing import Any

# the package's public errors (`intentledger.__all__` takes them from here)
__all__ = [
    "ApprovalDenied",
    "ApprovalPending",
    "BudgetExceeded",
    "LeaseHeld",
    "LedgerError",
    "LedgerUnavailable",
    "NeedsReview",
    "NondeterminismError",
    "RunFinished",
    "StaleLease",
    "StepFailed",
    "StopRun",
]


class LedgerError(Exception):
    """The ledger refused a call; `code` is the contract's error code (e.g. `lease_held`)."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "ledger_error",
        status: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.details = details or {}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.code else self.message


class StopRun(LedgerError):
    """The worker must stop this run now and write nothing more; nothing is wrong with the code."""


class StaleLease(StopRun):
    """Another worker took the run over (409 `stale_epoch`): stop at once, write nothing more."""


class NeedsReview(StopRun):
    """A step may have happened (`unknown`) or the recovery budget is spent: a person decides."""


class BudgetExceeded(StopRun):
    """The run spent one of its budgets (steps, tokens, cost, wall clock)."""


class RunFinished(StopRun):
    """The run is already completed, failed or abandoned."""


class ApprovalPending(StopRun):
    """A write step waits for people's approval and the run was told not to wait
    (`wait_for_approval=False`): stop now; the run is offered to a worker again once decided."""


class ApprovalDenied(StopRun):
    """People denied this write step (or nobody approved it in time): it must not run.

    The agent may catch it and go on with another step (a replay raises it again at the same
    point, so the run stays deterministic). Uncaught, it is a clean stop like any StopRun (an
    `except StopRun` sees it, no traceback) and the run is recorded `failed` with this denial as
    its error, since no worker could get past the step. `details` holds `index`, `action`
    (`deny` or `expire`), `by`, `note` and `at`.
    """


class LeaseHeld(LedgerError):
    """Another live worker holds the lease; try again after `details['expires_at']`."""


class NondeterminismError(LedgerError):
    """The agent asked for a different step than the journal recorded at that index."""


class LedgerUnavailable(LedgerError):
    """The ledger could not be reached (or kept answering 5xx) after the retries."""


class StepFailed(Exception):
    """A journalled step ended in `error`; `result` holds what was recorded."""

    def __init__(self, name: str, index: int, result: Any) -> None:
        super().__init__(f"step {index} ({name}) failed: {result!r}")
        self.name = name
        self.index = index
        self.result = result


_BY_CODE: dict[str, type[LedgerError]] = {
    "stale_epoch": StaleLease,
    "needs_review": NeedsReview,
    "budget_exceeded": BudgetExceeded,
    "run_finished": RunFinished,
    "lease_held": LeaseHeld,
    "approval_denied": ApprovalDenied,
    "nondeterministic": NondeterminismError,
}


def error_from_response(status: int, body: Any) -> LedgerError:
    """Turn the contract's {"error": {code, message, details}} envelope into a typed exception."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return LedgerError(
            f"HTTP {status}: {str(body)[:300]}", code=f"http_{status}", status=status
        )
    code = str(error.get("code") or f"http_{status}")
    details = error.get("details") if isinstance(error.get("details"), dict) else {}
    cls = _BY_CODE.get(code, LedgerError)
    return cls(str(error.get("message") or code), code=code, status=status, details=details)
