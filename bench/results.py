"""What a bench invocation collects, and how it becomes bench/RESULTS.md and results.json."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import Figure


@dataclass
class Results:
    quick: bool
    tier: str
    figures: dict[str, Figure] = field(default_factory=dict)
    sections: dict[str, list[str]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    parts_run: list[str] = field(default_factory=list)
    parts_skipped: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    current_part: str = "baseline"
    part_figures: dict[str, list[str]] = field(default_factory=dict)

    def add(self, figure: Figure) -> Figure:
        self.figures[figure.name] = figure
        names = self.part_figures.setdefault(self.current_part, [])
        if figure.name not in names:
            names.append(figure.name)
        return figure

    def note(self, part: str, markdown: str) -> None:
        self.sections.setdefault(part, []).append(markdown)

    def ratio(self, figure: Figure) -> float | None:
        base = self.figures.get(figure.baseline)
        if base is None or not base.p50 or math.isnan(base.p50) or math.isnan(figure.p50):
            return None
        return figure.p50 / base.p50

    def to_json(self) -> dict[str, Any]:
        return {
            "quick": self.quick,
            "tier": self.tier,
            "parts_run": self.parts_run,
            "parts_skipped": self.parts_skipped,
            "part_figures": self.part_figures,
            "versions": self.versions,
            "figures": {
                name: {**fig.to_json(), "ratio_to_baseline": self.ratio(fig)}
                for name, fig in self.figures.items()
            },
            "extra": self.extra,
            "sections": self.sections,
            "samples": {name: fig.reps for name, fig in self.figures.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Results:
        """Rebuild from results.json (samples and notes included), e.g. to re-render the report."""
        results = cls(quick=data["quick"], tier=data["tier"])
        results.parts_run = data.get("parts_run", [])
        results.parts_skipped = data.get("parts_skipped", {})
        results.part_figures = data.get("part_figures", {})
        results.versions = data.get("versions", {})
        results.extra = data.get("extra", {})
        results.sections = data.get("sections", {})
        samples = data.get("samples", {})
        for name, fig in data.get("figures", {}).items():
            results.figures[name] = Figure(
                name=name,
                unit=fig["unit"],
                reps=samples.get(name, []),
                target=fig.get("target", ""),
                target_value=fig.get("target_value"),
                higher_is_better=bool(fig.get("higher_is_better", fig["unit"].endswith("/s"))),
                target_stat=fig.get("target_stat", "p50"),
                baseline=fig.get("baseline", ""),
                note=fig.get("note", ""),
            )
        return results

    def write_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n")


def fmt(value: float | None, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if unit in ("steps/s", "MB/s", "runs/s", "calls/s", "commits/s"):
        return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"
    if unit == "count":
        return f"{value:.0f}"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 0.1:
        return f"{value:.2f}"
    return f"{value:.4f}"


def figure_table(results: Results, names: list[str]) -> str:
    rows = [
        "| figure | unit | p50 | p99 | spread | reps × samples | baseline | ratio | target | met |",
        "|---|---|---:|---:|---:|---|---|---:|---|---|",
    ]
    for name in names:
        fig = results.figures.get(name)
        if fig is None:
            continue
        ratio = results.ratio(fig)
        met = fig.meets_target()
        rows.append(
            "| {name} | {unit} | {p50} | {p99} | {spread} | {reps} × {n} | {base} | {ratio} | {target} | {met} |".format(
                name=fig.name,
                unit=fig.unit,
                p50=fmt(fig.p50, fig.unit),
                p99=fmt(fig.p99, fig.unit) if len(fig.all) > len(fig.reps) else "–",
                spread=f"{fig.spread * 100:.0f}%" if len(fig.reps) > 1 else "–",
                reps=len(fig.reps),
                n=len(fig.all) // max(1, len(fig.reps)),
                base=fig.baseline or "–",
                ratio="–" if ratio is None else f"{ratio:.2f}×",
                target=fig.target or "–",
                met={True: "yes", False: "**no**", None: "–"}[met],
            )
        )
    return "\n".join(rows)
