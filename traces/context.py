"""W3C trace context and the ledger's deterministic ids: Django-free and OpenTelemetry-free.

A run's trace is the one its creator's `traceparent` named, else one derived from the run's id;
every span's id is derived from what the span stands for (the run, a step, an event of the
chain), so an export that is repeated names the same spans and the ids never need storing.
"""

import hashlib
import re
from dataclasses import dataclass

# version 00: version-traceid-parentid-flags, lower-case hex (W3C Trace Context, section 3.2)
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


@dataclass(frozen=True)
class TraceParent:
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits: the caller's span, the run span's parent


def traceparent_parsed(header: str | None) -> TraceParent | None:
    """The caller's span from a `traceparent` header; None for a missing or invalid one (the
    W3C rule: an invalid header is ignored, the request is not refused)."""
    if not header:
        return None
    match = _TRACEPARENT.match(header.strip())
    if match is None:
        return None
    version, trace_id, span_id, _flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return None
    return TraceParent(trace_id=trace_id, span_id=span_id)


def _digest(*parts: object) -> bytes:
    return hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()


def derived_trace_id(run_id: object) -> int:
    """The trace of a run whose creator sent no trace context."""
    return int.from_bytes(_digest("agent-ledger", "trace", run_id)[:16]) or 1


def span_id_of(run_id: object, *what: object) -> int:
    """The span standing for `what` of a run: ("run",), ("step", index), ("event", seq)."""
    return int.from_bytes(_digest("agent-ledger", "span", run_id, *what)[:8]) or 1
