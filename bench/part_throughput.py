"""Part 2: sustained steps/s with 1, 8, 16 and 32 concurrent agent runs, and server CPU per step.

The load comes from separate client processes (bench.load), so the client's GIL does not cap
the server; CPU per step is the web server processes' user+system time (psutil) divided by the
steps done. Baseline: committed single-row INSERTs/s with as many connections.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psutil

from bench import stack
from bench.common import ROOT, Figure
from bench.context import Ctx


def _cpu_seconds(pid: int) -> float:
    total = 0.0
    try:
        proc = psutil.Process(pid)
        for p in [proc, *proc.children(recursive=True)]:
            try:
                times = p.cpu_times()
                total += times.user + times.system
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        pass
    return total


def _load(
    url: str | list[str], token: str, concurrency: int, seconds: float
) -> tuple[float, int, int]:
    """(steps/s, steps, errors) from min(concurrency, 4) client processes started together;
    given several URLs (web nodes), client process i talks to URL i modulo their number."""
    urls = [url] if isinstance(url, str) else url
    procs_n = min(concurrency, 4)
    per = [concurrency // procs_n + (1 if i < concurrency % procs_n else 0) for i in range(procs_n)]
    start_at = time.time() + 1.0  # every client imports first, then they start together
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.load",
                urls[i % len(urls)],
                token,
                "--threads",
                str(n),
                "--seconds",
                str(seconds),
                "--start-at",
                str(start_at),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for i, n in enumerate(per)
    ]
    steps = errors = 0
    elapsed = 0.0
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=seconds + 60)
            data = json.loads(out.strip().splitlines()[-1])
            steps += data["steps"]
            errors += data["errors"]
            elapsed = max(elapsed, data["seconds"])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return steps / elapsed if elapsed else 0.0, steps, errors


# the speed issue's targets (16 runs on the same 2 cores; server CPU per step at 8 runs and more)
STEPS_PER_SECOND_TARGET = {16: 800.0}
CPU_MS_PER_STEP_TARGET = 1.0


def run(ctx: Ctx, workers: int, threads: int) -> None:
    res = ctx.results
    seconds = ctx.size["throughput_seconds"]
    reps = ctx.size["reps"]
    rows = [
        "| concurrent runs | steps/s per repetition | errors | server CPU ms/step |",
        "|---:|---|---:|---:|",
    ]
    with stack.web_server(workers=workers, threads=threads) as (url, proc):
        _load(url, ctx.token, 2, 1.0)  # warm up every worker
        for concurrency in ctx.size["concurrency"]:
            ctx.log(f"throughput: {concurrency} concurrent runs, {reps} × {seconds} s")
            fig = res.add(
                Figure(
                    f"throughput, {concurrency} concurrent runs",
                    "steps/s",
                    target=(
                        f">= {STEPS_PER_SECOND_TARGET[concurrency]:.0f} steps/s"
                        if concurrency in STEPS_PER_SECOND_TARGET
                        else ""
                    ),
                    target_value=STEPS_PER_SECOND_TARGET.get(concurrency),
                    higher_is_better=True,
                    baseline=f"raw INSERT commits/s, {concurrency} connections",
                )
            )
            cpu_fig = res.add(
                Figure(
                    f"server CPU per step, {concurrency} concurrent runs",
                    "ms",
                    baseline="fsync'd INSERT + COMMIT (unit)",
                    target=f"<= {CPU_MS_PER_STEP_TARGET:g} ms" if concurrency >= 8 else "",
                    target_value=CPU_MS_PER_STEP_TARGET if concurrency >= 8 else None,
                )
            )
            rates = []
            total_errors = 0
            for _ in range(reps):
                cpu0 = _cpu_seconds(proc.pid)
                rate, steps, errors = _load(url, ctx.token, concurrency, seconds)
                cpu1 = _cpu_seconds(proc.pid)
                rates.append(rate)
                total_errors += errors
                fig.add_rep([rate])
                if steps:
                    cpu_fig.add_rep([(cpu1 - cpu0) * 1000 / steps])
            rows.append(
                f"| {concurrency} | {', '.join(f'{r:.0f}' for r in rates)} | {total_errors} | "
                f"{cpu_fig.p50:.2f} |"
            )
            base = res.add(Figure(f"raw INSERT commits/s, {concurrency} connections", "commits/s"))
            for _ in range(reps):
                data = ctx.baseline(
                    "raw_insert_rate",
                    "--clients",
                    str(concurrency),
                    "--seconds",
                    str(min(seconds, 2.0)),
                )
                base.add_rep([data["per_second"]])
    res.note(
        "throughput",
        f"granian {workers} workers × {threads} threads; each agent run alternates a read step "
        "(one call) and a write step (two calls); load from up to 4 client processes on the same "
        "2 cores. The ratio column divides steps/s by raw single-row INSERT commits/s at the same "
        "concurrency (what PostgreSQL alone commits here).\n\n" + "\n".join(rows),
    )
