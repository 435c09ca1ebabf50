"""Part 8: past one machine. Throughput with 1 and 2 web nodes (each `python -m config.serve`
on its own port) through PgBouncer in transaction pooling mode, the CPU each tier spends per
step, and how far a streaming replica falls behind under that load.

The part builds its own PostgreSQL pair on free ports of the bench's range: a primary (initdb,
server defaults: fsync on, synchronous_commit on) and a hot standby (pg_basebackup -R,
asynchronous streaming), with Debian's PgBouncer in front of the primary (pool_mode =
transaction, default_pool_size 20). Every web node is `python -m config.serve --workers W
--threads T` (granian) serving the committed tree with DATABASE_POOLER=pgbouncer, connected as
the bench's ordinary role (bench.common.APP_ROLE), so the teams' policies bind it. The load is
bench.load's agent runs (a read step and a write step alternately) from up to 4 client
processes, spread over the nodes by process (a client-side balancer). CPU per step is each
tier's user+system time (psutil, live processes and reaped children) over the steps done: web
(every node's server), PgBouncer, the primary's postgres processes, the standby's; on a 2-core
machine that sum, not the node count, sets the ceiling: cores × 1000 / (CPU ms per step)
steps/s.

Replica lag is sampled every 250 ms during the 2-node runs: on the standby, the query the
dashboard's banner uses (replay behind receive, in seconds); on the primary, pg_stat_replication's
replay_lag and the bytes of WAL not yet replayed.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import psycopg

from bench import stack
from bench.common import APP_ROLE, Figure
from bench.context import Ctx
from bench.part_throughput import _load

POOL_SIZE = 20
LAG_SQL = """
SELECT CASE
    WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
    ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0)
END
"""


def missing_programs() -> list[str]:
    """What this part needs and the machine lacks: PostgreSQL's server binaries, PgBouncer."""
    missing = []
    if not glob.glob("/usr/lib/postgresql/*/bin/pg_basebackup"):
        missing.append("PostgreSQL's server binaries (initdb, pg_basebackup)")
    if not (shutil.which("pgbouncer") or Path("/usr/sbin/pgbouncer").exists()):
        missing.append("Debian's pgbouncer")
    return missing


