"""Part 10: traces (issue 49). The journal's hot path with the trace exporter running beside it
against without it (interleaved repetitions in the same run, the same web server), and the
exporter's throughput in spans/s to a local OTLP/HTTP sink.

A third figure drops the index the exporter reads events by (runs 0004, `event_xact_idx`) for a
round, which is what the hot path pays for traces whether or not an exporter runs.

The sink answers every request 200 with an empty ExportTraceServiceResponse without decoding it
(a collector that keeps up); the exporter is `manage.py export_traces` as a deployment runs it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench import stack
from bench.common import BENCH_DB, Figure
from bench.context import Ctx
from bench.part_throughput import _load


class _Sink:
    """An OTLP/HTTP endpoint that accepts everything: what a collector that keeps up answers."""

    def __init__(self) -> None:
        sink = self
        self.requests = 0
        self.bytes = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                sink.requests += 1
                sink.bytes += len(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _rewind_cursor(last: int) -> int:
    """The exporter's cursor moved back to just before the journal's `last` latest committed
    events (its start when it holds fewer); the events the exporter will read. Not the whole
    journal: after the full tier's scaling part it holds millions of events, which one export
    from the start took longer than the part's timeout to send (bench/RESULTS.md at 7c722d1)."""
    with stack.admin_connect(BENCH_DB) as conn:
        row = conn.execute(
            "SELECT xact::text::bigint, id FROM runs_event WHERE xact IS NOT NULL"
            " ORDER BY xact DESC, id DESC OFFSET %s LIMIT 1",
            (last,),
        ).fetchone()
        xact, event_id = (int(row[0]), int(row[1])) if row else (0, 0)
        conn.execute(
            "UPDATE traces_tracecursor SET event_xact = %s, event_id = %s", (xact, event_id)
        )
        counted = conn.execute(
            "SELECT count(*) FROM runs_event WHERE xact IS NOT NULL"
            " AND (xact, id) > (%s::text::xid8, %s)",
            (str(xact), event_id),
        ).fetchone()
    return int(counted[0]) if counted else 0


def run(ctx: Ctx, workers: int, threads: int) -> None:
    res = ctx.results
    seconds = ctx.size["throughput_seconds"]
    reps = ctx.size["reps"]
    concurrency = 8 if ctx.tier != "smoke" else 1
    sink = _Sink()
    env = stack.project_env(OTEL_EXPORTER_OTLP_ENDPOINT=sink.url)
    try:
        without = res.add(
            Figure(
                f"hot path, no exporter, {concurrency} concurrent runs",
                "steps/s",
                higher_is_better=True,
            )
        )
        beside = res.add(
            Figure(
                f"hot path, exporter running, {concurrency} concurrent runs",
                "steps/s",
                higher_is_better=True,
                baseline=f"hot path, no exporter, {concurrency} concurrent runs",
            )
        )
        unindexed = res.add(
            Figure(
                f"hot path, no exporter, no xact index, {concurrency} concurrent runs",
                "steps/s",
                higher_is_better=True,
                baseline=f"hot path, no exporter, {concurrency} concurrent runs",
            )
        )
        with stack.web_server(workers=workers, threads=threads) as (url, _):
            _load(url, ctx.token, 2, 1.0)  # warm up every worker
            for rep in range(reps):
                ctx.log(f"traces: hot path without, then with the exporter ({rep + 1}/{reps})")
                rate, _, _ = _load(url, ctx.token, concurrency, seconds)
                without.add_rep([rate])
                exporter = stack.spawn(
                    [sys.executable, "manage.py", "export_traces", "--interval", "0.5"],
                    log_name="bench-traces-exporter",
                    env=env,
                )
                try:
                    time.sleep(2.0)  # started, and caught up with what the last round wrote
                    rate, _, _ = _load(url, ctx.token, concurrency, seconds)
                    beside.add_rep([rate])
                finally:
                    stack.stop(exporter)
                # what the exporter's commit-order index costs each event (runs 0004)
                with stack.admin_connect(BENCH_DB) as conn:
                    conn.execute("DROP INDEX event_xact_idx")
                try:
                    rate, _, _ = _load(url, ctx.token, concurrency, seconds)
                    unindexed.add_rep([rate])
                finally:
                    with stack.admin_connect(BENCH_DB) as conn:
                        conn.execute("CREATE INDEX event_xact_idx ON runs_event (xact, id)")

        spans_per_second = res.add(
            Figure("trace export, the journal's latest events", "spans/s", higher_is_better=True)
        )
        exported = events = 0
        for _ in range(reps):
            events = _rewind_cursor(ctx.size["trace_export_events"])
            proc = subprocess.run(
                [sys.executable, "manage.py", "export_traces", "--once"],
                cwd=stack.tree(),
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"export_traces --once failed:\n{proc.stdout}\n{proc.stderr}")
            found = re.search(r"exported (\d+) spans .* in ([\d.]+) s", proc.stdout)
            if found is None:
                raise RuntimeError(f"export_traces --once said: {proc.stdout}")
            exported, elapsed = int(found.group(1)), float(found.group(2))
            spans_per_second.add_rep([exported / elapsed])
        res.note(
            "traces",
            f"Hot path: {concurrency} concurrent agent runs (bench.load, a read and a write step "
            f"in turn), {seconds:g} s per repetition, without and then with "
            "`manage.py export_traces` running beside the web server (the exporter reads the "
            "committed journal and sends OTLP/HTTP to a local sink), then with the events' "
            "`event_xact_idx` dropped (what the exporter's commit-order index costs the hot "
            "path; the column's default stays), interleaved. Export: "
            f"`export_traces --once` over the journal's {events} latest events, making {exported} "
            f"spans, {sink.requests} OTLP requests ({sink.bytes / 1e6:.1f} MB) over the part; "
            "the time is the command's own export time (its start-up left out): reading the "
            "events, their runs and steps, building the spans, sending them, moving the cursor.",
        )
    finally:
        sink.close()
