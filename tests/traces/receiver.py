"""A real OTLP/HTTP trace receiver for the tests: an HTTP server on a free port that decodes each
request with opentelemetry-proto (ExportTraceServiceRequest), as a collector does, and keeps the
spans it accepted. Not a mock of our exporter: it sees only the bytes on the wire.

A collector has accepted a batch when it answered 200; a request whose client is gone before the
answer (a killed exporter) is not accepted (`hold_request` makes that moment testable)."""

import gzip
import socket
import threading
import zlib
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which) if which else None


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    status_code: int  # 0 unset, 1 ok, 2 error
    attributes: dict[str, Any]
    resource: dict[str, Any]
    events: list[str] = field(default_factory=list)

    def text(self) -> str:
        """Everything the span says, for "nothing private" checks."""
        return repr((self.name, self.attributes, self.resource, self.events))


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0  # requests that reached the receiver
        self.refused = 0
        self.dropped = 0  # requests whose client left before the answer
        self.refuse = False  # answer 503 (a collector that is overloaded or restarting)
        self._hold_number = 0
        self.holding = threading.Event()  # a held request is waiting
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """OTEL_EXPORTER_OTLP_ENDPOINT (the exporter appends /v1/traces)."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def hold_request(self, number: int) -> None:
        """The `number`th request (counting from 1, all requests so far included) waits until
        `release()` before it is answered, or dropped if its client is gone by then."""
        self._hold_number = number
        self.holding.clear()
        self._release.clear()

    def release(self) -> None:
        self._release.set()

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def span_ids(self) -> list[str]:
        return [s.span_id for s in self.spans]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                with receiver._lock:
                    receiver.requests += 1
                    held = receiver.requests == receiver._hold_number
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                if held:
                    receiver.holding.set()
                    receiver._release.wait(60)
                    if self._client_gone():
                        receiver.dropped += 1
                        self.close_connection = True
                        return
                if receiver.refuse:
                    receiver.refused += 1
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                with receiver._lock:
                    receiver.spans.extend(_spans(request))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def _client_gone(self) -> bool:
                sock = self.connection
                sock.setblocking(False)
                try:
                    return sock.recv(1, socket.MSG_PEEK) == b""
                except BlockingIOError:
                    return False
                except OSError:
                    return True
                finally:
                    sock.setblocking(True)

        return Handler


def _spans(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    spans = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        name=span.name,
                        kind=span.kind,
                        status_code=span.status.code,
                        attributes={kv.key: _value(kv.value) for kv in span.attributes},
                        resource=resource,
                        events=[e.name for e in span.events],
                    )
                )
    return spans
