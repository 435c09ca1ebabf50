"""The support-agent CLI, plus a log of every step the ledger acknowledged (for the chaos test).

    CHAOS_ACK_LOG=/tmp/acks.jsonl python -m tests.reliability.chaos_agent --ticket T-1 ...

Takes exactly the arguments of `python -m support_agent.support`. After each step the ledger answered
(the SDK's on_step callback, which runs after the journal write returned), one JSON line
{run_id, index, name, state, replayed} is appended to $CHAOS_ACK_LOG and flushed to the kernel,
so it survives the SIGKILL that may come a microsecond later. The chaos test then checks that
every acknowledged write is in the journal.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import support_agent.support as support

_journalled = support._after_step


def _logged(run: Any, info: Any) -> None:
    path = os.environ.get("CHAOS_ACK_LOG")
    if path:
        line = {
            "run_id": run.id,
            "index": info.index,
            "name": info.name,
            "state": info.state,
            "replayed": info.replayed,
        }
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")
            log.flush()
    _journalled(run, info)


support._after_step = _logged

if __name__ == "__main__":
    sys.exit(support.main())