def _as_postgres(args: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _cpu(pid: int) -> float:
    """user+system seconds of a process, its live descendants and its reaped children."""
    try:
        proc = psutil.Process(pid)
        times = proc.cpu_times()
        total = times.user + times.system + times.children_user + times.children_system
        for child in proc.children(recursive=True):
            try:
                t = child.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total
    except psutil.NoSuchProcess:
        return 0.0


def _postmaster_pid(data: Path) -> int:
    return int((data / "postmaster.pid").read_text().splitlines()[0])


@contextmanager
def streaming_pair() -> Iterator[dict[str, Any]]:
    """A primary with database `ledger` and a hot standby streaming from it; their URLs and pids."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not bins:
        raise RuntimeError("PostgreSQL's server binaries are not installed")
    pg_bin = Path(bins[-1])
    folder = Path(tempfile.mkdtemp(prefix="bench-nodes-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    primary, replica = folder / "primary", folder / "replica"
    pg_ctl = str(pg_bin / "pg_ctl")

    def run(args: list[str]) -> None:
        subprocess.run(_as_postgres(args), check=True, capture_output=True, timeout=300)

    try:
        run(
            [str(pg_bin / "initdb"), "-D", str(primary), "-U", "root", "--auth=trust", "-E", "UTF8"]
        )
        primary_port = stack.free_port()
        with open(primary / "postgresql.auto.conf", "a") as conf:
            conf.write(
                f"port = {primary_port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{folder}'\ntimezone = 'UTC'\nmax_connections = 60\n"
            )
        with open(primary / "pg_hba.conf", "a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        run([pg_ctl, "-D", str(primary), "-l", str(folder / "primary.log"), "-w", "start"])
        with psycopg.connect(
            f"postgresql://root@127.0.0.1:{primary_port}/postgres", autocommit=True
        ) as conn:
            # served as the bench's ordinary role, as bench_ledger is (bench.stack): the owner of
            # the tables, neither a superuser nor BYPASSRLS, so the teams' policies bind it
            conn.execute(f'CREATE ROLE "{APP_ROLE}" LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEROLE')
            conn.execute(f'CREATE DATABASE ledger OWNER "{APP_ROLE}"')
        run([str(pg_bin / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary_port),
             "-U", "root", "-D", str(replica), "-R", "-X", "stream", "--checkpoint=fast"])  # fmt: skip
        replica_port = stack.free_port()
        with open(replica / "postgresql.auto.conf", "a") as conf:
            conf.write(f"port = {replica_port}\n")
        run([pg_ctl, "-D", str(replica), "-l", str(folder / "replica.log"), "-w", "start"])
        yield {
            "primary": f"postgres://{APP_ROLE}@127.0.0.1:{primary_port}/ledger",
            "replica": f"postgres://{APP_ROLE}@127.0.0.1:{replica_port}/ledger",
            "primary_port": primary_port,
            "primary_pid": _postmaster_pid(primary),
            "replica_pid": _postmaster_pid(replica),
            "version": pg_bin.parent.name,
        }
    finally:
        for data in (replica, primary):
            if (data / "postmaster.pid").exists():
                subprocess.run(
                    _as_postgres([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"]),
                    capture_output=True,
                    timeout=60,
                )
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def pgbouncer(upstream_port: int) -> Iterator[tuple[int, int]]:
    """Debian's PgBouncer, transaction pooling, in front of the primary; (port, pid)."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        raise RuntimeError("Debian's pgbouncer is not installed")
    folder = Path(tempfile.mkdtemp(prefix="bench-nodes-pgbouncer-"))
    folder.chmod(0o755)
    port = stack.free_port()
    (folder / "userlist.txt").write_text(f'"{APP_ROLE}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"[databases]\n* = host=127.0.0.1 port={upstream_port}\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'userlist.txt'}\npool_mode = transaction\n"
        f"default_pool_size = {POOL_SIZE}\nmax_client_conn = 500\n"
    )
    for path in folder.iterdir():
        path.chmod(0o644)
    user = ["-u", "postgres"] if os.geteuid() == 0 else []
    proc = stack.spawn([binary, *user, str(folder / "pgbouncer.ini")], log_name="pgbouncer")
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                psycopg.connect(f"postgresql://{APP_ROLE}@127.0.0.1:{port}/ledger").close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield port, proc.pid
    finally:
        stack.stop(proc)
        shutil.rmtree(folder, ignore_errors=True)


class LagSampler:
    """Samples the standby's lag every 250 ms while running."""

    def __init__(self, primary: str, replica: str) -> None:
        self.primary = primary.replace("postgres://", "postgresql://")
        self.replica = replica.replace("postgres://", "postgresql://")
        self.banner: list[float] = []  # seconds, the dashboard banner's query on the standby
        self.replay_lag: list[float] = []  # seconds, pg_stat_replication.replay_lag
        self.bytes: list[float] = []  # WAL bytes sent by the primary, not yet replayed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> LagSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _sample(self) -> None:
        with (
            psycopg.connect(self.primary, autocommit=True) as primary,
            psycopg.connect(self.replica, autocommit=True) as replica,
        ):
            while not self._stop.wait(0.25):
                row = replica.execute(LAG_SQL).fetchone()
                if row and row[0] is not None:
                    self.banner.append(float(row[0]))
                row = primary.execute(
                    "SELECT EXTRACT(EPOCH FROM replay_lag),"
                    " pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)"
                    " FROM pg_stat_replication"
                ).fetchone()
                if row:
                    if row[0] is not None:
                        self.replay_lag.append(float(row[0]))
                    if row[1] is not None:
                        self.bytes.append(float(row[1]))


def _manage(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=stack.tree(),
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def run(ctx: Ctx, workers: int, threads: int) -> None:
    res = ctx.results
    seconds = ctx.size["throughput_seconds"]
    reps = ctx.size["reps"]
    concurrencies = [c for c in ctx.size["concurrency"] if c > 1] or [4]
    rows = [
        "| web nodes | concurrent runs | steps/s per repetition | errors | CPU ms/step: web | "
        "PgBouncer | primary | standby | total |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    lag_rows: list[str] = []
    with streaming_pair() as pair, pgbouncer(pair["primary_port"]) as (bouncer_port, bouncer_pid):
        direct = stack.project_env(DATABASE_URL=pair["primary"])
        ctx.log("nodes: migrating the part's own primary")
        _manage(direct, "migrate", "--noinput")
        token = _manage(direct, "create_worker_token", "bench-nodes").strip().splitlines()[-1]
        pooled = stack.project_env(
            DATABASE_URL=f"postgres://{APP_ROLE}@127.0.0.1:{bouncer_port}/ledger",
            DATABASE_POOLER="pgbouncer",
        )
        with (
            stack.web_server(workers=workers, threads=threads, env=pooled) as (url_a, proc_a),
            stack.web_server(workers=workers, threads=threads, env=pooled) as (url_b, proc_b),
        ):
            for nodes in (1, 2):
                urls = [url_a, url_b][:nodes]
                web_pids = [proc_a.pid, proc_b.pid][:nodes]
                _load(urls, token, 2 * nodes, 1.0)  # warm every worker of the nodes used
                for concurrency in concurrencies:
                    ctx.log(f"nodes: {nodes} web node(s), {concurrency} concurrent runs")
                    fig = res.add(
                        Figure(
                            f"steps/s, {nodes} web node(s) via PgBouncer, {concurrency} runs",
                            "steps/s",
                            higher_is_better=True,
                        )
                    )
                    cpu_fig = res.add(
                        Figure(
                            f"CPU per step, all tiers, {nodes} web node(s), {concurrency} runs",
                            "ms",
                        )
                    )
                    rates: list[float] = []
                    errors_total = 0
                    tiers = {"web": 0.0, "pgbouncer": 0.0, "primary": 0.0, "standby": 0.0}
                    steps_total = 0
                    sampler = LagSampler(pair["primary"], pair["replica"])
                    with sampler:
                        for _ in range(reps):
                            before = _tier_cpu(web_pids, bouncer_pid, pair)
                            rate, steps, errors = _load(urls, token, concurrency, seconds)
                            after = _tier_cpu(web_pids, bouncer_pid, pair)
                            rates.append(rate)
                            errors_total += errors
                            fig.add_rep([rate])
                            if steps:
                                steps_total += steps
                                for k in tiers:
                                    tiers[k] += after[k] - before[k]
                                cpu_fig.add_rep(
                                    [sum(after[k] - before[k] for k in tiers) * 1000 / steps]
                                )
                    per = {k: v * 1000 / max(1, steps_total) for k, v in tiers.items()}
                    rows.append(
                        f"| {nodes} | {concurrency} | {', '.join(f'{r:.0f}' for r in rates)} | "
                        f"{errors_total} | {per['web']:.2f} | {per['pgbouncer']:.2f} | "
                        f"{per['primary']:.2f} | {per['standby']:.2f} | {sum(per.values()):.2f} |"
                    )
                    lag_rows.append(
                        f"| {nodes} | {concurrency} | {len(sampler.banner)} | "
                        f"{_pct(sampler.banner, 0.5):.3f} | {_pct(sampler.banner, 0.99):.3f} | "
                        f"{max(sampler.banner, default=0):.3f} | "
                        f"{_pct(sampler.replay_lag, 0.5) * 1000:.1f} | "
                        f"{max(sampler.replay_lag, default=0) * 1000:.1f} | "
                        f"{_pct(sampler.bytes, 0.5) / 1024:.0f} | "
                        f"{max(sampler.bytes, default=0) / 1024:.0f} |"
                    )
                    if nodes == 2:
                        lag = res.add(
                            Figure(f"replica lag (banner query), {concurrency} runs", "s")
                        )
                        lag.add_rep(sampler.banner or [0.0])
    cores = psutil.cpu_count() or 2
    res.note(
        "nodes",
        f"Each web node: granian (python -m config.serve) {workers} workers × {threads} threads on "
        f"its own port, as the ordinary role {APP_ROLE}, "
        f"DATABASE_POOLER=pgbouncer, through one PgBouncer (transaction pooling, "
        f"default_pool_size {POOL_SIZE}) to the part's own PostgreSQL {pair['version']} primary "
        f"(server defaults, fsync on) streaming asynchronously to a hot standby on the same "
        f"machine. Load: bench.load agent runs from up to 4 client processes, each client process "
        f"pinned to one node in turn. Every process (clients, nodes, PgBouncer, both servers) "
        f"shares the machine's {cores} cores, so the node count cannot raise the ceiling here: "
        f"cores × 1000 / total CPU ms per step is it, and the per-tier columns say what one more "
        f"core buys where.\n\n" + "\n".join(rows) + "\n\n"
        "Replica lag during those runs (sampled every 250 ms):\n\n"
        "| web nodes | concurrent runs | samples | banner query p50 s | p99 s | max s | "
        "replay_lag p50 ms | max ms | unreplayed WAL p50 KiB | max KiB |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(lag_rows),
    )


def _tier_cpu(web_pids: list[int], bouncer_pid: int, pair: dict[str, Any]) -> dict[str, float]:
    return {
        "web": sum(_cpu(pid) for pid in web_pids),
        "pgbouncer": _cpu(bouncer_pid),
        "primary": _cpu(pair["primary_pid"]),
        "standby": _cpu(pair["replica_pid"]),
    }
