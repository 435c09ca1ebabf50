"""The client an agent author holds: where the ledger is, and how to start or attach to runs."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from intentledger._http import HttpTransport
from intentledger._run import Run, StepInfo
from intentledger._worker_names import default_worker_name

if TYPE_CHECKING:
    from intentledger._transport import Transport

MAX_WAIT_SECONDS = 60  # the most one ?wait= call may ask for
SETTLED_STATUSES = frozenset(
    {"completed", "failed", "abandoned", "needs_review", "budget_exceeded"}
)


class Ledger:
    """`Ledger(url, token)`; then `with ledger.run(agent, input) as run:`.

    `retries` and `backoff` apply to connection errors and 5xx answers of the idempotent
    calls (everything but creating a run without an external_id).

    `transport`: how to reach the journal instead of HTTP to `url` (a worker beside the
    database passes the server's in-process transport); same answers, same exceptions.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        retries: int = 5,
        backoff: float = 0.1,
        transport: Transport | None = None,
    ) -> None:
        self.url: str | None = None
        if transport is not None:
            if url or token:
                raise ValueError("Ledger takes a url and a token, or a transport, not both.")
            self._transport: Transport = transport
            return
        url = url or os.environ.get("INTENTLEDGER_URL")
        token = token or os.environ.get("INTENTLEDGER_TOKEN")
        if not url or not token:
            raise ValueError(
                "Ledger needs a url and a token (or INTENTLEDGER_URL / INTENTLEDGER_TOKEN)."
            )
        self.url = url.rstrip("/")
        self._transport = HttpTransport(
            self.url, token, timeout=timeout, retries=retries, backoff=backoff
        )

    def run(
        self,
        agent: str,
        input: Any = None,
        *,
        external_id: str | None = None,
        worker: str | None = None,
        ttl_seconds: int = 30,
        on_step: Callable[[Run, StepInfo], None] | None = None,
        wait_for_approval: bool = True,
    ) -> Run:
        """A run context: creates the run (or attaches: same agent + external_id, same run).

        `wait_for_approval`: a write step an approval rule holds is waited for (a long poll, the
        lease kept alive); False stops the run instead (ApprovalPending) until people decide."""
        return Run(
            self,
            agent=agent,
            input=input,
            external_id=external_id,
            run_id=None,
            worker=worker or default_worker_name(),
            ttl_seconds=ttl_seconds,
            on_step=on_step,
            wait_for_approval=wait_for_approval,
        )

    def attach(
        self,
        run_id: str,
        *,
        worker: str | None = None,
        ttl_seconds: int = 30,
        on_step: Callable[[Run, StepInfo], None] | None = None,
        wait_for_approval: bool = True,
    ) -> Run:
        """A run context for an existing run id (a queue hands workers run ids)."""
        return Run(
            self,
            agent=None,
            input=None,
            external_id=None,
            run_id=str(run_id),
            worker=worker or default_worker_name(),
            ttl_seconds=ttl_seconds,
            on_step=on_step,
            wait_for_approval=wait_for_approval,
        )

    def get_run(self, run_id: str) -> dict[str, Any]:
        """The run's representation (status, budget, lease)."""
        return self._transport.get_run(str(run_id))

    def find(self, agent: str, external_id: str) -> dict[str, Any] | None:
        """The run of `agent` with `external_id` (a call that timed out made it?), or None."""
        runs = self._transport.find_runs(agent=agent, external_id=external_id)
        return dict(runs[0]) if runs else None

    def wait(self, run_id: str, *, timeout: float = 60.0) -> dict[str, Any]:
        """The run once it is final, needs review or is over budget, or after `timeout` seconds
        (then check its `status`). Long-polls the ledger (`?wait=`, at most 60 s a call)."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            remaining = deadline - time.monotonic()
            seconds = max(0, min(MAX_WAIT_SECONDS, int(remaining)))
            run = self._transport.get_run(str(run_id), wait=seconds)
            if run.get("status") in SETTLED_STATUSES or deadline - time.monotonic() < 1:
                return run

    def journal(self, run_id: str) -> dict[str, Any]:
        """{steps, events}: the run's transcript and hash-chained history."""
        return self._transport.journal(str(run_id))

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
