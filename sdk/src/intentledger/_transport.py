"""How a Ledger reaches the journal: one method per call the SDK makes.

`HttpTransport` (intentledger._http) speaks the public REST contract and is the default. A worker
process beside the database may hand `Ledger(transport=...)` another implementation (the
server's `runs.inprocess.InProcessTransport` calls the journal kernel in-process). Whatever the
transport, a method answers the contract's JSON representation (plain dicts and lists) and
refuses with the exceptions of `intentledger.errors`, carrying the contract's code, HTTP status
and details, so `Run` cannot tell one transport from another.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class StepOutcome:
    """What a step did: the body of POST /runs/{id}/steps/{index}/outcome, or carried by the
    next step's intent as its `previous_outcome` (a write enforced by the tool)."""

    index: int
    status: str
    result: Any
    usage: dict[str, Any]

    def body(self, *, epoch: int) -> dict[str, Any]:
        """The outcome call's JSON body (its path names the index)."""
        return {"epoch": epoch, "status": self.status, "result": self.result, "usage": self.usage}


@dataclass(frozen=True)
class StepIntent:
    """The body of POST /runs/{id}/steps/, one value from the step's logic to the wire.

    A step journalled before it runs; with `outcome` a read step done in the same call, with
    `invoke` a gateway step run by the ledger. `previous_outcome` ({index, status, result,
    usage}) is the step before's outcome (a write enforced_by tool), recorded first in the same
    transaction."""

    epoch: int
    index: int
    kind: str
    name: str
    effect: str
    arguments: dict[str, Any]
    enforced_by: str | None = None
    outcome: dict[str, Any] | None = None
    invoke: bool = False
    previous_outcome: StepOutcome | None = None

    def body(self) -> dict[str, Any]:
        """The contract's JSON body: optional fields at their default are left out (asdict
        turns a previous_outcome into its {index, status, result, usage})."""
        return {k: v for k, v in asdict(self).items() if v is not None and v is not False}


@dataclass(frozen=True)
class ToolCall:
    """POST /tools/{name}/invoke: a registered tool run by the ledger's gateway, at most once per
    key (a write's key is its journalled step's, fenced by the lease `epoch` that journalled it)."""

    name: str
    arguments: dict[str, Any]
    idempotency_key: str | None = None
    epoch: int | None = None


class Transport(Protocol):
    """The calls of the worker API and the tool gateway the SDK makes, by name."""

    def create_run(
        self, *, agent: str, input: Any, external_id: str | None, traceparent: str | None = None
    ) -> dict[str, Any]:
        """POST /runs/: the new run, or the existing one of (agent, external_id); `traceparent`
        (W3C) puts the run's trace under the caller's span."""
        ...

    def get_run(self, run_id: str, *, wait: int | None = None) -> dict[str, Any]:
        """GET /runs/{id}/ (`wait`: seconds to wait for the run to settle, 0..60)."""
        ...

    def find_runs(
        self, *, agent: str, external_id: str, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """GET /runs/?agent=&external_id=: the runs the token may see, newest first."""
        ...

    def journal(self, run_id: str) -> dict[str, Any]:
        """GET /runs/{id}/journal: {steps, events}."""
        ...

    def lease(self, run_id: str, *, worker: str, ttl_seconds: int) -> dict[str, Any]:
        """POST /runs/{id}/lease: {run, epoch, expires_at, recovered, journal}."""
        ...

    def heartbeat(self, run_id: str, *, epoch: int) -> dict[str, Any]:
        """POST /runs/{id}/heartbeat: {expires_at, status, epoch}."""
        ...

    def step_record(self, run_id: str, intent: StepIntent) -> dict[str, Any]:
        """POST /runs/{id}/steps/: the step; `awaiting_approval` when an approval rule holds it."""
        ...

    def step_outcome(self, run_id: str, outcome: StepOutcome, *, epoch: int) -> dict[str, Any]:
        """POST /runs/{id}/steps/{index}/outcome: {step, budget}."""
        ...

    def step_wait(self, run_id: str, index: int, *, wait: int) -> dict[str, Any]:
        """GET /runs/{id}/steps/{index}/?wait=: the step once people decide (or at `wait`)."""
        ...

    def run_complete(self, run_id: str, *, epoch: int, output: Any) -> dict[str, Any]:
        """POST /runs/{id}/complete: the run."""
        ...

    def run_fail(self, run_id: str, *, epoch: int, error: Any) -> dict[str, Any]:
        """POST /runs/{id}/fail: the run."""
        ...

    def tool_invoke(self, call: ToolCall) -> Any:
        """POST /tools/{name}/invoke: the tool's result, at most once per key."""
        ...

    def tools_list(self) -> list[dict[str, Any]]:
        """GET /tools/: the registered tools with their effect."""
        ...

    def mcp_tools_report(self, *, server: str, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """POST /mcp/tools/: an MCP proxy's upstream tools, answered with the admins' marks."""
        ...

    def close(self) -> None: ...


__all__ = ["Transport"]
