"""Part: the web server measured side by side, each serving the same hot calls to the SDK.

gunicorn (gthread, the production settings: config.wsgi with the lean path in front of Django),
granian (its WSGI interface, the same config.wsgi) and uvicorn with httptools (config.asgi, where
the hot calls go through Django's URL conf to the lean path's first door). Each server gets the
same processes and threads; the client is the worker SDK's HttpTransport (`bench/sdk_steps.py`),
so a server that answered anything wrong would stop the run (a refusal raises).

granian, httptools and uvloop are bench-only (bench/.venv): the servers run the bench venv's
interpreter with the served tree and the project's site-packages first on PYTHONPATH, so Django
and the app are the project's, the server is the bench venv's.
"""

from __future__ import annotations

import statistics
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager

from bench import stack
from bench.common import BENCH_VENV_PY, Figure
from bench.context import Ctx
from bench.part_step import _sdk_steps

SERVERS = ("gunicorn", "granian", "uvicorn")


def _server_env() -> dict[str, str]:
    site = sysconfig.get_paths()["purelib"]  # the project's interpreter runs the bench
    return stack.project_env(PYTHONPATH=f"{stack.tree()}:{site}")


def server_args(name: str, port: int, workers: int, threads: int) -> list[str]:
    bin_dir = BENCH_VENV_PY.parent
    if name == "granian":
        return [
            str(bin_dir / "granian"), "--interface", "wsgi", "config.wsgi:application",
            "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
            "--blocking-threads", str(threads), "--no-ws", "--log-level", "warning",
            "--no-access-log",
        ]  # fmt: skip
    # one process: one keep-alive client is served by one process anyway, so latency compares
    # equally (and the ASGI app holds no thread per request, so threads have no equivalent).
    return [
        str(BENCH_VENV_PY), "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
        "--port", str(port), "--http", "httptools",
        "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip


@contextmanager
def serving(name: str, workers: int, threads: int) -> Iterator[str]:
    if name == "gunicorn":
        with stack.gunicorn(workers=workers, threads=threads) as (url, _):
            yield url
        return
    port = stack.free_port()
    proc = stack.spawn(
        server_args(name, port, workers, threads), log_name=f"{name}-{port}", env=_server_env()
    )
    url = f"http://127.0.0.1:{port}"
    try:
        stack.wait_http(f"{url}/api/v1/schema/", proc)
        yield url
    finally:
        stack.stop(proc)


def run(ctx: Ctx, workers: int, threads: int) -> None:
    res = ctx.results
    reps, runs = ctx.size["reps"], ctx.size["step_runs"]
    p50s: dict[str, dict[str, float]] = {}
    for name in SERVERS:
        ctx.log(f"servers: {name}, steps through the SDK over HTTP")
        try:
            with serving(name, workers, threads) as url:
                _sdk_steps(ctx, "http", url, 100, 1, 1)  # warm every worker's code paths
                measured = _sdk_steps(ctx, "http", url, 100, runs, reps)
        except Exception as exc:
            res.note("servers", f"- {name} could not run: {exc}")
            continue
        p50s[name] = {}
        for key in ("write", "read"):
            fig = res.add(Figure(f"server {name}: SDK {key} step over HTTP 100B", "ms"))
            for rep in measured[key]:
                fig.add_rep(rep)
            p50s[name][key] = statistics.median([v for rep in measured[key] for v in rep])
    base = p50s.get("gunicorn")
    rows = [
        "| server | write step p50 | read step p50 | write ÷ gunicorn | read ÷ gunicorn |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, values in p50s.items():
        ratio = {
            k: f"{values[k] / base[k]:.2f}×" if base else "–" for k in ("write", "read")
        }  # fmt: skip
        rows.append(
            f"| {name} | {values['write']:.2f} ms | {values['read']:.2f} ms | "
            f"{ratio['write']} | {ratio['read']} |"
        )
    res.extra["servers"] = p50s
    res.note(
        "servers",
        f"gunicorn and granian with {workers} processes × {threads} threads, uvicorn one process "
        "(one keep-alive client is served by one process), serving the same tree and database; the client is the SDK's HttpTransport (one keep-alive connection), 20-step "
        "runs, 100 B payloads, in this invocation. gunicorn: gthread, `--preload` (production's "
        "settings); granian: `--interface wsgi` on config.wsgi; uvicorn: `--http httptools` on "
        "config.asgi.\n\n" + "\n".join(rows),
    )
