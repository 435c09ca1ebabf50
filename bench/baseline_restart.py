"""The step-12 story for the libraries (bench/.venv): a new process resumes at step 13.

    bench/.venv/bin/python bench/baseline_restart.py {dbos,langgraph} {crash,resume} ID

crash: runs a 20-step workflow (graph) and dies with os._exit as step 13 starts, i.e. right
after step 12's output was checkpointed. resume: a new process imports the library, recovers
the same workflow (DBOS: `DBOS.launch()` recovers this executor's pending workflows; LangGraph:
`invoke(None)` on the same thread_id) and prints the wall-clock time at which step 13 starts.
Same payloads as bench/restart_agent.py (~10 KB per step).
"""

from __future__ import annotations

import time

_T_START = time.time()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import Any, TypedDict  # noqa: E402


class State(TypedDict, total=False):
    i: int
    last: dict[str, Any]


PAYLOAD = {"text": "x" * 10_000}
PG = "postgresql://{user}@{host}:{port}/{db}".format(
    user=os.environ.get("BENCH_PG_USER", "root"),
    host=os.environ.get("BENCH_PG_HOST", "127.0.0.1"),
    port=os.environ.get("BENCH_PG_PORT", "5432"),
    db="{db}",
)


def _at_step_13(phase: str, import_ms: float) -> None:
    if phase == "crash":
        os._exit(137)
    print(json.dumps({"step13_at": time.time(), "import_ms": import_ms}), flush=True)
    os._exit(0)


def dbos(phase: str, workflow_id: str) -> None:
    t0 = time.time()
    from dbos import DBOS, DBOSConfig, SetWorkflowID

    import_ms = (time.time() - t0) * 1000
    config: DBOSConfig = {
        "name": "bench-restart",
        "system_database_url": PG.format(db="bench_dbos_sys"),
        "log_level": "ERROR",
        "executor_id": f"bench-{workflow_id}",
    }
    DBOS(config=config)

    @DBOS.step()
    def step(i: int) -> dict[str, object]:
        if i == 13:
            _at_step_13(phase, import_ms)
        return {"i": i, **PAYLOAD}

    @DBOS.workflow()
    def workflow() -> int:
        for i in range(20):
            step(i)
        return 20

    DBOS.launch()
    if phase == "crash":
        with SetWorkflowID(workflow_id):
            workflow()
    else:
        time.sleep(60)  # launch() recovers the pending workflow in the background


def langgraph(phase: str, thread_id: str) -> None:
    t0 = time.time()
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.graph import END, START, StateGraph

    import_ms = (time.time() - t0) * 1000

    def node(i: int) -> Any:
        def run(state: State) -> State:
            if i == 13:
                _at_step_13(phase, import_ms)
            return {"i": i, "last": {"i": i, **PAYLOAD}}

        return run

    builder = StateGraph(State)
    for i in range(20):
        builder.add_node(f"n{i}", node(i))
    builder.add_edge(START, "n0")
    for i in range(19):
        builder.add_edge(f"n{i}", f"n{i + 1}")
    builder.add_edge("n19", END)
    with PostgresSaver.from_conn_string(PG.format(db="bench_langgraph")) as saver:
        if phase == "crash":
            saver.setup()
        graph = builder.compile(checkpointer=saver)
        config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
        graph.invoke({"i": -1} if phase == "crash" else None, config, durability="sync")


if __name__ == "__main__":
    which, phase, ident = sys.argv[1:4]
    {"dbos": dbos, "langgraph": langgraph}[which](phase, ident)
    sys.exit(3)  # never reached when step 13 runs
