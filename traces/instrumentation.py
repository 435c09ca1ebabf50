"""The server's own spans (Django requests, Celery tasks, psycopg statements), optional: with
TRACES_INSTRUMENT_SERVER=1, an OTLP endpoint set and the server's `otel` extra installed
(opentelemetry-instrumentation-*),
each process sends them through the SDK's batch processor. The journal's spans do not depend on
this: they come from the exporter (traces.exporter), which reads committed rows."""

import os

_done = False


def instrument_server() -> None:
    global _done
    if _done or os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return
    if os.environ.get("TRACES_INSTRUMENT_SERVER", "0") != "1":
        return
    from traces.exporter import endpoint_configured

    if not endpoint_configured():
        return
    try:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
        from opentelemetry.instrumentation.django import DjangoInstrumentor
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    except ImportError:
        return  # the extra is not installed: the journal's traces only
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from traces.exporter import ledger_resource, otlp_exporter

    provider = TracerProvider(resource=ledger_resource())
    provider.add_span_processor(BatchSpanProcessor(otlp_exporter()))
    trace.set_tracer_provider(provider)
    DjangoInstrumentor().instrument()
    CeleryInstrumentor().instrument()
    PsycopgInstrumentor().instrument()
    _done = True
