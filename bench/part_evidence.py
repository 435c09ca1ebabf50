"""The evidence pack at 10,000 runs: build time, size, memory, and offline verification time.

    SECRET_KEY=dev .venv/bin/python -m bench.part_evidence [--runs 10000] [--steps 8]

Makes its own database (BENCH_EVIDENCE_DB, default bench_evidence), migrates it, creates `--runs`
runs with valid chains (bench.testdata.runs_bulk_create: `--steps` steps each, every tenth run
with a person's resolution) spread over the last 30 days, signs a checkpoint over them, then
times, each in a process of its own as a person runs it:

- `manage.py evidence_pack --from … --to … -o FILE.zip` (wall time, the process's peak RSS, the
  ZIP's size and its files' sizes);
- `python -m audit.verify FILE.zip` with this interpreter, and with the system's Python (another
  interpreter and another `cryptography`, no Django) when it has `cryptography`.

Writes bench/EVIDENCE.md and bench/EVIDENCE.json and drops the database.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from bench.common import APP_ROLE

ROOT = Path(__file__).resolve().parent.parent
DB = os.environ.get("BENCH_EVIDENCE_DB", "bench_evidence")
HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PORT = os.environ.get("BENCH_PG_PORT", "5432")
USER = os.environ.get("BENCH_PG_USER", "root")
# the admin (USER) makes and drops the database; the ledger's side (migrations, the data, the
# pack) connects as the bench's ordinary role, which owns the tables and which the teams'
# policies bind, as a deployment's role is (bench.common.APP_ROLE)
URL = f"postgres://{APP_ROLE}@{HOST}:{PORT}/{DB}"


def log(msg: str) -> None:
    print(f"[evidence {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def admin(sql: str) -> None:
    with psycopg.connect(host=HOST, port=PORT, user=USER, dbname="postgres", autocommit=True) as c:
        c.execute(sql)  # type: ignore[arg-type]


# Runs a module or a script as __main__ and, at exit, writes the process's VmHWM (peak resident
# memory of its own address space, KiB) where BENCH_HWM_FILE says. Not rusage's ru_maxrss: on
# Linux that keeps the high-water mark from before exec, the size of the process that forked it.
_HWM = """import atexit, os, runpy, sys
def _hwm():
    with open('/proc/self/status') as status:
        kib = next(line for line in status if line.startswith('VmHWM')).split()[1]
    with open(os.environ['BENCH_HWM_FILE'], 'w') as out:
        out.write(kib)
atexit.register(_hwm)
kind, target = sys.argv[1], sys.argv[2]
sys.argv = sys.argv[2:]
if kind == 'module':
    runpy.run_module(target, run_name='__main__', alter_sys=True)
else:
    runpy.run_path(target, run_name='__main__')
