"""A run's trace context comes from the W3C `traceparent` header of POST /api/v1/runs/, whichever
door answers it: the DRF view alone, the URL conf's lean path (hot_view), the WSGI door
(HotPathWSGI, what the web server runs) and the in-process transport. An invalid header is ignored
(W3C), never refused."""

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient, APIRequestFactory

from runs import apis
from runs.hotpath import HotPathWSGI
from runs.inprocess import InProcessTransport
from runs.models import Run
from tests.traces.story import CALLER_SPAN, CALLER_TRACE, TRACEPARENT

CreateDoor = Callable[[str, str | None], str]  # (token, traceparent) → the new run's id


def through_the_drf_view(token: str, traceparent: str | None) -> str:
    headers: dict[str, Any] = {"HTTP_TRACEPARENT": traceparent} if traceparent else {}
    request = APIRequestFactory().post(
        "/api/v1/runs/",
        {"agent": "doors", "input": {}},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        **headers,
    )
    response = apis.RunCreateApi.as_view()(request)
    assert response.status_code == 201, response.data
    return str(response.data["id"])


def through_the_url_conf(token: str, traceparent: str | None) -> str:
    client = APIClient()
    headers: dict[str, Any] = {"HTTP_TRACEPARENT": traceparent} if traceparent else {}
    response = client.post(
        "/api/v1/runs/",
        {"agent": "doors", "input": {}},
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        **headers,
    )
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def through_the_wsgi_door(token: str, traceparent: str | None) -> str:
    body = json.dumps({"agent": "doors", "input": {}}).encode()
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/v1/runs/",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {token}",
        "wsgi.input": io.BytesIO(body),
    }
    if traceparent:
        environ["HTTP_TRACEPARENT"] = traceparent

    def django_app(*_: Any) -> list[bytes]:
        raise AssertionError("declined to Django")

    answered: list[str] = []
    chunks = HotPathWSGI(django_app)(environ, lambda status, _: answered.append(status))
    assert answered == ["201 Created"]
    return str(json.loads(b"".join(chunks))["id"])


def through_the_in_process_transport(token: str, traceparent: str | None) -> str:
    transport = InProcessTransport(token)
    return str(
        transport.create_run(agent="doors", input={}, external_id=None, traceparent=traceparent)[
            "id"
        ]
    )


DOORS = [
    through_the_drf_view,
    through_the_url_conf,
    through_the_wsgi_door,
    through_the_in_process_transport,
]


@pytest.mark.parametrize("door", DOORS, ids=lambda door: door.__name__)
def test_every_door_keeps_the_callers_trace_context_on_the_run(
    transactional_db: Any, worker_token: str, door: CreateDoor
) -> None:
    run = Run.objects.get(pk=door(worker_token, TRACEPARENT))

    assert (run.trace_id, run.trace_parent_span_id) == (CALLER_TRACE, CALLER_SPAN)


@pytest.mark.parametrize("door", DOORS, ids=lambda door: door.__name__)
@pytest.mark.parametrize(
    "traceparent",
    [
        None,
        "garbage",
        f"00-{'0' * 32}-{CALLER_SPAN}-01",  # an all-zero trace id is invalid
        f"ff-{CALLER_TRACE}-{CALLER_SPAN}-01",  # version ff is invalid
        f"00-{CALLER_TRACE.upper()}-{CALLER_SPAN}-01",  # upper-case hex is invalid
    ],
)
def test_without_a_valid_traceparent_the_run_has_a_trace_of_its_own(
    transactional_db: Any, worker_token: str, door: CreateDoor, traceparent: str | None
) -> None:
    run = Run.objects.get(pk=door(worker_token, traceparent))

    assert (run.trace_id, run.trace_parent_span_id) == (None, None)
