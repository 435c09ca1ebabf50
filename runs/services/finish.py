"""A worker's last call on a run: complete or fail it, accounting for steps still open.

Both are the kernel's statement `ledger_run_finish` (runs/sql/ledger.sql): the epoch fence, the
accounting of steps still `intent` (a write that may have run goes to review) and the finish
itself, in one transaction under the run's row lock.

Locks: the caller holds no lock on the run; the kernel's statement takes it.
"""

from typing import Any
from uuid import UUID

from runs import kernel
from runs.constants import RunStatus
from runs.models import Run


def run_complete(*, run_id: UUID | str, epoch: int, output: Any, actor: str) -> Run:
    return kernel.run_finish(
        run_id=run_id, epoch=epoch, to=RunStatus.COMPLETED, value=output, actor=actor
    )


def run_fail(*, run_id: UUID | str, epoch: int, error: Any, actor: str) -> Run:
    return kernel.run_finish(
        run_id=run_id, epoch=epoch, to=RunStatus.FAILED, value=error, actor=actor
    )
