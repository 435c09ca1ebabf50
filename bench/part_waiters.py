"""Part: 200 callers waiting on `?wait=` while a 20-step agent journals its steps.

The agent writes through the web server (granian: the journal's threads); the waiters long-poll the ASGI app
(`uvicorn config.asgi:application`, one process), as the README says to deploy them. Each rep
runs a 20-step run without waiters and one with 200 waiters parked on it; the waiters must not
slow the agent's steps by more than 10 %, and each must be answered within 1 s of the run
completing.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx

from bench import stack
from bench.client import JournalDriver
from bench.common import Figure, payload_of
from bench.context import Ctx

STEPS = 20
WAITERS = 200
PARK_SECONDS = 4.0


def _agent(driver: JournalDriver, run_id: str, epoch: int, result: Any) -> list[float]:
    took = []
    for i in range(STEPS):
        t0 = time.perf_counter()
        driver.write_intent(run_id, epoch, i, {"i": i, "q": "ticket 4711"})
        driver.outcome(run_id, epoch, i, result)
        took.append((time.perf_counter() - t0) * 1000)
    return took


class _Waiters:
    """WAITERS long polls on one run, in an event loop of their own (a thread)."""

    def __init__(self, url: str, token: str, run_id: str) -> None:
        self.url, self.token, self.run_id = url, token, run_id
        self.answered: list[tuple[float, str]] = []
        self.parked = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        limits = httpx.Limits(max_connections=WAITERS + 5, max_keepalive_connections=WAITERS + 5)
        async with httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=90,
            limits=limits,
        ) as client:

            async def wait() -> None:
                r = await client.get(f"/api/v1/runs/{self.run_id}/", params={"wait": 60})
                self.answered.append((time.monotonic(), r.json().get("status", r.text[:80])))

            tasks = [asyncio.create_task(wait()) for _ in range(WAITERS)]
            await asyncio.sleep(PARK_SECONDS)  # every request reached the server and is parked
            self.parked.set()
            await asyncio.gather(*tasks)


def run(ctx: Ctx, workers: int, threads: int) -> None:
    res = ctx.results
    reps = ctx.size["reps"]
    alone = res.add(Figure("write step (intent + outcome), no waiters", "ms"))
    waited = res.add(
        Figure(
            f"write step (intent + outcome), {WAITERS} waiters on ?wait=",
            "ms",
            baseline="write step (intent + outcome), no waiters",
            target="<= 1.1x without waiters",
        )
    )
    lag = res.add(Figure("waiter answered after the run completed", "ms", target="<= 1000 ms"))
    result = payload_of(100)
    with (
        stack.web_server(workers=workers, threads=threads) as (url, _),
        stack.uvicorn() as asgi_url,
    ):
        driver = JournalDriver(url, ctx.token)
        try:
            run_id = driver.create()  # warm
            _agent(driver, run_id, driver.lease(run_id)["epoch"], result)
            for _ in range(reps):
                run_id = driver.create()
                epoch = driver.lease(run_id)["epoch"]
                alone.add_rep(_agent(driver, run_id, epoch, result))
                driver.complete(run_id, epoch)

                run_id = driver.create()
                epoch = driver.lease(run_id)["epoch"]
                waiters = _Waiters(asgi_url, ctx.token, run_id)
                waiters.thread.start()
                waiters.parked.wait(30)
                waited.add_rep(_agent(driver, run_id, epoch, result))
                driver.complete(run_id, epoch)
                finished = time.monotonic()
                waiters.thread.join(90)
                statuses = {status for _, status in waiters.answered}
                if len(waiters.answered) != WAITERS or statuses != {"completed"}:
                    raise RuntimeError(
                        f"{len(waiters.answered)} of {WAITERS} waiters answered: {statuses}"
                    )
                lag.add_rep([(at - finished) * 1000 for at, _ in waiters.answered])
        finally:
            driver.close()
    ratio = waited.p50 / alone.p50 if alone.p50 else float("nan")
    res.note(
        "waiters",
        f"{WAITERS} callers long-polling `?wait=` on the ASGI app (one uvicorn process) while a "
        f"20-step agent writes through the web server: its write step p50 {waited.p50:.2f} ms against "
        f"{alone.p50:.2f} ms without them (**{ratio:.2f}×**, target ≤ 1.1×); every waiter "
        f"answered within {max(lag.all) if lag.all else float('nan'):.0f} ms of the run "
        f"completing (p50 {lag.p50:.0f} ms; target ≤ 1000 ms).",
    )
