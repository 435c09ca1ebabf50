"""The desk's template tag: the nav's badge of waiting review items (`{% load review %}`)."""

from django import template
from django.urls import reverse
from django.utils.html import format_html

from review.selectors import waiting_count

register = template.Library()


@register.simple_tag
def waiting_badge() -> str:
    """The nav's count of waiting review items; refreshes itself every 15 s and after actions."""
    count = waiting_count()
    return format_html(
        '<span id="nav-waiting" class="count{}" hx-get="{}" '
        'hx-trigger="every 15s, queue-changed from:body" hx-swap="outerHTML" '
        'title="Items waiting for review">{}</span>',
        " hot" if count else "",
        reverse("review:queue_count"),
        count,
    )
