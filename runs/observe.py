"""What the hot worker calls tell the outside: a latency histogram per call, and log context.

`step_call` wraps one hot call (runs.hotpath.answer): it times it into
`intentledger_step_call_seconds{call, code}` and puts `run_id` / `step_index` into a context
variable that the JSON log formatter (console.logs, `LOG_FORMAT=json`) adds to every record
written while the call runs. Django-free apart from nothing: prometheus_client and the stdlib.
"""

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from prometheus_client import Histogram

logger = logging.getLogger("intentledger.calls")

STEP_CALL_SECONDS = Histogram(
    "intentledger_step_call_seconds",
    "Time the ledger spent answering one hot worker call (lean path), by call and answer code.",
    ["call", "code"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)

# {"run_id": "...", "step_index": 3}: read by console.logs.JsonFormatter
log_context: ContextVar[dict[str, Any] | None] = ContextVar(
    "intentledger_log_context", default=None
)


class CallOutcome:
    """Set `code` to the answer's code ("ok" unless refused) before the block ends."""

    code = "ok"

    def __init__(self, context: dict[str, Any]) -> None:
        self._context = context

    def name_run(self, run_id: str) -> None:
        """The run a call without one in its path (create) turned out to be about."""
        self._context["run_id"] = run_id


@contextmanager
def step_call(call: str, *, run_id: Any, index: int | None) -> Iterator[CallOutcome]:
    """`run_id` None: a create, whose run is named once known (`CallOutcome.name_run`)."""
    context = {"run_id": None if run_id is None else str(run_id), "step_index": index, "call": call}
    outcome = CallOutcome(context)
    token = log_context.set(context)
    started = time.perf_counter()
    try:
        yield outcome
    except BaseException:
        outcome.code = "exception"
        raise
    finally:
        elapsed = time.perf_counter() - started
        STEP_CALL_SECONDS.labels(call, outcome.code).observe(elapsed)
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "%s %s", call, outcome.code, extra={"duration_ms": round(elapsed * 1000, 3)}
            )
        log_context.reset(token)
