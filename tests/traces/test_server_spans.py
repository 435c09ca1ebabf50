"""The server's own spans, optional (TRACES_INSTRUMENT_SERVER=1 with the server's `otel` extra):
a request Django answers is a span in its caller's trace, with its SQL statements under it."""

import time
from typing import Any

import httpx
import pytest

from tests.processes import start_web_server, stop_process
from tests.traces.receiver import OtlpReceiver
from tests.traces.story import CALLER_SPAN, CALLER_TRACE, TRACEPARENT

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.pg_connections(2)
def test_a_request_and_its_sql_are_spans_in_the_callers_trace(
    receiver: OtlpReceiver, worker_token: str, transactional_db: Any
) -> None:
    url, server = start_web_server(
        env={"TRACES_INSTRUMENT_SERVER": "1", "OTEL_BSP_SCHEDULE_DELAY": "100"},
        workers=1,
        threads=2,
        log_name="web-otel",
    )
    try:
        answer = httpx.get(
            f"{url}/api/v1/runs/",
            headers={"Authorization": f"Bearer {worker_token}", "traceparent": TRACEPARENT},
        )
        assert answer.status_code == 200, answer.text
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not [
            s for s in receiver.spans if s.trace_id == CALLER_TRACE and s.kind == 2
        ]:
            time.sleep(0.1)
    finally:
        stop_process(server)

    (request,) = [s for s in receiver.spans if s.trace_id == CALLER_TRACE and s.kind == 2]
    assert request.parent_span_id == CALLER_SPAN
    assert request.resource["service.name"] == "agent-ledger"
    sql = [s for s in receiver.spans if s.parent_span_id == request.span_id]
    assert sql, [s.name for s in receiver.spans]
