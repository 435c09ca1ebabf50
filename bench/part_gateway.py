"""Part 4: the tool gateway — idempotent invoke of a no-op write tool vs a direct call.

The no-op tools live in bench/gateway_tools.py, loaded into the served process through
TOOLS_EXTRA_MODULES. "Direct" is the same no-op function called in-process (what the tool
costs without the gateway); the read no-op through the gateway separates HTTP + DRF from the
idempotency key's two transactions.
"""

from __future__ import annotations

import time
import uuid

import httpx

from bench import stack
from bench.common import Figure
from bench.context import Ctx


def _direct_noop(arguments: dict[str, int]) -> dict[str, object]:
    return {"n": arguments["n"], "ok": True}


def run(ctx: Ctx, workers: int, threads: int) -> None:
    res = ctx.results
    reps, calls = ctx.size["reps"], ctx.size["gateway_calls"]
    env = stack.project_env(TOOLS_EXTRA_MODULES="bench.gateway_tools")
    figs = {
        "direct": res.add(Figure("no-op tool called directly (in-process)", "ms")),
        "read": res.add(
            Figure(
                "gateway invoke, no-op read tool (no key)",
                "ms",
                baseline="fsync'd INSERT + COMMIT (unit)",
            )
        ),
        "write": res.add(
            Figure(
                "gateway invoke, no-op write tool, new key",
                "ms",
                baseline="fsync'd INSERT + COMMIT (unit)",
            )
        ),
        "replay": res.add(
            Figure(
                "gateway invoke replayed (same key, stored response)",
                "ms",
                baseline="fsync'd INSERT + COMMIT (unit)",
            )
        ),
    }
    with stack.gunicorn(workers=workers, threads=threads, env=env) as (url, _):
        http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {ctx.token}"}, timeout=30
        )
        try:
            listed = http.get("/api/v1/tools/").json()
            names = {
                t["name"]
                for t in (listed.get("tools", listed) if isinstance(listed, dict) else listed)
            }
            if "bench.noop_write" not in names:
                raise RuntimeError(f"bench.noop_write not registered; tools: {sorted(names)}")

            def invoke(name: str, key: str | None, n: int) -> httpx.Response:
                headers = {"Idempotency-Key": key} if key else {}
                r = http.post(
                    f"/api/v1/tools/{name}/invoke", json={"arguments": {"n": n}}, headers=headers
                )
                if r.status_code != 200:
                    raise RuntimeError(f"invoke {name} -> {r.status_code}: {r.text[:300]}")
                return r

            invoke("bench.noop_read", None, 0)
            invoke("bench.noop_write", f"bench-warm-{uuid.uuid4().hex}", 0)
            for _ in range(reps):
                samples: dict[str, list[float]] = {k: [] for k in figs}
                keys = []
                for n in range(calls):
                    t0 = time.perf_counter()
                    _direct_noop({"n": n})
                    samples["direct"].append((time.perf_counter() - t0) * 1000)
                    t0 = time.perf_counter()
                    invoke("bench.noop_read", None, n)
                    samples["read"].append((time.perf_counter() - t0) * 1000)
                    key = f"bench-{uuid.uuid4().hex}"
                    keys.append((key, n))
                    t0 = time.perf_counter()
                    invoke("bench.noop_write", key, n)
                    samples["write"].append((time.perf_counter() - t0) * 1000)
                for key, n in keys:
                    t0 = time.perf_counter()
                    r = invoke("bench.noop_write", key, n)
                    samples["replay"].append((time.perf_counter() - t0) * 1000)
                    assert r.headers.get("Idempotent-Replayed") == "true"
                for k, fig in figs.items():
                    fig.add_rep(samples[k])
        finally:
            http.close()
    overhead = figs["write"].p50 - figs["direct"].p50
    res.note(
        "gateway",
        f"Gateway overhead of an idempotent write (p50, over a direct call): {overhead:.2f} ms; "
        f"of which HTTP + auth + DRF (the read no-op) {figs['read'].p50:.2f} ms and the key's "
        f"reserve + complete transactions {figs['write'].p50 - figs['read'].p50:.2f} ms.",
    )
