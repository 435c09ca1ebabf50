"""A worker whose write steps are enforced by their tool, killed at the crash points of a
carried outcome (docs/design-notes.md): the kill tests of tests/reliability/test_carried_outcome.py.

    python -m tests.reliability.carry_agent URL TOKEN STORE POINT

The tool keeps its effects in STORE (one JSON line per key, fsynced): a key it has seen answers
its first result with no second effect, as `enforced_by: tool` promises. POINT is where the
process SIGKILLs itself:

    after_effect   step 0's effect happened, its outcome is held; the next step's call not sent
    after_carry    the call carrying step 0's outcome committed; its answer never processed
    before_flush   the last write's effect happened; the block ends, its outcome call not sent
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from intentledger import Ledger, Run, StepIntent

AGENT = "carry-kill"


class KeyedTool:
    """The tool side: at most one effect per idempotency key, recorded on disk."""

    def __init__(self, store: Path) -> None:
        self.store = store

    def effects(self) -> list[dict[str, Any]]:
        if not self.store.exists():
            return []
        return [json.loads(line) for line in self.store.read_text().splitlines()]

    def __call__(self, to: str, idempotency_key: str) -> dict[str, Any]:
        done = self.effects()
        for effect in done:
            if effect["key"] == idempotency_key:
                return dict(effect["answer"])
        answer = {"sent": to, "n": len(done) + 1}
        with self.store.open("a") as log:
            log.write(json.dumps({"key": idempotency_key, "answer": answer}) + "\n")
            log.flush()
            os.fsync(log.fileno())
        return answer


def steps(run: Run, send: KeyedTool, *, on_read: Any = None) -> None:
    """Two key-enforced writes around a read: the read's call carries the first's outcome."""
    first = run.tool("email", {"to": "a@example.com"}, fn=send)

    def note(n: int) -> int:
        if on_read is not None:
            on_read()
        return n

    run.tool("note", {"n": 1}, effect="read", fn=note)
    last = run.tool("email", {"to": "b@example.com"}, fn=send)
    run.output = [first, last]


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(url: str, token: str, store: str, point: str) -> None:
    send = KeyedTool(Path(store))
    with Ledger(url, token) as ledger:
        transport: Any = ledger._transport
        if point == "after_carry":
            record = transport.step_record

            def record_then_die(run_id: str, intent: StepIntent) -> Any:
                answer = record(run_id, intent)
                if intent.previous_outcome is not None:
                    _die()
                return answer

            transport.step_record = record_then_die
        if point == "before_flush":
            transport.step_outcome = lambda *args, **kwargs: _die()
        with ledger.run(AGENT, {}, external_id=point, worker="pod-1") as run:
            print(run.id, flush=True)
            steps(run, send, on_read=_die if point == "after_effect" else None)


if __name__ == "__main__":
    main(*sys.argv[1:5])
