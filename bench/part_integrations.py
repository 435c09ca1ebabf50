"""Framework integrations and the MCP proxy in the same invocation as the rest, so RESULTS.md
holds every figure of the speed work beside DBOS and LangGraph.

`python -m bench.integrations` runs in a process of its own on its own database
(`bench_integrations`) and writes INTEGRATIONS.md and .json beside RESULTS.md; this part turns
its ratios into figures with their targets (overhead ÷ a bare SDK step of the same run, ≤ 1.2)
and copies its tables. Needs the framework extras in the project's venv (scripts/test installs
them); a framework that is missing is reported skipped by bench.integrations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.common import ROOT, Figure
from bench.context import Ctx

TARGET = 1.2  # issue 38: an integration's overhead per step, in bare SDK steps
SIZES = {"full": [], "quick": ["--runs", "3", "--tools", "4", "--mcp-calls", "10"]}


def run(ctx: Ctx, out_dir: Path) -> None:
    md = out_dir / "INTEGRATIONS.md"
    env = {**os.environ, "BENCH_DB": "bench_integrations"}
    command = [sys.executable, "-m", "bench.integrations", "--out", str(md), *SIZES[ctx.tier]]
    ctx.log("integrations: " + " ".join(command[1:]))
    subprocess.run(command, env=env, cwd=ROOT, check=True)
    data = json.loads(md.with_suffix(".json").read_text())
    for framework in data["frameworks"]:
        _ratio(
            ctx,
            f"{framework['framework']} integration overhead per step ÷ bare SDK step "
            f"(writes enforced by {framework.get('enforced_by', 'nobody')})",
            framework["overhead_per_sdk_step"],
        )
    mcp = data.get("mcp")
    if mcp:
        _ratio(
            ctx,
            "MCP proxy overhead per read call ÷ bare SDK read step",
            mcp["read_overhead_per_sdk_step"],
        )
        _ratio(
            ctx,
            "MCP proxy overhead per write call ÷ bare SDK write step",
            mcp["write_overhead_per_sdk_step"],
        )
    ctx.results.note("integrations", _tables(md))


def _ratio(ctx: Ctx, name: str, value: Any) -> None:
    figure = ctx.results.add(Figure(name, "×", target=f"<= {TARGET} × p50", target_value=TARGET))
    figure.add_rep([float(value)])


def _tables(md: Path) -> str:
    """INTEGRATIONS.md less its title: how it was measured and its two tables."""
    lines = md.read_text().splitlines()
    body = [line for line in lines if not line.startswith("# ")]
    note = (
        "Measured by `python -m bench.integrations` inside this invocation (its own web server "
        "and database; each ratio is one figure of its own run: the p50 over runs of the "
        f"overhead, divided by a bare SDK step measured beside it). From `{md.name}`:"
    )
    return "\n".join([note, "", *body]).strip()
