"""The journal kernel called in-process, without HTTP: what the two statements of a step cost.

    python -m bench.kernel_inprocess --size BYTES --runs N --reps R   (project interpreter)

A write step is kernel.step_intent then kernel.step_outcome; a read step is one step_intent with
its outcome. Each is one statement and one commit on the bench database, as in the server, but
called from this process the way DBOS and LangGraph run theirs. The difference between these
figures and the ledger's over HTTP is what being a service costs per call (the client, the
socket, the WSGI server); the difference between these and DBOS is what the ledger's journal
itself costs. Prints one JSON object: {"write": [[ms...]...], "read": [[ms...]...]}.

The calls run in the `default` team's scope, as a worker token of that team runs them in the
server: the journal's row-level security binds them as it binds the HTTP door's.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

STEPS = 20


def measure(size: int, runs: int, reps: int) -> dict[str, Any]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from bench.common import payload_of
    from runs import kernel
    from runs.services.creation import run_create
    from runs.services.leases import run_lease_acquire
    from teams.models import DEFAULT_TEAM_SLUG, Team
    from teams.scope import team_scope

    payload = payload_of(size)

    def leased_run() -> tuple[Any, int]:
        """A new run and the epoch of its first lease."""
        run, _ = run_create(agent="bench-inprocess", input={}, actor="bench")
        lease = run_lease_acquire(run_id=run.pk, worker="w", ttl_seconds=60, actor="bench")
        return run, lease.epoch

    with team_scope(Team.objects.get(slug=DEFAULT_TEAM_SLUG).pk):
        out: dict[str, list[list[float]]] = {"write": [], "read": []}
        for _ in range(reps + 1):  # the first repetition warms the connection and is dropped
            write: list[float] = []
            read: list[float] = []
            for _ in range(runs):
                run, epoch = leased_run()
                for i in range(STEPS):
                    t0 = time.perf_counter()
                    kernel.step_intent(
                        run_id=run.pk, epoch=epoch, index=i, kind="tool", name="bench.write",
                        effect="write", enforced_by="ledger", arguments={"i": i}, outcome=None,
                        actor="worker:bench",
                    )  # fmt: skip
                    kernel.step_outcome(
                        run_id=run.pk, index=i, epoch=epoch, status="ok", result=payload,
                        usage=None, actor="worker:bench",
                    )  # fmt: skip
                    write.append((time.perf_counter() - t0) * 1000)
                run, epoch = leased_run()
                for i in range(STEPS):
                    t0 = time.perf_counter()
                    kernel.step_intent(
                        run_id=run.pk, epoch=epoch, index=i, kind="model", name="bench.read",
                        effect="read", enforced_by=None, arguments={"i": i},
                        outcome={"status": "ok", "result": payload, "usage": None},
                        actor="worker:bench",
                    )  # fmt: skip
                    read.append((time.perf_counter() - t0) * 1000)
            out["write"].append(write)
            out["read"].append(read)
    return {"write": out["write"][1:], "read": out["read"][1:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(measure(args.size, args.runs, args.reps)))


if __name__ == "__main__":
    main()
