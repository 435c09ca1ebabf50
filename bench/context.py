"""What every part gets: the tier's sizes, the results, the worker token, the bench venv."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from typing import Any

from bench.common import BENCH_VENV_PY, ROOT
from bench.results import Results

# sizes per tier: smoke (the test suite), quick (< 3 min), full (< 15 min)
TIERS: dict[str, dict[str, Any]] = {
    "smoke": {
        "reps": 3,
        "step_runs": 2,
        "baseline_runs": 2,
        "throughput_seconds": 1.0,
        "concurrency": [1],
        "recovery_reps": 3,
        "restart_reps": 2,
        "gateway_calls": 20,
        "scale_tiers": [1_000],
        "dataset_runs": 1_000,
        "dataset_unknown": 50,
        "page_samples": 5,
        "export_runs": [500],
        "export_timeout": 60.0,
        "trace_export_events": 2_000,
    },
    "quick": {
        "reps": 3,
        "step_runs": 2,
        "baseline_runs": 3,
        "throughput_seconds": 2.0,
        "concurrency": [1, 8, 16, 32],
        "recovery_reps": 10,
        "restart_reps": 5,
        "gateway_calls": 60,
        "scale_tiers": [1_000, 10_000],
        "dataset_runs": 10_000,
        "dataset_unknown": 500,
        "page_samples": 10,
        "export_runs": [1_000, 10_000],
        "export_timeout": 120.0,
        "trace_export_events": 20_000,
    },
    "full": {
        "reps": 3,
        "step_runs": 5,
        "baseline_runs": 6,
        "throughput_seconds": 5.0,
        "concurrency": [1, 8, 16, 32],
        "recovery_reps": 20,
        "restart_reps": 4,
        "gateway_calls": 200,
        "scale_tiers": [1_000, 10_000, 100_000, 1_000_000],
        "dataset_runs": 100_000,
        "dataset_unknown": 5_000,
        "page_samples": 20,
        "export_runs": [10_000, 100_000],
        "export_timeout": 90.0,
        # the journal's last events, not all of it: after the scaling part it holds millions
        "trace_export_events": 200_000,
    },
}


@dataclass
class Ctx:
    tier: str
    results: Results
    token: str = ""

    @property
    def size(self) -> dict[str, Any]:
        return TIERS[self.tier]

    def log(self, message: str) -> None:
        print(f"[bench] {message}", flush=True)

    def baseline(self, which: str, *args: str, timeout: float = 600) -> dict[str, Any]:
        """Run `python -m bench.baselines` in bench/.venv and return its JSON."""
        proc = subprocess.run(
            [str(BENCH_VENV_PY), "-m", "bench.baselines", which, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0 or not proc.stdout.strip():
            raise RuntimeError(f"baseline {which} failed: {proc.stderr[-2000:]}")
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return result
