"""The agent's current span, sent as `traceparent` when a run is created, so the ledger's trace
of the run (its journal exported by the server) sits under the agent's own span.

Only with the `intentledger[otel]` extra (opentelemetry-api), imported at the first run's
creation, never by `import intentledger`; without it, or with no span active, nothing is sent.
The process's configured propagator writes the header (W3C trace context by default).
"""

from __future__ import annotations

from typing import Any

_inject: Any = None  # opentelemetry.propagate.inject once looked up; False: not installed


def current_traceparent() -> str | None:
    """The W3C `traceparent` of the current OpenTelemetry context, or None."""
    global _inject
    if _inject is None:
        try:
            from opentelemetry.propagate import inject
        except ImportError:
            _inject = False
        else:
            _inject = inject
    if _inject is False:
        return None
    carrier: dict[str, str] = {}
    _inject(carrier)
    return carrier.get("traceparent")
