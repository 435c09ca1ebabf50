"""A worker's step records: the journal kernel's statements, and the gateway's outcome.

Locks: `step_intent_record` / `step_outcome_record` are runs.kernel's statements, which lock the
run (then its step) themselves; the caller holds no run lock. `step_outcome_from_gateway` runs
inside the gateway's transaction that finishes the idempotency key (holding the key's row),
and the kernel takes the run's row lock after it.
"""

import logging
from typing import Any
from uuid import UUID

from runs import kernel
from runs.api_errors import ApplicationError

logger = logging.getLogger(__name__)


# The two hot calls are the journal kernel's statements themselves (runs/kernel.py), rules and
# all: the service layer adds nothing between them and the caller.
step_intent_record = kernel.step_intent
step_outcome_record = kernel.step_outcome


def step_outcome_from_gateway(
    *, run_id: UUID | str, index: int, epoch: int, ok: bool, result: Any, actor: str
) -> kernel.StepAnswer | kernel.BudgetStopped | None:
    """The gateway records a step's outcome when it completes (or fails) the step's key.

    Runs inside the transaction that finishes the key, so the tool's rows, the key's response,
    the step's outcome and its `step_done` / `step_error` event commit together. A refusal (the
    run moved to another epoch, the step is no longer an open intent) records nothing and is
    not an error: the effect happened under the key, and whoever holds the step now gets the
    key's stored response and its outcome from the next invoke (or recovery reconciles it).
    Returns the journal's answer, the budget stop it recorded (the caller raises it once the
    key's transaction has committed), or None when it refused.
    """
    try:
        return kernel.step_outcome(
            run_id=run_id,
            index=index,
            epoch=epoch,
            status="ok" if ok else "error",
            result=result,
            usage=None,
            actor=actor,
        )
    except kernel.BudgetStopped as stop:
        return stop
    except ApplicationError as refusal:
        logger.info(
            "gateway outcome of %s step %s not recorded: %s %s",
            run_id,
            index,
            refusal.code,
            refusal.details,
        )
        return None