"""


def _timed(
    python: list[str], kind: str, target: str, args: list[str], *, env: dict[str, str], cwd: Path
) -> tuple[float, int, str]:
    """Wall seconds, the process's own peak resident memory (KiB), and its output, for
    `python -m target args` (kind "module") or `python target args` (kind "script")."""
    with tempfile.TemporaryDirectory() as scratch:
        hwm = Path(scratch) / "hwm"
        command = [*python, "-c", _HWM, kind, target, *args]
        started = time.perf_counter()
        done = subprocess.run(
            command,
            env={**env, "BENCH_HWM_FILE": str(hwm)},
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
        )
        took = time.perf_counter() - started
        peak = int(hwm.read_text()) if hwm.exists() else 0
    text = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"{target} {args[:2]} failed: {text[-3000:]}")
    return took, peak, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--keep-db", action="store_true", help="do not drop the database")
    parser.add_argument("--keep-pack", metavar="FILE", help="copy the pack built to FILE")
    parser.add_argument("--out", default=str(ROOT / "bench" / "EVIDENCE.md"))
    args = parser.parse_args(argv)

    from bench.stack import ensure_app_role

    ensure_app_role()
    admin(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
    admin(f'CREATE DATABASE "{DB}" OWNER "{APP_ROLE}"')
    os.environ.setdefault("SECRET_KEY", "dev")
    sys.path.insert(0, str(ROOT))
    from audit.signing import private_key_generate

    env = {
        **os.environ,
        "DATABASE_URL": URL,
        "AUDIT_SIGNING_KEY": private_key_generate(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    work = Path(tempfile.mkdtemp(prefix="bench-evidence-"))
    try:
        log(f"migrating {DB}")
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True
        )
        os.environ.update({k: env[k] for k in ("DATABASE_URL", "AUDIT_SIGNING_KEY")})
        os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
        import django

        django.setup()
        figures = _run(args, env=env, work=work)
    finally:
        from django.db import connection

        connection.close()
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep_db:
            admin(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
            log(f"dropped {DB}")
    _write(args, figures)
    return 0


def _run(args: argparse.Namespace, *, env: dict[str, str], work: Path) -> dict[str, Any]:
    from django.db import connection

    from audit.checkpoints import checkpoint_create
    from audit.verify import OFFLINE_FILES
    from bench.testdata import runs_bulk_create
    from runs.models import Event, Step
    from teams.scope import every_team

    now = datetime.now(UTC)
    t_gen = time.perf_counter()
    # the data in `default`, as an operator's command files it; the pack is built below by
    # `manage.py evidence_pack` under its own scope, as a person runs it
    with every_team("operator command"):
        runs_bulk_create(
            runs=args.runs,
            steps_per_run=args.steps,
            agent="support",
            created_at=now - timedelta(days=30),
            spread_days=29,
        )
        checkpoint = checkpoint_create(actor="system:bench").checkpoint
        assert checkpoint is not None
        generated_s = time.perf_counter() - t_gen
        events = Event.objects.count()
        steps = Step.objects.count()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
        )
        role, bypasses_policies = cursor.fetchone()  # type: ignore[misc]
    log(f"{args.runs} runs, {steps} steps, {events} events in {generated_s:.0f} s")

    pack = work / "pack.zip"
    period = [
        "--from",
        (now - timedelta(days=31)).date().isoformat(),
        "--to",
        now.date().isoformat(),
    ]
    build_s, build_rss, out = _timed(
        [sys.executable],
        "script",
        "manage.py",
        ["evidence_pack", *period, "-o", str(pack)],
        env=env,
        cwd=ROOT,
    )
    log(out.strip())
    if args.keep_pack:
        shutil.copy(pack, args.keep_pack)
    with zipfile.ZipFile(pack) as z:
        members = {i.filename: (i.file_size, i.compress_size) for i in z.infolist()}
        manifest = json.loads(z.read("manifest.json"))["manifest"]

    # the verifier's files alone, as an auditor copies them; a clean environment
    offline = work / "offline"
    for name in OFFLINE_FILES:
        (offline / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, offline / name)
    clean = {"PATH": "/usr/bin:/bin"}
    verify_s, verify_rss, verified = _timed(
        [sys.executable], "module", "audit.verify", [str(pack)], env=clean, cwd=offline
    )
    assert verified.strip().endswith("OK"), verified
    system = shutil.which("python3", path="/usr/bin:/bin")
    system_s: float | None = None
    system_version = ""
    if (
        system
        and subprocess.run([system, "-c", "import cryptography"], check=False).returncode == 0
    ):
        system_version = subprocess.run(
            [system, "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
        system_s, _, out = _timed(
            [system], "module", "audit.verify", [str(pack)], env=clean, cwd=offline
        )
        assert out.strip().endswith("OK"), out
    return {
        "database_role": role,
        "role_bypasses_policies": bool(bypasses_policies),
        "runs": args.runs,
        "steps": steps,
        "events": events,
        "decisions": manifest["counts"]["decisions"],
        "generated_seconds": round(generated_s, 1),
        "build_seconds": round(build_s, 2),
        "build_peak_rss_mib": round(build_rss / 1024, 1),
        "pack_bytes": pack.stat().st_size,
        "members": members,
        "verify_seconds": round(verify_s, 2),
        "verify_peak_rss_mib": round(verify_rss / 1024, 1),
        "verify_python": sys.version.split()[0],
        "verify_system_seconds": round(system_s, 2) if system_s is not None else None,
        "verify_system_python": system_version,
        "load": os.getloadavg(),
        "at": now.isoformat(timespec="seconds"),
    }


def _write(args: argparse.Namespace, f: dict[str, Any]) -> None:
    rows = "\n".join(
        f"| `{name}` | {size:,} | {packed:,} |"
        for name, (size, packed) in sorted(f["members"].items(), key=lambda m: -m[1][0])
    )
    system = (
        f"| `python -m audit.verify` with the system's {f['verify_system_python']} "
        f"| **{f['verify_system_seconds']} s** |"
        if f["verify_system_seconds"] is not None
        else "| the system's Python | has no `cryptography`: not run |"
    )
    text = f"""# Evidence pack: {f["runs"]:,} runs

`python -m bench.part_evidence` ({f["at"]}; PostgreSQL on this machine, 2 shared cores, load
{f["load"][0]:.1f} / {f["load"][1]:.1f} / {f["load"][2]:.1f} when it ended). The data: {f["runs"]:,}
runs over 30 days with valid chains, {f["steps"]:,} steps, {f["events"]:,} events,
{f["decisions"]:,} decisions by people, all signed by one checkpoint (generated in
{f["generated_seconds"]} s, not timed below). Each figure is one process, started as a person
starts it, connected as the role `{f["database_role"]}` (a superuser or BYPASSRLS:
{"yes" if f["role_bypasses_policies"] else "no"}, so the teams' row-level-security policies
{"do not bind" if f["role_bypasses_policies"] else "bind"} it, as on a deployment).

| | |
|---|---|
| `manage.py evidence_pack` (the whole process: start-up, build, sign) | **{f["build_seconds"]} s** |
| its peak resident memory | {f["build_peak_rss_mib"]} MiB |
| the pack (ZIP, deflated) | **{f["pack_bytes"] / 1e6:.1f} MB** |
| `python -m audit.verify PACK.zip` offline with Python {f["verify_python"]} (no Django, no database, clean environment) | **{f["verify_seconds"]} s** |
| its peak resident memory | {f["verify_peak_rss_mib"]} MiB |
{system}

| file in the pack | bytes | deflated |
|---|---|---|
{rows}
"""
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(f, indent=1) + "\n")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    raise SystemExit(main())
