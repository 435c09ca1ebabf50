"""`{% load audit_alerts %}{% chain_alerts %}`: the open chain alerts, for any dashboard page."""

from typing import Any

from django import template

from audit.models import ChainAlert

register = template.Library()


@register.inclusion_tag("audit/_alerts.html")
def chain_alerts() -> dict[str, Any]:
    return {"alerts": list(ChainAlert.objects.filter(acknowledged_at__isnull=True)[:5])}
