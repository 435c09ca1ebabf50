"""What every agent script here shares: where to write effects, when to die, how to report."""

import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from intentledger import Ledger, NeedsReview, Run, StepInfo, StopRun, current_run
from intentledger.integrations import step_key

NEEDS_REVIEW_EXIT = 3
# the test gives each agent process its own directory; never the current one (the checkout)
WORK = Path(os.environ.get("WORK_DIR") or tempfile.mkdtemp(prefix="agent-kit-"))
AGENT = os.environ.get("AGENT_NAME", "integration")
EXTERNAL_ID = os.environ.get("EXTERNAL_ID", "integration-1")


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def count_model_call() -> None:
    with open(WORK / "model_calls.txt", "a") as calls:
        calls.write("call\n")


def append_effect(line: str, key: str | None = None) -> str:
    """The write tool's effect: one line in effects.txt (deduplicated by key when given one)."""
    path = WORK / "effects.txt"
    if (
        key is not None
        and path.exists()
        and any(existing.endswith(f" {key}") for existing in path.read_text().splitlines())
    ):
        return f"already appended {line}"
    with open(path, "a") as effects:
        effects.write(f"{line} {key}\n" if key else f"{line}\n")
        effects.flush()
        os.fsync(effects.fileno())
    if os.environ.get("CRASH_INSIDE") == "append":
        die()
    return f"appended {line}"


def append_tool(line: str, enforced_by: str) -> str:
    """The agents' write tool, as its `enforced_by` mark says it is written.

    nobody: appends a line; tool: appends it once per step key; ledger: the effect is one of
    the ledger's own tools (a ticket, through the gateway, a step of its own).
    """
    if enforced_by != "ledger":
        return append_effect(line, step_key() if enforced_by == "tool" else None)
    arguments = {"customer": f"{EXTERNAL_ID}@example.com", "subject": line, "body": line}
    made = current_run().tool("tickets.create", arguments)
    if os.environ.get("CRASH_INSIDE") == "append":
        die()  # the ticket is made and journalled; the framework's tool never returned
    return f"ticket {made['ticket']['id']}"


def crash_after(_run: Run, step: StepInfo) -> None:
    if not step.replayed and os.environ.get("CRASH_AFTER") == step.name:
        die()


def main(body: Any) -> None:
    """Run `body(run)` in the run for this agent; print the summary; exit 3 on review."""
    ledger = Ledger(retries=2, backoff=0.05)
    try:
        with ledger.run(
            AGENT,
            {"ticket": EXTERNAL_ID},
            external_id=EXTERNAL_ID,
            worker="pod-1",
            on_step=crash_after,
        ) as run:
            run.output = body(run)
    except NeedsReview as stop:
        print(json.dumps({"status": "needs_review", "message": str(stop)}))
        sys.exit(NEEDS_REVIEW_EXIT)
    except StopRun as stop:
        print(json.dumps({"status": "stopped", "code": stop.code}))
        sys.exit(4)
    print(
        json.dumps(
            {
                "status": "completed",
                "run_id": run.id,
                "output": run.output,
                "replayed": run.replayed,
                "executed": run.executed,
            }
        )
    )
