"""`{% load audit_alerts %}{% chain_alerts %}`: the open chain alerts, for any dashboard page."""

from typing import Any

from django import template

from audit.checkpoints import alerts_seen
from audit.models import ChainAlert

register = template.Library()


@register.inclusion_tag("audit/_alerts.html")
def chain_alerts() -> dict[str, Any]:
    """The open alerts the viewer's scope sees (alerts_seen: none of another team's runs)."""
    return {"alerts": alerts_seen(ChainAlert.objects.filter(acknowledged_at__isnull=True)[:20])[:5]}


@register.inclusion_tag("audit/_incidents.html")
def open_incidents() -> dict[str, Any]:
    """Open incidents and the hours to their reporting deadline (the overview shows them)."""
    from audit.incidents import incidents_open_due

    return {"incidents": incidents_open_due()}
