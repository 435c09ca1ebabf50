"""Named crash points inside the one-call gateway step, for the recovery tests.

GATEWAY_CRASH_AT=<point> makes the serving process group (a web server started in its own session)
die by SIGKILL at that point, as a lost pod would:

    before_intent          nothing journalled yet
    after_intent           the intent committed; the key not reserved
    inside_tool            the key reserved (committed); the tool started, nothing done yet
    before_outcome_commit  the tool did its work (an SMTP message left); its rows, the key's
                           completion and the step's outcome not committed
"""

import os
import signal
import sys

POINTS = ("before_intent", "after_intent", "inside_tool", "before_outcome_commit")


def crash_point(name: str) -> None:
    if os.environ.get("GATEWAY_CRASH_AT") == name:
        sys.stderr.write(f"gateway crash point {name}: SIGKILL to the process group\n")
        sys.stderr.flush()
        os.killpg(os.getpgrp(), signal.SIGKILL)
