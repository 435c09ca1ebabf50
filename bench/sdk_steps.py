"""Steps end to end through the worker SDK, over HTTP or in-process: what an agent author pays.

    python -m bench.sdk_steps --transport http --url URL --token T [--size B --runs N --reps R]
        [--client sdk|httpx|urllib3|http.client] [--server-pid PID]
    python -m bench.sdk_steps --transport inprocess --token T [...] [--profile PATH]

Run by the project's interpreter in the served tree (`intentledger` from its sdk/src). A write
step is `run.tool(name, args, effect="write", fn=...)`: intent, the function, outcome; a read
step is `run.model(fn)`: one call with its outcome. `inprocess` journals through
`runs.inprocess.InProcessTransport` (Django's database connection, no HTTP), as a Celery-run
agent does. `--client` picks the HTTP client under the SDK's calls (bench/http_clients.py; `sdk`,
the default, is the SDK as an agent builds it). `--profile` writes a cProfile of the measured steps
(pstats) to PATH. Prints one JSON object: {"write": [[ms...]...], "read": [[ms...]...],
"client_cpu": {"write": [ms per step, one a repetition], "read": [...]}, "server_cpu": {...}};
client CPU is this process's (time.process_time), server CPU the process tree of
`--server-pid`'s user + system time (psutil), both over the measured steps only (not the run's
create, lease and complete). A first repetition warms the connection and code paths and is
dropped.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import time
from typing import Any

STEPS = 20


def _ledger(transport: str, url: str, token: str, client: str = "sdk") -> Any:
    if transport == "http":
        from intentledger import Ledger

        if client == "sdk":
            return Ledger(url, token)
        from bench.http_clients import CLIENTS

        return Ledger(transport=CLIENTS[client](url, token, timeout=10.0, retries=5, backoff=0.1))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from runs.inprocess import in_process_ledger

    return in_process_ledger(token)


def _tree_cpu(pid: int | None) -> float:
    """User + system seconds of `pid` and its children (a server's master and workers)."""
    if pid is None:
        return 0.0
    import psutil

    total = 0.0
    root = psutil.Process(pid)
    for proc in [root, *root.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def measure(
    ledger: Any,
    size: int,
    runs: int,
    reps: int,
    profiler: cProfile.Profile | None = None,
    server_pid: int | None = None,
) -> dict[str, Any]:
    from bench.common import payload_of

    payload = payload_of(size)
    answer = {**payload, "usage": {"input_tokens": 1, "output_tokens": 1}}

    def tool(**_arguments: Any) -> dict[str, Any]:
        return payload

    def model(**_arguments: Any) -> dict[str, Any]:
        return answer

    out: dict[str, list[list[float]]] = {"write": [], "read": []}
    cpu: dict[str, dict[str, list[float]]] = {
        "client_cpu": {"write": [], "read": []},
        "server_cpu": {"write": [], "read": []},
    }

    def steps(step: Any, timed: list[float], spent: dict[str, float]) -> None:
        """STEPS steps of one run, timed each; their CPU (client, server) added to `spent`."""
        with ledger.run("bench", {"bench": True}, ttl_seconds=60) as run:
            client0, server0 = time.process_time(), _tree_cpu(server_pid)
            for i in range(STEPS):
                t0 = time.perf_counter()
                step(run, i)
                timed.append((time.perf_counter() - t0) * 1000)
            spent["client_cpu"] += time.process_time() - client0
            spent["server_cpu"] += _tree_cpu(server_pid) - server0

    def write(run: Any, i: int) -> None:
        run.tool("bench.write", {"i": i}, effect="write", fn=tool, enforced_by="tool")

    def read(run: Any, i: int) -> None:
        run.model(model, name="bench.read", i=i)

    for rep in range(reps + 1):
        timed: dict[str, list[float]] = {"write": [], "read": []}
        spent = {key: {"client_cpu": 0.0, "server_cpu": 0.0} for key in timed}
        if profiler is not None and rep == 1:
            profiler.enable()
        for _ in range(runs):
            steps(write, timed["write"], spent["write"])
            steps(read, timed["read"], spent["read"])
        if profiler is not None:
            profiler.disable()
        for key, values in timed.items():
            out[key].append(values)
            if rep:
                for which in cpu:
                    cpu[which][key].append(spent[key][which] * 1000 / (runs * STEPS))
    return {**{key: values[1:] for key, values in out.items()}, **cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=("http", "inprocess"), required=True)
    parser.add_argument("--url", default="")
    parser.add_argument("--token", required=True)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--profile", default="")
    parser.add_argument(
        "--client", choices=("sdk", "httpx", "urllib3", "http.client"), default="sdk"
    )
    parser.add_argument("--server-pid", type=int, default=None)
    args = parser.parse_args()
    ledger = _ledger(args.transport, args.url, args.token, args.client)
    profiler = cProfile.Profile() if args.profile else None
    try:
        result = measure(ledger, args.size, args.runs, args.reps, profiler, args.server_pid)
    finally:
        ledger.close()
    if profiler is not None:
        profiler.dump_stats(args.profile)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
