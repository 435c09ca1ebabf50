"""Part 3: recovery — the lease+journal call alone, and the whole restart through the SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

from bench import stack
from bench.client import JournalDriver
from bench.common import ROOT, Figure, payload_of
from bench.context import Ctx

AGENT = "bench-recovery"


def prepare_run(driver: JournalDriver, steps: int = 20, size: int = 10_000) -> str:
    """A run of `steps` done steps with ~`size`-byte results, its lease still held."""
    run_id = driver.create(agent=AGENT)
    epoch = driver.lease(run_id, worker="bench-holder")["epoch"]
    payload = payload_of(size)
    for i in range(steps):
        if i % 2:
            driver.write_intent(run_id, epoch, i, {"i": i})
            driver.outcome(run_id, epoch, i, payload)
        else:
            driver.read_step(run_id, epoch, i, {"i": i}, payload)
    return run_id


def run(ctx: Ctx, base_url: str) -> None:
    res = ctx.results
    stack.ensure_policy(AGENT, max_steps=100, max_recoveries=100_000)
    stack.ensure_policy("bench-restart", max_steps=100, max_recoveries=100_000)
    reps, per_rep = ctx.size["reps"], ctx.size["recovery_reps"]
    lease_fig = res.add(
        Figure(
            "lease+journal call, 20 steps × ~10 KB (recovery)",
            "ms",
            target="<= 15 ms p50",
            target_value=15.0,
            baseline="fsync'd INSERT + COMMIT (unit)",
        )
    )
    journal_fig = res.add(
        Figure(
            "GET journal, 20 steps × ~10 KB",
            "ms",
            baseline="fsync'd INSERT + COMMIT (unit)",
        )
    )
    driver = JournalDriver(base_url, ctx.token)
    try:
        ctx.log(f"recovery: lease+journal, {reps} × {per_rep}")
        sizes = []
        for _ in range(reps):
            run_id = prepare_run(driver)
            samples, jsamples = [], []
            for _ in range(per_rep):
                t0 = time.perf_counter()
                grant = driver.lease(run_id, worker="bench-holder")
                samples.append((time.perf_counter() - t0) * 1000)
                assert len(grant["journal"]) == 20 and grant["recovered"]
                t0 = time.perf_counter()
                driver.journal(run_id)
                jsamples.append((time.perf_counter() - t0) * 1000)
            sizes.append(len(json.dumps(grant)))
            lease_fig.add_rep(samples)
            journal_fig.add_rep(jsamples)
        res.extra["lease_response_bytes"] = sizes[-1]
        res.note(
            "recovery",
            "Lease+journal: a run with 20 recorded steps (alternating read and write, ~10 KB result "
            "each) whose holder restarts under the same worker name, so every lease takes the "
            f"recovery path (recovery rules, epoch + 1, one recovery counted) and returns the journal "
            f"({sizes[-1] / 1024:.0f} KiB of JSON).",
        )
    finally:
        driver.close()
    _restart(ctx, base_url)


def _restart(ctx: Ctx, base_url: str) -> None:
    """New worker process start → step 13 executing, through the SDK (when it has landed)."""
    tree = stack.tree()
    sdk = tree / "sdk" / "src"
    if not (sdk / "intentledger" / "_run.py").exists():
        ctx.results.note(
            "recovery",
            "- whole restart: the SDK (`sdk/src/intentledger/`) has not landed at the measured commit.",
        )
        return
    res = ctx.results
    fig = res.add(
        Figure(
            "whole restart: process start → step 13 executing",
            "ms",
            target="< 500 ms p50",
            target_value=500.0,
            baseline="fsync'd INSERT + COMMIT (unit)",
        )
    )
    import_fig = res.add(Figure("  of which `import intentledger`", "ms"))
    interp_fig = res.add(Figure("  of which interpreter start (python -c pass)", "ms"))
    reps, per_rep = ctx.size["reps"], ctx.size["restart_reps"]
    ctx.log(f"recovery: whole restart through the SDK, {reps} × {per_rep}")
    env = stack.project_env(PYTHONPATH=os.pathsep.join([str(sdk), str(tree)]))
    script = str(ROOT / "bench" / "restart_agent.py")
    for _ in range(reps):
        samples, imports, interps = [], [], []
        for _ in range(per_rep):
            external_id = uuid.uuid4().hex[:12]
            crash = subprocess.run(
                [
                    sys.executable,
                    script,
                    "crash",
                    base_url,
                    ctx.token,
                    external_id,
                ],
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            if crash.returncode != 137:
                raise RuntimeError(f"crash phase exited {crash.returncode}: {crash.stderr[-800:]}")
            t0 = time.time()
            resume = subprocess.run(
                [
                    sys.executable,
                    script,
                    "resume",
                    base_url,
                    ctx.token,
                    external_id,
                ],
                cwd=tree,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            lines = [
                json.loads(line) for line in resume.stdout.splitlines() if line.startswith("{")
            ]
            step13 = next((line for line in lines if "step13_at" in line), None)
            if step13 is None:
                raise RuntimeError(
                    f"resume never reached step 13: {resume.stdout[-500:]} {resume.stderr[-800:]}"
                )
            samples.append((step13["step13_at"] - t0) * 1000)
            imports += [line["import_ms"] for line in lines if "import_ms" in line]
            t1 = time.time()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            interps.append((time.time() - t1) * 1000)
        fig.add_rep(samples)
        import_fig.add_rep(imports)
        interp_fig.add_rep(interps)
    _library_restarts(ctx)
    res.note(
        "recovery",
        "Whole restart: `bench/restart_agent.py crash` runs steps 0–12 through the SDK (read steps "
        "as model calls, write steps as a key-honouring tool with ~10 KB results) and dies with "
        "`os._exit` right after step 12 is journalled; then a **new** Python process "
        "(`restart_agent.py resume`, same worker name: a pod restarted under its identity) imports "
        "the SDK, attaches by external_id, takes the lease (recovery), replays steps 0–12 from the "
        "journal without executing them, and reports the wall-clock time at which step 13's tool "
        "starts. Measured from just before the parent's `Popen` to that moment.",
    )


def _library_restarts(ctx: Ctx) -> None:
    """The same story for DBOS and LangGraph (bench/baseline_restart.py, in bench/.venv)."""
    script = str(ROOT / "bench" / "baseline_restart.py")
    python = str(ROOT / "bench" / ".venv" / "bin" / "python")
    reps, per_rep = ctx.size["reps"], max(1, ctx.size["restart_reps"] // 2)
    for which, title in (("dbos", "DBOS"), ("langgraph", "LangGraph")):
        ctx.log(f"recovery: {title} restart, {reps} × {per_rep}")
        fig = ctx.results.add(
            Figure(
                f"{title} restart: process start → step 13 executing",
                "ms",
                baseline="whole restart: process start → step 13 executing",
            )
        )
        imports = ctx.results.add(Figure(f"  of which `import` of {title}", "ms"))
        try:
            for _ in range(reps):
                samples, import_ms = [], []
                for _ in range(per_rep):
                    ident = f"bench-{uuid.uuid4().hex[:12]}"
                    crash = subprocess.run(
                        [python, script, which, "crash", ident],
                        capture_output=True,
                        text=True,
                        timeout=120,
                    )
                    if crash.returncode != 137:
                        raise RuntimeError(
                            f"crash exited {crash.returncode}: {crash.stderr[-500:]}"
                        )
                    t0 = time.time()
                    resume = subprocess.run(
                        [python, script, which, "resume", ident],
                        capture_output=True,
                        text=True,
                        timeout=120,
                    )
                    line = next((x for x in resume.stdout.splitlines() if x.startswith("{")), None)
                    if line is None:
                        raise RuntimeError(f"resume never reached step 13: {resume.stderr[-500:]}")
                    data = json.loads(line)
                    samples.append((data["step13_at"] - t0) * 1000)
                    import_ms.append(data["import_ms"])
                fig.add_rep(samples)
                imports.add_rep(import_ms)
        except Exception as exc:
            ctx.results.note("recovery", f"- {title} restart could not be measured: {exc}")
    ctx.results.note(
        "recovery",
        "Library restarts (`bench/baseline_restart.py`, bench/.venv): the same 20 steps with "
        "~10 KB outputs; the crash process dies as step 13 starts (step 12 checkpointed), then a "
        "new process recovers: DBOS through `DBOS.launch()` (it recovers its executor's pending "
        "workflows), LangGraph through `invoke(None)` on the same thread_id (durability sync).",
    )
