"""Template helpers every dashboard page may use (`{% load dashboard %}`): statuses and states in
words, ages and latencies, JSON display, budget bars. The desk's nav badge is review's
(`{% load review %}`)."""

import json
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django import template
from django.utils import timezone

from runs.constants import FINAL_STATUSES

register = template.Library()


# what a step's state means, to finish "This step is …" (the badge shows the state itself)
STATE_SENTENCES = {
    "intent": "under way: its intent is journalled and no outcome yet",
    "done": "done",
    "error": "done, with an error",
    "interrupted": "interrupted: its worker runs it again",
    "unknown": "unknown: nobody knows whether it happened",
    "abandoned": "abandoned",
    "awaiting_approval": "waiting for approval",
    "denied": "denied",
}


@register.filter
def human(value: Any) -> str:
    """A status or state for a person: `needs_review` → `needs review`."""
    return str(value or "").replace("_", " ")


@register.filter
def state_sentence(value: Any) -> str:
    return STATE_SENTENCES.get(str(value), human(value))


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


@register.filter
def json_is_long(value: Any) -> bool:
    text = json.dumps(value, default=str)
    return len(text) > 160 or text.count(",") > 6


@register.filter
def short_json(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= 120 else text[:117] + "…"


@register.filter
def age(value: datetime | None) -> str:
    if value is None:
        return ""
    seconds = int((timezone.now() - value).total_seconds())
    return duration_text(max(seconds, 0))


def duration_text(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    if seconds < 86400:
        return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d {seconds % 86400 // 3600}h"


@register.filter
def latency(step: Any) -> str:
    if step.outcome_at is None or step.intent_at is None:
        return ""
    delta: timedelta = step.outcome_at - step.intent_at
    ms = int(delta.total_seconds() * 1000)
    return f"{ms} ms" if ms < 10_000 else duration_text(ms // 1000)


@register.inclusion_tag("dashboard/_bar.html", takes_context=True)
def budget_bar(context: Any, label: str, used: Any, limit: Any) -> dict[str, Any]:
    """One budget bar; warn over 80 %, full at 100 %, while the run (the context's `run`) can
    still spend. A finished run's bars are neutral: a healthy run that completed at 20 of 20
    steps is not an alarm (red means over or near a limit while it matters)."""
    if limit in (None, "", 0):
        return {"label": label, "used": used, "limit": "∞", "pct": 0, "level": "none"}
    pct = float(Decimal(str(used)) / Decimal(str(limit)) * 100)
    level = "over" if pct >= 100 else "warn" if pct >= 80 else "ok"
    run = context.get("run")
    if getattr(run, "status", None) in FINAL_STATUSES:
        level = "done"
    return {"label": label, "used": used, "limit": limit, "pct": min(pct, 100), "level": level}


@register.simple_tag(takes_context=True)
def team_badge(context: Any, row: Any) -> str:
    """A row's team as a badge, only where the page shows more than one team's rows
    (dashboard.context_processors.teams); nothing otherwise."""
    from django.utils.html import format_html

    if not context.get("show_teams"):
        return ""
    slug = context.get("team_slugs", {}).get(getattr(row, "team_id", None), "")
    return format_html('<span class="badge team" data-team="{}">{}</span>', slug, slug)
