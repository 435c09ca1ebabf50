"""Statistics, timing and the shape of a figure: every part reports through `Figure`.

Figures keep their raw samples per repetition, so the report can show the median of the
repetition medians, the p99 over every sample, and the spread between repetitions.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
WORK = BENCH / ".work"
BENCH_VENV_PY = BENCH / ".venv" / "bin" / "python"
PG_HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("BENCH_PG_PORT", "5432"))
PG_USER = os.environ.get("BENCH_PG_USER", "root")  # the bench's admin: makes databases, loads data
# the role the served ledger connects as (its server, workers and manage.py): an ordinary role
# that owns the bench database, neither a superuser nor BYPASSRLS, as on a managed database, so
# the forced row-level security binds it as it binds a deployment (tests/database.py makes
# `ledger_app` for the suite the same way)
APP_ROLE = os.environ.get("BENCH_APP_ROLE", "ledger_bench")
BENCH_DB = os.environ.get("BENCH_DB", "bench_ledger")
PORT_RANGE = (8600, 8699)


def pg_url(db: str = BENCH_DB) -> str:
    """The served ledger's URL: as the application role."""
    return f"postgres://{APP_ROLE}@{PG_HOST}:{PG_PORT}/{db}"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): a value that was actually observed."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Figure:
    """One measured quantity: samples grouped by repetition, plus how to compare it."""

    name: str
    unit: str  # "ms", "s", "steps/s", "MB/s", "MB", "count"
    reps: list[list[float]] = field(default_factory=list)
    target: str = ""  # e.g. "<= 4 ms p50"
    target_value: float | None = None
    target_stat: str = "p50"  # which statistic the target is about
    higher_is_better: bool = False
    baseline: str = ""  # name of the figure this one is divided by
    note: str = ""

    def add_rep(self, samples: list[float]) -> None:
        if samples:
            self.reps.append(list(samples))

    @property
    def all(self) -> list[float]:
        return [v for rep in self.reps for v in rep]

    @property
    def rep_medians(self) -> list[float]:
        return [statistics.median(rep) for rep in self.reps]

    @property
    def p50(self) -> float:
        medians = self.rep_medians
        return statistics.median(medians) if medians else math.nan

    @property
    def p99(self) -> float:
        return percentile(self.all, 99)

    @property
    def spread(self) -> float:
        """(max - min) of the repetition medians, relative to their median."""
        medians = self.rep_medians
        if len(medians) < 2 or not self.p50:
            return 0.0
        return (max(medians) - min(medians)) / self.p50

    def meets_target(self) -> bool | None:
        if self.target_value is None:
            return None
        value = self.p99 if self.target_stat == "p99" else self.p50
        if self.higher_is_better:
            return value >= self.target_value
        return value <= self.target_value

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "p50": self.p50,
            "p99": self.p99,
            "spread": self.spread,
            "repetitions": len(self.reps),
            "samples": len(self.all),
            "rep_medians": self.rep_medians,
            "target": self.target,
            "target_value": self.target_value,
            "target_stat": self.target_stat,
            "higher_is_better": self.higher_is_better,
            "meets_target": self.meets_target(),
            "baseline": self.baseline,
            "note": self.note,
        }


def ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def timed_ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return ms_since(start), value


def payload_of(size: int) -> dict[str, Any]:
    """A JSON object whose canonical encoding is about `size` bytes."""
    filler = max(0, size - 30)
    return {"text": ("lorem ipsum dolor sit amet " * (filler // 27 + 1))[:filler]}


def _cmd(args: list[str]) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def machine_description() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gb = f"{int(line.split()[1]) / 1024 / 1024:.1f}"
    except OSError:
        pass
    load = os.getloadavg()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": [round(x, 2) for x in load],
    }


def git_revision() -> str:
    return _cmd(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]) or "?"
