"""Part 1: per-step overhead through real HTTP, the baselines beside it, and SQL per call."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from bench import stack
from bench.client import JournalDriver
from bench.common import APP_ROLE, BENCH_DB, PG_HOST, PG_PORT, Figure, payload_of
from bench.context import Ctx
from bench.pgcount import CountingProxy

STEPS = 20
SIZES = {"100B": 100, "10KB": 10_000}


def _ledger_steps(
    driver: JournalDriver, size: int, runs: int, reps: int
) -> dict[str, list[list[float]]]:
    """20-step runs of write steps and of read steps; per-call times in ms."""
    result = payload_of(size)
    out: dict[str, list[list[float]]] = {
        k: [] for k in ("write", "intent", "outcome", "read", "write_run", "read_run")
    }
    for _ in range(reps):
        rep: dict[str, list[float]] = {k: [] for k in out}
        for _ in range(runs):
            run_id = driver.create()
            epoch = driver.lease(run_id)["epoch"]
            t_run = time.perf_counter()
            for i in range(STEPS):
                t0 = time.perf_counter()
                driver.write_intent(run_id, epoch, i, {"i": i, "q": "ticket 4711"})
                t1 = time.perf_counter()
                driver.outcome(run_id, epoch, i, result)
                t2 = time.perf_counter()
                rep["intent"].append((t1 - t0) * 1000)
                rep["outcome"].append((t2 - t1) * 1000)
                rep["write"].append((t2 - t0) * 1000)
            rep["write_run"].append((time.perf_counter() - t_run) * 1000 / STEPS)
            driver.complete(run_id, epoch)
        for _ in range(runs):
            run_id = driver.create()
            epoch = driver.lease(run_id)["epoch"]
            t_run = time.perf_counter()
            for i in range(STEPS):
                t0 = time.perf_counter()
                driver.read_step(run_id, epoch, i, {"i": i, "q": "ticket 4711"}, result)
                rep["read"].append((time.perf_counter() - t0) * 1000)
            rep["read_run"].append((time.perf_counter() - t_run) * 1000 / STEPS)
            driver.complete(run_id, epoch)
        for key, values in rep.items():
            out[key].append(values)
    return out


def run(ctx: Ctx, base_url: str) -> None:
    res = ctx.results
    size = ctx.size
    reps, runs = size["reps"], size["step_runs"]
    sizes = {"100B": 100} if ctx.tier == "smoke" else SIZES
    driver = JournalDriver(base_url, ctx.token)
    try:
        # warm the workers' connections and code paths
        _ledger_steps(driver, 100, 1, 1)
        for label, nbytes in sizes.items():
            ctx.log(f"per-step: ledger over HTTP, {label}")
            measured = _ledger_steps(driver, nbytes, runs, reps)
            figs = {
                # targets are ratios to the DBOS step of this invocation: set by _ratio_targets
                "write": ("write step (intent + outcome)", "", None),
                "intent": ("write intent call", "", None),
                "outcome": ("write outcome call", "", None),
                "read": ("read step (one call)", "", None),
                "write_run": ("20 write steps, whole run / 20", "", None),
                "read_run": ("20 read steps, whole run / 20", "", None),
            }
            for key, (title, target, value) in figs.items():
                fig = res.add(
                    Figure(
                        f"ledger {title} {label}",
                        "ms",
                        target=target,
                        target_value=value,
                        baseline=f"raw fsync'd INSERT {label}",
                    )
                )
                for rep in measured[key]:
                    fig.add_rep(rep)
        for label, nbytes in sizes.items():
            for transport in SDK_TRANSPORTS:
                ctx.log(f"per-step: through the SDK, {transport}, {label}")
                try:
                    sdk = _sdk_steps(ctx, transport, base_url, nbytes, runs, reps)
                except Exception as exc:
                    res.note("step", f"- the SDK figures {transport} {label} could not run: {exc}")
                    continue
                for key in ("write", "read"):
                    fig = res.add(Figure(f"{sdk_title(key, transport)} {label}", "ms"))
                    for rep in sdk[key]:
                        fig.add_rep(rep)
    finally:
        driver.close()

    for label, nbytes in sizes.items():
        ctx.log(f"per-step: journal kernel in-process (no HTTP), {label}")
        try:
            inproc = _kernel_inprocess(nbytes, runs, reps)
        except Exception as exc:
            res.note("step", f"- the in-process kernel figure {label} could not run: {exc}")
            continue
        for key, title in KERNEL_INPROCESS.items():
            fig = res.add(Figure(f"{title} {label}", "ms", baseline=f"DBOS step {label}"))
            for rep in inproc[key]:
                fig.add_rep(rep)

    for label, nbytes in sizes.items():
        for which, title in (
            ("raw_insert", "raw fsync'd INSERT"),
            ("plain", "no ledger (plain function call)"),
            ("dbos", "DBOS step"),
            ("langgraph", "LangGraph node (durability=sync)"),
        ):
            if ctx.tier == "smoke" and which in ("dbos", "langgraph"):
                continue  # the smoke tier checks the machinery, not the comparison
            ctx.log(f"baseline: {which} {label}")
            try:
                data = ctx.baseline(
                    which,
                    "--size",
                    str(nbytes),
                    "--runs",
                    str(size["baseline_runs"]),
                    "--reps",
                    str(reps),
                )
            except Exception as exc:
                res.note("step", f"- baseline `{which}` {label} could not run: {exc}")
                continue
            fig = res.add(
                Figure(
                    f"{title} {label}",
                    "ms",
                    baseline="" if which == "raw_insert" else f"raw fsync'd INSERT {label}",
                )
            )
            for rep in data["reps"]:
                fig.add_rep(rep)
            res.versions.update(data.get("versions", {}))
            if "workflow_ms" in data:
                whole = res.add(
                    Figure(
                        f"{title.split(' ')[0]} whole 20-step workflow / 20 {label}",
                        "ms",
                        baseline=f"raw fsync'd INSERT {label}",
                    )
                )
                per = [w / STEPS for w in data["workflow_ms"]]
                chunk = max(1, len(per) // reps)
                for i in range(reps):
                    whole.add_rep(per[i * chunk : (i + 1) * chunk])
            if which == "raw_insert":
                res.extra["postgres_settings"] = data.get("settings", {})
    # the ledger figures are also compared with the libraries, by name in the report
    _ratio_targets(ctx, sizes)
    _compare(ctx, sizes)
    _sql_counts(ctx)


KERNEL_INPROCESS = {
    "write": "journal kernel in-process write step (2 statements)",
    "read": "journal kernel in-process read step (1 statement)",
}


def _kernel_inprocess(size: int, runs: int, reps: int) -> dict[str, Any]:
    """bench.kernel_inprocess in the served tree: the kernel's statements without HTTP."""
    args = ["--size", str(size), "--runs", str(runs), "--reps", str(reps)]
    return _served_json("bench.kernel_inprocess", args, stack.project_env())


