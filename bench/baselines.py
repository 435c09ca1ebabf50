"""Baselines measured in the same invocation, on the same PostgreSQL (run with bench/.venv).

    bench/.venv/bin/python -m bench.baselines {raw_insert,plain,dbos,langgraph,raw_insert_rate}
        --size BYTES --runs N --reps R [--clients C --seconds S]

Prints one JSON object on stdout: {"reps": [[ms per step, ...], ...], ...}. DBOS and LangGraph
are never project dependencies: they live in bench/.venv only, and this module imports them
lazily so the project's interpreter can import `bench` without them.

Per-step time for the libraries is the time between the starts of consecutive steps inside one
20-step workflow/graph (the step itself is a no-op returning the payload), so it is what the
library adds per step: checkpointing the step's output durably, plus its own bookkeeping.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import threading
import time
import uuid
from typing import Any

from bench.common import PG_HOST, PG_PORT, PG_USER, payload_of

STEPS = 20


def _url(db: str, driver: str = "postgresql") -> str:
    return f"{driver}://{PG_USER}@{PG_HOST}:{PG_PORT}/{db}"


def _ensure_db(name: str) -> None:
    import psycopg

    with psycopg.connect(_url("postgres"), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname=%s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def raw_insert(size: int, runs: int, reps: int) -> dict[str, Any]:
    """One INSERT + COMMIT (fsync'd, synchronous_commit on) per step over one connection."""
    import psycopg
    from psycopg.types.json import Jsonb

    _ensure_db("bench_raw")
    payload = payload_of(size)
    out: list[list[float]] = []
    with psycopg.connect(_url("bench_raw")) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS raw_steps (id bigserial primary key, run uuid, idx int, payload jsonb)"
        )
        conn.execute("TRUNCATE raw_steps")
        conn.commit()
        for _ in range(reps):
            samples = []
            for _ in range(runs):
                run = uuid.uuid4()
                for i in range(STEPS):
                    start = time.perf_counter()
                    conn.execute(
                        "INSERT INTO raw_steps (run, idx, payload) VALUES (%s, %s, %s)",
                        (run, i, Jsonb(payload)),
                    )
                    conn.commit()
                    samples.append((time.perf_counter() - start) * 1000)
            out.append(samples)
        sync = conn.execute("SHOW synchronous_commit").fetchone()
        fsync = conn.execute("SHOW fsync").fetchone()
    return {
        "reps": out,
        "settings": {
            "fsync": fsync[0] if fsync else "?",
            "synchronous_commit": sync[0] if sync else "?",
        },
    }


def raw_insert_rate(size: int, clients: int, seconds: float) -> dict[str, Any]:
    """Committed single-row INSERTs per second with `clients` connections (threads)."""
    import psycopg
    from psycopg.types.json import Jsonb

    _ensure_db("bench_raw")
    payload = payload_of(size)
    with psycopg.connect(_url("bench_raw"), autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS raw_steps (id bigserial primary key, run uuid, idx int, payload jsonb)"
        )
    counts = [0] * clients
    stop_at = time.monotonic() + seconds
    barrier = threading.Barrier(clients)

    def worker(n: int) -> None:
        with psycopg.connect(_url("bench_raw")) as conn:
            run = uuid.uuid4()
            barrier.wait()
            while time.monotonic() < stop_at:
                conn.execute(
                    "INSERT INTO raw_steps (run, idx, payload) VALUES (%s, %s, %s)",
                    (run, counts[n], Jsonb(payload)),
                )
                conn.commit()
                counts[n] += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    return {"per_second": sum(counts) / elapsed, "total": sum(counts), "seconds": elapsed}


def plain(size: int, runs: int, reps: int) -> dict[str, Any]:
    """The same 20 calls with no ledger: a trivial tool function returning the payload."""
    payload = payload_of(size)

    def tool(i: int, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"i": i, **payload}

    out = []
    for _ in range(reps):
        samples = []
        for _ in range(runs):
            for i in range(STEPS):
                start = time.perf_counter()
                tool(i, {"i": i})
                samples.append((time.perf_counter() - start) * 1000)
        out.append(samples)
    return {"reps": out}


