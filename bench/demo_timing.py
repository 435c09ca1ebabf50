"""Measure the newcomer's wait: time from `scripts/demo` to its printed summary, in a fresh clone.

    .venv/bin/python -m bench.demo_timing               # fresh venv: the first run installs
    .venv/bin/python -m bench.demo_timing --reuse-venv  # DEMO_VENV=this venv (no install)

Clones this repository into a temporary directory, runs `scripts/demo` there (no DATABASE_URL or
CELERY_BROKER_URL), waits for "Review queue:", sends Ctrl-C, then starts it a second time the
same way, and prints both times. The clone (its virtualenv, its data) is removed afterwards. Needs
psutil (in the project's virtualenv). Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_start(clone: Path, env: dict[str, str], timeout: float) -> tuple[float, str]:
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(clone / "scripts" / "demo")],
        cwd=clone,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    elapsed = -1.0
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Review queue: "):
                elapsed = time.monotonic() - started
                break
            if time.monotonic() - started > timeout:
                break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
        lines.extend(rest.splitlines())
    return elapsed, "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.demo_timing",
        description="Time scripts/demo from the command to its printed summary, in a fresh "
        "clone: a first start and a second one.",
    )
    parser.add_argument(
        "--reuse-venv",
        action="store_true",
        help="point the clone at this virtualenv (DEMO_VENV) instead of installing a fresh one",
    )
    parser.add_argument("--port", type=int, default=8590, help="web port for the clone's demo")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait per start")
    parser.add_argument("--verbose", action="store_true", help="print the demo's output")
    args = parser.parse_args(argv)

    drop = {
        "DATABASE_URL",
        "CELERY_BROKER_URL",
        "INTENTLEDGER_URL",
        "INTENTLEDGER_TOKEN",
        "SECRET_KEY",
    }
    env = {k: v for k, v in os.environ.items() if k not in drop and k != "VIRTUAL_ENV"}
    env["DEMO_PORT"] = str(args.port)
    if args.reuse_venv:
        env["DEMO_VENV"] = sys.prefix
    else:
        env.pop("DEMO_VENV", None)
    workdir = Path(tempfile.mkdtemp(prefix="demo-timing-"))
    clone = workdir / "agent-ledger"
    try:
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        results = []
        for label in ("first start", "second start"):
            elapsed, output = one_start(clone, env, args.timeout)
            if args.verbose or elapsed < 0:
                print(output)
            told = re.search(r"^Story told ([\d.]+)s after the command", output, re.MULTILINE)
            results.append((label, elapsed, told.group(1) if told else "?"))
            if elapsed < 0:
                print(f"{label}: no summary within {args.timeout:.0f}s", file=sys.stderr)
                return 1
        venv = "DEMO_VENV (no install)" if args.reuse_venv else "fresh .venv (pip install)"
        print(f"scripts/demo in a fresh clone, {venv}, {os.cpu_count()} CPUs:")
        for label, elapsed, says in results:
            print(
                f"  {label}: summary printed {elapsed:.1f}s after the command (demo says {says}s)"
            )
        return 0
    finally:
        # --reset also removes the clone's cluster where it lives outside it (run as root)
        subprocess.run([str(clone / "scripts" / "demo"), "--reset"], env=env, check=False)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
