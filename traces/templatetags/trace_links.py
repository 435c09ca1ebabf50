"""The run page's link to the run's trace in the company's trace viewer (OTEL_TRACE_URL)."""

from django import template
from django.conf import settings
from django.utils.html import format_html

from runs.models import Run
from traces.context import derived_trace_id

register = template.Library()


def run_trace_id(run: Run) -> str:
    """The run's trace: its creator's, else the one derived from its id (traces.context)."""
    return run.trace_id or f"{derived_trace_id(run.pk):032x}"


@register.simple_tag
def trace_link(run: Run) -> str:
    """`<dt>Trace</dt><dd><a …>`, with OTEL_TRACE_URL ("…{trace_id}…") set; else nothing."""
    url_template = settings.OTEL_TRACE_URL
    if not url_template:
        return ""
    trace_id = run_trace_id(run)
    return format_html(
        '<dt>Trace</dt><dd><a href="{}" class="mono" rel="noopener" target="_blank">{}</a></dd>',
        url_template.replace("{trace_id}", trace_id),
        trace_id,
    )