def dbos(size: int, runs: int, reps: int) -> dict[str, Any]:
    """DBOS Transact: a workflow of 20 @DBOS.step()s, each checkpointed to PostgreSQL."""
    import_start = time.perf_counter()
    from dbos import DBOS, DBOSConfig

    import_ms = (time.perf_counter() - import_start) * 1000
    _ensure_db("bench_dbos_sys")
    config: DBOSConfig = {
        "name": "bench",
        "system_database_url": _url("bench_dbos_sys"),
        "log_level": "ERROR",
        "run_admin_server": False,  # type: ignore[typeddict-unknown-key]
    }
    DBOS(config=config)
    payload = payload_of(size)
    starts: list[float] = []

    @DBOS.step()
    def step(i: int) -> dict[str, Any]:
        starts.append(time.perf_counter())
        return {"i": i, **payload}

    @DBOS.workflow()
    def workflow() -> int:
        for i in range(STEPS):
            step(i)
        starts.append(time.perf_counter())
        return STEPS

    DBOS.launch()
    out = []
    whole = []
    try:
        for _ in range(reps):
            samples = []
            for _ in range(runs):
                starts.clear()
                t0 = time.perf_counter()
                workflow()
                whole.append((time.perf_counter() - t0) * 1000)
                samples += [(b - a) * 1000 for a, b in itertools.pairwise(starts)]
            out.append(samples)
    finally:
        DBOS.destroy()
    return {"reps": out, "workflow_ms": whole, "import_ms": import_ms}


def langgraph(size: int, runs: int, reps: int) -> dict[str, Any]:
    """LangGraph: a 20-node StateGraph with PostgresSaver, durability="sync"."""
    import_start = time.perf_counter()
    from typing import TypedDict

    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph

    import_ms = (time.perf_counter() - import_start) * 1000
    _ensure_db("bench_langgraph")
    payload = payload_of(size)
    starts: list[float] = []

    class State(TypedDict, total=False):
        i: int
        last: dict[str, Any]

    def node(i: int) -> Any:
        def run(state: State) -> State:
            starts.append(time.perf_counter())
            return {"i": i, "last": {"i": i, **payload}}

        return run

    builder = StateGraph(State)
    for i in range(STEPS):
        builder.add_node(f"n{i}", node(i))
    builder.add_edge(START, "n0")
    for i in range(STEPS - 1):
        builder.add_edge(f"n{i}", f"n{i + 1}")
    builder.add_edge(f"n{STEPS - 1}", END)
    out = []
    whole = []
    with PostgresSaver.from_conn_string(_url("bench_langgraph")) as saver:
        saver.setup()
        graph = builder.compile(checkpointer=saver)
        for _ in range(reps):
            samples = []
            for _ in range(runs):
                starts.clear()
                config: RunnableConfig = {"configurable": {"thread_id": str(uuid.uuid4())}}
                t0 = time.perf_counter()
                graph.invoke({"i": -1}, config, durability="sync")
                starts.append(time.perf_counter())
                whole.append((time.perf_counter() - t0) * 1000)
                samples += [(b - a) * 1000 for a, b in itertools.pairwise(starts)]
            out.append(samples)
    return {"reps": out, "workflow_ms": whole, "import_ms": import_ms}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.baselines", description=__doc__)
    parser.add_argument(
        "which", choices=["raw_insert", "raw_insert_rate", "plain", "dbos", "langgraph"]
    )
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    if args.which == "raw_insert_rate":
        result = raw_insert_rate(args.size, args.clients, args.seconds)
    else:
        result = globals()[args.which](args.size, args.runs, args.reps)
    result["versions"] = _versions(args.which)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)  # DBOS leaves non-daemon threads behind; the numbers are out


def _versions(which: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    names = {
        "dbos": ["dbos", "sqlalchemy", "psycopg"],
        "langgraph": ["langgraph", "langgraph-checkpoint-postgres", "psycopg"],
    }.get(which, ["psycopg"])
    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "?"
    return out


if __name__ == "__main__":
    raise SystemExit(main())
