"""A key-enforced write step's p50 through the SDK over HTTP: its outcome by its own call (as
before `previous_outcome`) against carried by the next step's call, alternating in one process.

    python -m bench.carried_write URL TOKEN [STEPS] [RUNS]

"own call" flushes each step's held outcome right after the step (the SDK's old two calls);
"carried" leaves it to ride on the next step's intent (one call per step).
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from intentledger import Ledger


def _charge(i: int, idempotency_key: str) -> dict[str, Any]:
    return {"charged": i, "key": idempotency_key[:8]}


def measure(url: str, token: str, *, steps: int = 15, runs: int = 20) -> dict[str, float]:
    """p50 and p90 in ms of one write step, each way."""
    times: dict[str, list[float]] = {"own_call": [], "carried": []}
    with Ledger(url, token) as ledger:
        for r in range(runs):
            for mode in ("own_call", "carried") if r % 2 else ("carried", "own_call"):
                with ledger.run("bench-carried-write", {}, worker=f"bench-{r}") as run:
                    for i in range(steps):
                        started = time.perf_counter()
                        run.tool("payments.charge", {"i": i}, fn=_charge)
                        if mode == "own_call":
                            run._flush()
                        times[mode].append((time.perf_counter() - started) * 1000)
                    run.output = "ok"
    out: dict[str, float] = {}
    for mode, values in times.items():
        cuts = statistics.quantiles(values, n=10)
        out[f"{mode}_p50_ms"] = statistics.median(values)
        out[f"{mode}_p90_ms"] = cuts[8]
    out["steps_each"] = float(len(times["carried"]))
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    figures = measure(
        args[0], args[1], **dict(zip(("steps", "runs"), map(int, args[2:4]), strict=False))
    )
    for name, value in figures.items():
        print(f"{name}: {value:.3f}")
