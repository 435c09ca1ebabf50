"""A load-generating client process: T concurrent agent runs for S seconds, steps counted.

    python -m bench.load URL TOKEN --threads T --seconds S

Each thread is one agent run after another: create, lease, 20 steps alternating read (one call)
and write (intent + outcome), complete. Prints {"steps": n, "seconds": s, "errors": e} as JSON.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

from bench.client import JournalDriver
from bench.common import payload_of


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__)
    parser.add_argument("url")
    parser.add_argument("token")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--start-at", type=float, default=0.0, help="time.time() to start at")
    args = parser.parse_args()
    payload = payload_of(100)
    counts = [0] * args.threads
    errors = [0] * args.threads
    if args.start_at:
        time.sleep(max(0.0, args.start_at - time.time()))
    stop_at = time.monotonic() + args.seconds

    def agent(n: int) -> None:
        driver = JournalDriver(args.url, args.token)
        try:
            while time.monotonic() < stop_at:
                try:
                    run_id = driver.create()
                    epoch = driver.lease(run_id)["epoch"]
                    for i in range(20):
                        if time.monotonic() >= stop_at:
                            return
                        if i % 2 == 0:
                            driver.read_step(run_id, epoch, i, {"i": i}, payload)
                        else:
                            driver.write_intent(run_id, epoch, i, {"i": i})
                            driver.outcome(run_id, epoch, i, payload)
                        counts[n] += 1
                    driver.complete(run_id, epoch)
                except Exception:
                    errors[n] += 1
                    time.sleep(0.01)
        finally:
            driver.close()

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(args.threads)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(
        json.dumps(
            {"steps": sum(counts), "seconds": time.monotonic() - start, "errors": sum(errors)}
        )
    )


if __name__ == "__main__":
    main()