def _served_json(module: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """`python -m module args` by the project's interpreter in the served tree: its last line."""
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=stack.tree(),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(proc.stderr[-2000:])
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


SDK_TRANSPORTS = {"http": "over HTTP", "inprocess": "in-process"}


def sdk_title(kind: str, transport: str) -> str:
    step = "write step (run.tool)" if kind == "write" else "read step (run.model)"
    return f"ledger SDK {step} {SDK_TRANSPORTS[transport]}"


def _sdk_steps(
    ctx: Ctx, transport: str, url: str, size: int, runs: int, reps: int
) -> dict[str, Any]:
    """bench.sdk_steps in the served tree: steps end to end through `intentledger`."""
    env = stack.project_env(PYTHONPATH=f"{stack.tree()}:{stack.tree() / 'sdk' / 'src'}")
    args = ["--transport", transport, "--url", url, "--token", ctx.token, "--size", str(size)]
    return _served_json("bench.sdk_steps", [*args, "--runs", str(runs), "--reps", str(reps)], env)


# The journal kernel issue's and issue 38's targets: p50 per step as a multiple of a DBOS step
# measured in the same invocation on the same PostgreSQL (absolute times drift with the load).
RATIO_TO_DBOS = {
    "ledger write step (intent + outcome)": 1.5,
    "ledger read step (one call)": 1.0,
    sdk_title("write", "http"): 1.5,
    sdk_title("read", "http"): 1.0,
    sdk_title("write", "inprocess"): 1.0,
    sdk_title("read", "inprocess"): 0.6,
}


def _ratio_targets(ctx: Ctx, sizes: dict[str, int]) -> None:
    figs = ctx.results.figures
    for label in sizes:
        dbos = figs.get(f"DBOS step {label}")
        if dbos is None or not dbos.all:
            continue
        for title, factor in RATIO_TO_DBOS.items():
            fig = figs.get(f"{title} {label}")
            if fig is None:
                continue
            fig.baseline = f"DBOS step {label}"
            fig.target = f"<= {factor:g} × DBOS step p50 ({factor * dbos.p50:.2f} ms)"
            fig.target_value = factor * dbos.p50


def _compare(ctx: Ctx, sizes: dict[str, int]) -> None:
    """Side by side, per step, in this invocation: the ledger vs the libraries and the floor."""
    figs = ctx.results.figures
    rows = [
        "| payload | ledger write step | ledger read step | DBOS step | LangGraph node | raw INSERT | no ledger | write ÷ DBOS | read ÷ LangGraph |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def p50(name: str) -> float | None:
        fig = figs.get(name)
        return fig.p50 if fig is not None and fig.all else None

    def cell(value: float | None) -> str:
        return (
            "–"
            if value is None
            else f"{value:.2f} ms"
            if value >= 0.01
            else f"{value * 1000:.1f} µs"
        )

    for label in sizes:
        write = p50(f"ledger write step (intent + outcome) {label}")
        read = p50(f"ledger read step (one call) {label}")
        dbos = p50(f"DBOS step {label}")
        lang = p50(f"LangGraph node (durability=sync) {label}")
        raw = p50(f"raw fsync'd INSERT {label}")
        plain = p50(f"no ledger (plain function call) {label}")
        rows.append(
            f"| {label} | {cell(write)} | {cell(read)} | {cell(dbos)} | {cell(lang)} | {cell(raw)} | {cell(plain)} | "
            f"{f'{write / dbos:.2f}×' if write and dbos else '–'} | {f'{read / lang:.2f}×' if read and lang else '–'} |"
        )
    sdk_rows = [
        "| payload | step | over HTTP | in-process | DBOS step | LangGraph node | HTTP ÷ DBOS | in-process ÷ DBOS | HTTP ÷ LangGraph | in-process ÷ LangGraph |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def ratio(a: float | None, b: float | None) -> str:
        return f"{a / b:.2f}×" if a and b else "–"

    for label in sizes:
        dbos = p50(f"DBOS step {label}")
        lang = p50(f"LangGraph node (durability=sync) {label}")
        for kind in ("read", "write"):
            http = p50(f"{sdk_title(kind, 'http')} {label}")
            inproc = p50(f"{sdk_title(kind, 'inprocess')} {label}")
            sdk_rows.append(
                f"| {label} | {kind} | {cell(http)} | {cell(inproc)} | {cell(dbos)} | {cell(lang)} | "
                f"{ratio(http, dbos)} | {ratio(inproc, dbos)} | {ratio(http, lang)} | {ratio(inproc, lang)} |"
            )
    ctx.results.note(
        "step",
        "Through the worker SDK (`bench/sdk_steps.py`), p50 per step, same invocation: "
        '`run.tool(effect="write", fn=...)` (intent, the function, outcome) and `run.model` '
        "(one call), over HTTP (`HttpTransport` → granian) and in-process "
        "(`runs.inprocess.InProcessTransport`, Django's connection, as Celery-run agents "
        "journal).\n\n" + "\n".join(sdk_rows),
    )
    ctx.results.note(
        "step",
        "Per step, p50, same invocation, same PostgreSQL. The ledger goes through real HTTP "
        "(httpx → granian → the lean path → one journal-kernel statement per call) from a "
        "separate client process; the in-process kernel figures call the same statements without "
        "HTTP; DBOS and LangGraph run in-process (their per-step time is the gap between consecutive step "
        "starts inside one 20-step workflow/graph).\n\n" + "\n".join(rows),
    )


def _sql_counts(ctx: Ctx) -> None:
    """Statements and round trips of each worker call, counted on the wire by a proxy."""
    ctx.log("per-step: counting SQL statements and round trips per call")
    proxy = CountingProxy(stack.free_port(), (PG_HOST, PG_PORT))
    env = stack.project_env(
        DATABASE_URL=f"postgres://{APP_ROLE}@127.0.0.1:{proxy.port}/{BENCH_DB}?sslmode=disable&gssencmode=disable"
    )
    calls: dict[str, list[tuple[int, int]]] = {}
    texts: dict[str, list[str]] = {}
    try:
        with stack.web_server(workers=1, threads=1, env=env) as (url, _proc):
            driver = JournalDriver(url, ctx.token)
            try:

                def count(name: str, fn: Any) -> Any:
                    before = proxy.snapshot()
                    value = fn()
                    after = proxy.snapshot()
                    calls.setdefault(name, []).append(
                        (
                            after.statements - before.statements,
                            after.round_trips - before.round_trips,
                        )
                    )
                    texts[name] = after.texts[len(before.texts) :]
                    return value

                payload = payload_of(100)
                for _ in range(3):
                    run_id = count("POST runs/ (create)", driver.create)
                    epoch = count(
                        "POST lease (first)", lambda r=run_id: driver.lease(r, worker="bench-count")
                    )["epoch"]
                    for i in range(0, 6, 2):
                        count(
                            "POST steps/ (write intent)",
                            lambda r=run_id, e=epoch, i=i: driver.write_intent(r, e, i, {"i": i}),
                        )
                        count(
                            "POST steps/{i}/outcome",
                            lambda r=run_id, e=epoch, i=i: driver.outcome(r, e, i, payload),
                        )
                        count(
                            "POST steps/ (read, one call)",
                            lambda r=run_id, e=epoch, i=i: driver.read_step(
                                r, e, i + 1, {"i": i}, payload
                            ),
                        )
                    count(
                        "POST steps/ (replayed intent)",
                        lambda r=run_id, e=epoch: driver.write_intent(r, e, 0, {"i": 0}),
                    )
                    count("GET journal", lambda r=run_id: driver.journal(r))
                    count(
                        "POST lease (re-lease, 6 steps)",
                        lambda r=run_id: driver.lease(r, worker="bench-count"),
                    )
            finally:
                driver.close()
    finally:
        proxy.close()
    rows = [
        "| worker call | SQL statements | round trips |",
        "|---|---:|---:|",
    ]
    summary = {}
    for name, values in calls.items():
        # the steady state: the last observation (the first may include connection set-up)
        stmts, trips = values[-1]
        summary[name] = {"statements": stmts, "round_trips": trips, "all": values}
        rows.append(f"| {name} | {stmts} | {trips} |")
    ctx.results.extra["sql_per_call"] = summary
    ctx.results.extra["sql_texts"] = texts
    ctx.results.note(
        "sql",
        "Counted on the wire by a proxy between the web server (1 worker, 1 thread) and PostgreSQL "
        "(`bench/pgcount.py`): a round trip is a simple Query or an extended-protocol Sync; "
        "BEGIN, COMMIT and connection health checks are included. Steady state (the third run "
        "of each call).\n\n" + "\n".join(rows),
    )
    for name in ("POST steps/ (write intent)", "POST steps/ (read, one call)"):
        if name in texts:
            lines = "\n".join(f"{n + 1}. `{_short(t)}`" for n, t in enumerate(texts[name]))
            ctx.results.note("sql", f"Statements of `{name}`:\n\n{lines}")


def _short(sql: str, limit: int = 160) -> str:
    sql = " ".join(sql.split())
    return sql if len(sql) <= limit else sql[: limit - 1] + "…"
