"""`{% load audit_alerts %}{% chain_alerts %}`: the open chain alerts, for any dashboard page."""

from typing import Any

from django import template

from audit.models import ChainAlert

register = template.Library()


@register.inclusion_tag("audit/_alerts.html")
def chain_alerts() -> dict[str, Any]:
    return {"alerts": list(ChainAlert.objects.filter(acknowledged_at__isnull=True)[:5])}


@register.inclusion_tag("audit/_incidents.html")
def open_incidents() -> dict[str, Any]:
    """Open incidents and the hours to their reporting deadline (the overview shows them)."""
    from audit.incidents import incidents_open_due

    return {"incidents": incidents_open_due()}
