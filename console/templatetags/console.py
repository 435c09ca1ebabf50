"""The console's pieces on the transcript: `{% run_timeline run %}` and `{% run_actions run %}`."""

from typing import Any

from django import template

from console import selectors
from console.forms import CancelForm, ForkForm
from runs.constants import FINAL_STATUSES
from runs.models import Run

register = template.Library()


@register.inclusion_tag("console/_timeline.html")
def run_timeline(run: Run) -> dict[str, Any]:
    return selectors.run_timeline_context(run)


@register.inclusion_tag("console/_actions.html", takes_context=True)
def run_actions(context: template.Context, run: Run) -> dict[str, Any]:
    request = context.get("request")
    user = getattr(request, "user", None)
    can_act = bool(user is not None and user.has_perm("review.run_actions", run))
    asked = getattr(request, "GET", {}).get("fork", "")
    plan = None
    if can_act and asked.isdigit() and int(asked) <= run.step_count:
        plan = selectors.fork_plan(run, int(asked))
        plan["note"] = request.GET.get("fork_note", "")  # type: ignore[union-attr]
    return {
        "run": run,
        "csrf_token": context.get("csrf_token"),
        "can_act": can_act,
        "can_cancel": can_act and run.status not in FINAL_STATUSES,
        "cancel_form": CancelForm(),
        "fork_form": ForkForm(initial={"index": run.step_count}),
        "lineage": selectors.run_lineage(run),
        "fork_plan": plan,
    }
