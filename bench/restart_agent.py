"""The step-12 story in two processes, for the restart measurement (run by part_recovery).

    python bench/restart_agent.py crash  URL TOKEN EXTERNAL_ID   # steps 0..12, then dies hard
    python bench/restart_agent.py resume URL TOKEN EXTERNAL_ID   # prints when step 13 executes

Run by path with PYTHONPATH at the measured tree, so `intentledger` is the measured SDK.

Both use the worker SDK exactly as an agent author would, with the same worker name (a pod
restarted under its identity), so the new process recovers the run at once instead of waiting
for the old lease to expire. Imports are timed from inside: `import intentledger` is part of
the restart. Write steps carry ~10 KB results, like the lease+journal figure.
"""

from __future__ import annotations

import time

_T_START = time.time()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

PAYLOAD = {"text": "x" * 10_000}


def model(i: int) -> dict[str, object]:
    """A scripted model call (read step) with its token usage."""
    return {"answer": i, "usage": {"input_tokens": 10}}


def echo(i: int, idempotency_key: str | None = None) -> dict[str, object]:
    """A tool that honours its key (enforced_by tool) and returns ~10 KB."""
    if i == 13 and os.environ.get("BENCH_RESTART_PHASE") == "resume":
        print(json.dumps({"step13_at": time.time(), "process_start": _T_START}), flush=True)
        sys.stdout.flush()
        os._exit(0)
    return {"i": i, **PAYLOAD}


def main() -> None:
    phase, url, token, external_id = sys.argv[1:5]
    os.environ["BENCH_RESTART_PHASE"] = phase
    t_import = time.time()
    from intentledger import Ledger

    import_ms = (time.time() - t_import) * 1000
    if phase == "resume":
        print(json.dumps({"import_ms": import_ms}), flush=True)
    ledger = Ledger(url, token)
    run = ledger.run(
        "bench-restart",
        {"ticket": external_id},
        external_id=external_id,
        worker=f"bench-restart-{external_id}",
        ttl_seconds=30,
    )
    with run:
        for i in range(20):
            if i % 2 == 0:
                run.model(model, name="model.chat", i=i)
            else:
                run.tool("bench.echo", {"i": i}, effect="write", fn=echo, enforced_by="tool")
            if phase == "crash" and i == 12:
                os._exit(137)  # killed right after step 12 is journalled
        run.output = {"done": True}


if __name__ == "__main__":
    main()
