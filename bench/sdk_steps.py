"""Steps end to end through the worker SDK, over HTTP or in-process: what an agent author pays.

    python -m bench.sdk_steps --transport http --url URL --token T [--size B --runs N --reps R]
    python -m bench.sdk_steps --transport inprocess --token T [...] [--profile PATH]

Run by the project's interpreter in the served tree (`intentledger` from its sdk/src). A write
step is `run.tool(name, args, effect="write", fn=...)`: intent, the function, outcome; a read
step is `run.model(fn)`: one call with its outcome. `inprocess` journals through
`runs.inprocess.InProcessTransport` (Django's database connection, no HTTP), as a Celery-run
agent does. `--profile` writes a cProfile of the measured steps (pstats) to PATH. Prints one
JSON object: {"write": [[ms...]...], "read": [[ms...]...]}; a first repetition warms the
connection and code paths and is dropped.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import time
from typing import Any

STEPS = 20


def _ledger(transport: str, url: str, token: str) -> Any:
    if transport == "http":
        from intentledger import Ledger

        return Ledger(url, token)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from runs.inprocess import in_process_ledger

    return in_process_ledger(token)


def measure(
    ledger: Any, size: int, runs: int, reps: int, profiler: cProfile.Profile | None = None
) -> dict[str, list[list[float]]]:
    from bench.common import payload_of

    payload = payload_of(size)
    answer = {**payload, "usage": {"input_tokens": 1, "output_tokens": 1}}

    def tool(**_arguments: Any) -> dict[str, Any]:
        return payload

    def model(**_arguments: Any) -> dict[str, Any]:
        return answer

    out: dict[str, list[list[float]]] = {"write": [], "read": []}
    for rep in range(reps + 1):
        timed: dict[str, list[float]] = {"write": [], "read": []}
        if profiler is not None and rep == 1:
            profiler.enable()
        for _ in range(runs):
            with ledger.run("bench", {"bench": True}, ttl_seconds=60) as run:
                for i in range(STEPS):
                    t0 = time.perf_counter()
                    run.tool("bench.write", {"i": i}, effect="write", fn=tool, enforced_by="tool")
                    timed["write"].append((time.perf_counter() - t0) * 1000)
            with ledger.run("bench", {"bench": True}, ttl_seconds=60) as run:
                for i in range(STEPS):
                    t0 = time.perf_counter()
                    run.model(model, name="bench.read", i=i)
                    timed["read"].append((time.perf_counter() - t0) * 1000)
        if profiler is not None:
            profiler.disable()
        for key, values in timed.items():
            out[key].append(values)
    return {key: values[1:] for key, values in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=("http", "inprocess"), required=True)
    parser.add_argument("--url", default="")
    parser.add_argument("--token", required=True)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--profile", default="")
    args = parser.parse_args()
    ledger = _ledger(args.transport, args.url, args.token)
    profiler = cProfile.Profile() if args.profile else None
    try:
        result = measure(ledger, args.size, args.runs, args.reps, profiler)
    finally:
        ledger.close()
    if profiler is not None:
        profiler.dump_stats(args.profile)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
