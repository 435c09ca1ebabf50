"""Part: the web servers and the SDK's HTTP clients, side by side, serving the same hot calls.

Servers: granian (the product's web server, `python -m config.serve`: its WSGI interface on
config.wsgi with the lean path in front of Django), gunicorn (gthread, `--preload`: the settings
production ran before it moved to granian, the same config.wsgi) and uvicorn with httptools
(config.asgi, where the hot calls go through Django's URL conf to the lean path's first door).
Each server gets the same processes and threads. Clients (bench/http_clients.py): the worker
SDK's HttpTransport over urllib3 (the SDK's own), over httpx (the SDK's before), and the floor, the
standard library's http.client; through `bench/sdk_steps.py`, so a server that answered anything
wrong would stop the run (a refusal raises). Both WSGI servers serve at once and every (server,
client) pair takes one repetition per round, in turn (the order reversed every other round), so
a load that drifts during the part falls on every pair alike; uvicorn (4-5× slower already)
runs after them, with the SDK's own client only.

Per server and client: write and read step p50 and p99, the client's CPU per step (the agent
process's) and the server's (its process tree's), over the same steps.

gunicorn, httptools and uvloop are bench-only (bench/.venv): those servers run the bench venv's
interpreter with the served tree and the project's site-packages first on PYTHONPATH, so Django
and the app are the project's, the server is the bench venv's. granian runs as the bench's other
parts start it (bench.stack.web_server), without its access line per request (WEB_ACCESS_LOG=0),
as gunicorn runs here.

    python -m bench servers --quick --out bench/SERVERS.md     # this part alone, its own file
"""

from __future__ import annotations

import contextlib
import select
import statistics
import subprocess
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench import stack
from bench.common import BENCH_DB, BENCH_VENV_PY, Figure
from bench.context import Ctx
from bench.part_step import _served_json

WSGI_SERVERS = ("granian", "gunicorn")
CLIENTS = ("urllib3", "httpx", "http.client")
SDK_CLIENT = "urllib3"  # the one intentledger uses itself (uvicorn is measured with it alone)
BASE = ("granian", SDK_CLIENT)  # what the image serves, through what the SDK sends
HEALTH_CHECKS = 500  # per repetition


def _server_env() -> dict[str, str]:
    site = sysconfig.get_paths()["purelib"]  # the project's interpreter runs the bench
    return stack.project_env(PYTHONPATH=f"{stack.tree()}:{site}")


def server_args(name: str, port: int, workers: int, threads: int) -> list[str]:
    if name == "gunicorn":
        return [
            str(BENCH_VENV_PY), "-m", "gunicorn", "config.wsgi", "-b", f"127.0.0.1:{port}",
            "-w", str(workers), "--threads", str(threads), "--preload", "--no-control-socket",
            "--log-level", "warning",
        ]  # fmt: skip
    # one process: one keep-alive client is served by one process anyway, so latency compares
    # equally (and the ASGI app holds no thread per request, so threads have no equivalent).
    return [
        str(BENCH_VENV_PY), "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
        "--port", str(port), "--http", "httptools",
        "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip


@contextmanager
def serving(name: str, workers: int, threads: int) -> Iterator[tuple[str, int]]:
    """(base URL, the server's master pid) while `name` serves the bench database."""
    if name == "granian":
        env = stack.project_env(WEB_ACCESS_LOG="0")
        with stack.web_server(workers=workers, threads=threads, env=env) as (url, main):
            yield url, main.pid
        return
    port = stack.free_port()
    proc: subprocess.Popen[bytes] = stack.spawn(
        server_args(name, port, workers, threads), log_name=f"{name}-{port}", env=_server_env()
    )
    url = f"http://127.0.0.1:{port}"
    try:
        stack.wait_http(f"{url}/api/v1/schema/", proc)
        yield url, proc.pid
    finally:
        stack.stop(proc)


def _steps(ctx: Ctx, url: str, pid: int, client: str, runs: int, reps: int) -> dict[str, Any]:
    """bench.sdk_steps over HTTP through `client`, with the server's CPU read around the steps."""
    env = stack.project_env(PYTHONPATH=f"{stack.tree()}:{stack.tree() / 'sdk' / 'src'}")
    args = ["--transport", "http", "--url", url, "--token", ctx.token, "--size", "100"]
    args += ["--client", client, "--server-pid", str(pid), "--runs", str(runs), "--reps", str(reps)]
    return _served_json("bench.sdk_steps", args, env)


def run(ctx: Ctx, workers: int, threads: int) -> None:
    """Both WSGI servers up at once and every (server, client) pair measured once a round, in
    turn, so a load that drifts during the part (the machine is shared) falls on every pair
    alike; then uvicorn alone."""
    res = ctx.results
    # three times the step part's runs: a server's CPU is read in clock ticks (10 ms), so a
    # repetition needs a few hundred milliseconds of it to be read to a few percent (the smoke
    # tier checks the machinery: one round of one run)
    smoke = ctx.tier == "smoke"
    reps, runs = (1, 1) if smoke else (ctx.size["reps"], 3 * ctx.size["step_runs"])
    pairs = [(name, client) for name in WSGI_SERVERS for client in CLIENTS]
    measured: dict[tuple[str, str], dict[str, Any]] = {}
    try:
        with contextlib.ExitStack() as servers:
            where = {
                name: servers.enter_context(serving(name, workers, threads))
                for name in WSGI_SERVERS
            }
            for name, client in pairs:  # warm every worker's code paths
                _steps(ctx, *where[name], client, 1, 1)
            for round_ in range(reps):
                ctx.log(
                    f"servers: round {round_ + 1} of {reps}, {len(pairs)} server × client pairs"
                )
                for pair in pairs if round_ % 2 == 0 else reversed(pairs):
                    _merge(
                        measured.setdefault(pair, {}),
                        _steps(ctx, *where[pair[0]], pair[1], runs, 1),
                    )
        with serving("uvicorn", workers, threads) as (url, pid):
            ctx.log(f"servers: uvicorn through {SDK_CLIENT}")
            _steps(ctx, url, pid, SDK_CLIENT, 1, 1)
            measured[("uvicorn", SDK_CLIENT)] = _steps(ctx, url, pid, SDK_CLIENT, runs, reps)
    except Exception as exc:
        res.note("servers", f"- the servers could not all run: {exc}")
    rows = [_figures(ctx, name, client, values) for (name, client), values in measured.items()]
    res.extra["servers"] = rows
    res.note("servers", _table(rows, workers, threads))
    res.note("servers", _decision(rows))
    _health_check(ctx)


def _decision(rows: list[dict[str, Any]]) -> str:
    """What the figures decided (issue 46 item 4), with this invocation's ratios."""
    row = {(r["server"], r["client"]): r for r in rows}

    def ratio(a: tuple[str, str], b: tuple[str, str], key: str) -> str:
        if a not in row or b not in row or not row[b][key]:
            return "–"
        return f"{row[a][key] / row[b][key]:.2f}×"

    urllib3, httpx = ("granian", "urllib3"), ("granian", "httpx")
    gunicorn = ("gunicorn", SDK_CLIENT)
    return (
        "**What was decided.** The SDK's client is urllib3's pool (one dependency, as httpx was): "
        "its CPU per step (one call each here) is "
        f"{ratio(urllib3, httpx, 'write_client_cpu')} httpx's for a write step and "
        f"{ratio(urllib3, httpx, 'read_client_cpu')} for a read step, with the same "
        "retries, timeouts, TLS checks and environment proxies (tests/intentledger); the "
        "standard library's http.client, the floor, is "
        f"{ratio(('granian', 'http.client'), urllib3, 'write_client_cpu')} urllib3's "
        "(it sends headers and body in one write; urllib3 in two). The server is granian "
        "(`python -m config.serve`; issue 46 item 4), which serves the same calls with "
        f"{ratio(BASE, gunicorn, 'write_server_cpu')} (write) and "
        f"{ratio(BASE, gunicorn, 'read_server_cpu')} (read) of gunicorn's server CPU per step, "
        f"at {ratio(BASE, gunicorn, 'write_p50')} / {ratio(BASE, gunicorn, 'read_p50')} its "
        "write / read p50 (latency drifts with the shared machine's load; CPU much less). The "
        "image, compose, the deploy docs and the test servers run it, with the robustness duties "
        "gunicorn had (graceful stop and reload, worker recycling, header limits, JSON access "
        "logs) set in config/serve.py; gunicorn stays here, bench-only, as the measure."
    )


def _merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    """One more repetition of bench.sdk_steps' answer added to `into` (same shape)."""
    for key, value in more.items():
        if isinstance(value, dict):
            _merge(into.setdefault(key, {}), value)
        else:
            into.setdefault(key, []).extend(value)


def _health_check(ctx: Ctx) -> None:
    """What the WSGI door's socket check (runs.hotpath.socket_health_check) saves per call:
    Django's health check, a `SELECT 1` round trip on the kept connection, against a poll of its
    socket."""
    res = ctx.results
    trip = res.add(Figure("Django's health check: SELECT 1 on a kept connection", "ms"))
    poll = res.add(Figure("the door's health check: a poll of the connection's socket", "ms"))
    cpu = res.add(Figure("Django's health check: client CPU per SELECT 1", "ms"))
    with stack.admin_connect(BENCH_DB) as conn:
        conn.autocommit = True
        sock = conn.pgconn.socket
        for _ in range(ctx.size["reps"]):
            trips, polls = [], []
            cpu0 = time.process_time()
            for _ in range(HEALTH_CHECKS):
                t0 = time.perf_counter()
                conn.execute("SELECT 1").fetchone()
                trips.append((time.perf_counter() - t0) * 1000)
            cpu.add_rep([(time.process_time() - cpu0) * 1000 / HEALTH_CHECKS])
            for _ in range(HEALTH_CHECKS):
                t0 = time.perf_counter()
                select.select([sock], [], [], 0)
                polls.append((time.perf_counter() - t0) * 1000)
            trip.add_rep(trips)
            poll.add_rep(polls)
    res.note(
        "servers",
        f"Django's health check (CONN_HEALTH_CHECKS): `SELECT 1` on a kept psycopg connection to "
        f"the bench database, {trip.p50 * 1000:.0f} µs p50 ({trip.p99 * 1000:.0f} µs p99), "
        f"{cpu.p50 * 1000:.0f} µs of the caller's CPU, before a call's statement; the WSGI "
        "door's check (`runs.hotpath.socket_health_check`, a zero-timeout poll of the same "
        f"socket) {poll.p50 * 1000:.1f} µs. The door replaces Django's check with its own, so "
        "a hot call is one round trip, not two; a backend that died between calls is still "
        "found and replaced (tests/runs/test_hot_path.py).",
    )


def _figures(ctx: Ctx, server: str, client: str, measured: dict[str, Any]) -> dict[str, Any]:
    res = ctx.results
    row: dict[str, Any] = {"server": server, "client": client}
    for key in ("write", "read"):
        fig = res.add(Figure(f"server {server}, client {client}: SDK {key} step 100B", "ms"))
        for rep in measured[key]:
            fig.add_rep(rep)
        row[f"{key}_p50"], row[f"{key}_p99"] = fig.p50, fig.p99
        for which, title in (("client_cpu", "client CPU"), ("server_cpu", "server CPU")):
            cpu = res.add(Figure(f"server {server}, client {client}: {title} per {key} step", "ms"))
            for value in measured[which][key]:
                cpu.add_rep([value])
            row[f"{key}_{which}"] = statistics.median(measured[which][key])
    return row


def _table(rows: list[dict[str, Any]], workers: int, threads: int) -> str:
    base = next((r for r in rows if (r["server"], r["client"]) == BASE), None)
    lines = [
        "| server | client | write p50 | write p99 | read p50 | read p99 | client CPU / step "
        f"(write, read) | server CPU / step (write, read) | write p50 ÷ {'+'.join(BASE)} | "
        f"read p50 ÷ {'+'.join(BASE)} |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = {
            key: f"{r[f'{key}_p50'] / base[f'{key}_p50']:.2f}×" if base else "–"
            for key in ("write", "read")
        }
        lines.append(
            f"| {r['server']} | {r['client']} | {r['write_p50']:.2f} ms | {r['write_p99']:.2f} ms"
            f" | {r['read_p50']:.2f} ms | {r['read_p99']:.2f} ms"
            f" | {r['write_client_cpu']:.3f}, {r['read_client_cpu']:.3f} ms"
            f" | {r['write_server_cpu']:.3f}, {r['read_server_cpu']:.3f} ms"
            f" | {ratio['write']} | {ratio['read']} |"
        )
    return (
        f"granian and gunicorn with {workers} processes × {threads} threads, uvicorn one process "
        "(one keep-alive client is served by one process), serving the same tree and database; "
        "both WSGI servers up at once, every (server, client) pair measured once a round, in turn "
        "(the order reversed every other round), so a drifting load falls on every pair alike. The client is the worker SDK's HttpTransport (kept connections) over "
        "urllib3's connection pool (the SDK's own), over httpx (the SDK's before) or, as the "
        "floor, over one http.client connection (bench/http_clients.py); 20-step runs, "
        "100 B payloads, a write step enforced by the tool (one call: its outcome rides on the "
        "next step's intent), a read step one call. CPU per step: the agent process's "
        "(time.process_time) and the server's process tree's (psutil), over the timed steps "
        "only. granian: `python -m config.serve` (production's launcher: its WSGI interface "
        "on config.wsgi), no access log; gunicorn: gthread, `--preload` (production's settings "
        "before granian); uvicorn: `--http httptools` on config.asgi.\n\n" + "\n".join(lines)
    )
