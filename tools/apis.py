"""The tool gateway API: one view per operation, thin callers of tools.registry / tools.idempotency."""

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs.api_errors import ApplicationError
from runs.apis import ErrorSerializer
from runs.authentication import actor_of
from tools.idempotency import REPLAYED_HEADER, idempotency_key_state, key_is_well_formed
from tools.mcp_tools import mcp_tools_report
from tools.registry import key_check_visible, tool_invoke, tools_list


def _error(description: str) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=description)


class ToolListApi(APIView):
    @extend_schema_serializer(component_name="ToolListOutput")
    class OutputSerializer(serializers.Serializer):
        @extend_schema_serializer(component_name="ToolDescription")
        class ToolSerializer(serializers.Serializer):
            name = serializers.CharField()
            effect = serializers.ChoiceField(choices=["read", "write"])
            description = serializers.CharField()
            arguments = serializers.DictField(child=serializers.DictField())

        tools = ToolSerializer(many=True)

    @extend_schema(
        operation_id="tools_list",
        summary="The registered tools and their effect",
        responses={200: OutputSerializer, 401: _error("not_authenticated")},
    )
    def get(self, request: Request) -> Response:
        return Response({"tools": [t.describe() for t in tools_list()]})


class ToolInvokeApi(APIView):
    @extend_schema_serializer(component_name="ToolInvokeInput")
    class InputSerializer(serializers.Serializer):
        arguments = serializers.JSONField(default=dict, help_text="The tool's arguments (object).")

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            unknown = sorted(set(self.initial_data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({key: ["Unknown field."] for key in unknown})
            return attrs

    @extend_schema_serializer(component_name="ToolInvokeOutput")
    class OutputSerializer(serializers.Serializer):
        result = serializers.JSONField()

    @extend_schema(
        operation_id="tools_invoke",
        summary="Run a tool; write tools at most once per Idempotency-Key",
        request=InputSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="Required for write tools: the journal step's idempotency_key (a "
                "free-form key only with a `tools:direct` token).",
            ),
            OpenApiParameter(
                "Ledger-Epoch",
                OpenApiTypes.INT,
                OpenApiParameter.HEADER,
                description="Optional: the lease's epoch; 409 stale_epoch when the run moved on.",
            ),
            OpenApiParameter(
                REPLAYED_HEADER,
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                response=[200, 404, 409, 422, 502],
                description="`true` when the response is the stored one of an earlier request.",
            ),
        ],
        responses={
            200: OutputSerializer,
            400: _error("validation_error | idempotency_key_required"),
            401: _error("not_authenticated"),
            404: _error(
                "tool_not_found | not_found (the key's run, or its free-form key, is not the "
                "token's) | ticket_not_found (stored)"
            ),
            409: _error(
                "intent_not_journalled | run_finished (an open step of a finished run) | "
                "stale_epoch | idempotency_in_progress | ticket_already_closed (stored)"
            ),
            413: _error("payload_too_large"),
            422: _error("idempotency_key_reused"),
            502: _error("tool_failed: the tool raised; stored and replayed for the key"),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        if not isinstance(request.data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Must be a JSON object."]})
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            outcome = tool_invoke(
                name=name,
                arguments=serializer.validated_data["arguments"],
                idempotency_key=request.headers.get("Idempotency-Key"),
                actor=actor_of(request),
                principal=request.user,
                ledger_epoch=_ledger_epoch(request),
            )
        except ApplicationError as exc:
            if exc.code != "idempotency_in_progress":
                raise
            response = Response(exc.body(), status=exc.status_code)
            response["Retry-After"] = "1"
            return response
        return Response(
            outcome.body, status=outcome.status_code, headers=outcome.response_headers()
        )


class McpToolsReportApi(APIView):
    @extend_schema_serializer(component_name="McpToolsReportInput")
    class InputSerializer(serializers.Serializer):
        @extend_schema_serializer(component_name="McpToolReported")
        class ToolSerializer(serializers.Serializer):
            name = serializers.CharField(max_length=200)
            read_only_hint = serializers.BooleanField(default=False)

        server = serializers.CharField(max_length=200, help_text="The upstream server's name.")
        tools = ToolSerializer(many=True, max_length=1000)  # type: ignore[call-arg]

    @extend_schema_serializer(component_name="McpToolsReportOutput")
    class OutputSerializer(serializers.Serializer):
        @extend_schema_serializer(component_name="McpToolMarked")
        class ToolSerializer(serializers.Serializer):
            name = serializers.CharField()
            read_only_hint = serializers.BooleanField()
            mark = serializers.CharField(
                help_text="An admin's word (dashboard): `read` or `write`; empty: the hint stands."
            )
            marked_by = serializers.CharField()
            marked_at = serializers.DateTimeField(allow_null=True)

        tools = ToolSerializer(many=True)

    @extend_schema(
        operation_id="mcp_tools_report",
        summary="An MCP proxy reports its upstream's tools and gets the admins' marks back",
        request=InputSerializer,
        responses={
            200: OutputSerializer,
            400: _error("validation_error"),
            401: _error("not_authenticated"),
        },
    )
    def post(self, request: Request) -> Response:
        serializer = self.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        rows = mcp_tools_report(**serializer.validated_data)
        return Response(self.OutputSerializer({"tools": rows}).data)


def _ledger_epoch(request: Request) -> int | None:
    raw = request.headers.get("Ledger-Epoch")
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 19:
        raise ApplicationError(
            "validation_error",
            "The Ledger-Epoch header is not valid.",
            status_code=400,
            details={"Ledger-Epoch": ["The run's epoch from the lease: a non-negative integer."]},
        )
    return int(raw)


class IdempotencyKeyDetailApi(APIView):
    @extend_schema_serializer(component_name="IdempotencyKeyState")
    class OutputSerializer(serializers.Serializer):
        key = serializers.CharField()
        state = serializers.ChoiceField(choices=["absent", "in_progress", "completed", "failed"])
        tool = serializers.CharField(required=False)
        request_hash = serializers.CharField(required=False)
        stale = serializers.BooleanField(required=False)
        locked_at = serializers.DateTimeField(required=False)
        created_at = serializers.DateTimeField(required=False)
        completed_at = serializers.DateTimeField(required=False, allow_null=True)
        status_code = serializers.IntegerField(required=False)
        response = serializers.JSONField(required=False)

    @extend_schema(
        operation_id="idempotency_retrieve",
        summary="What the tool side knows about a key",
        responses={
            200: OutputSerializer,
            400: _error("validation_error: not a well-formed key"),
            401: _error("not_authenticated"),
            404: _error("not_found: the key belongs to a run (or token) this token may not see"),
        },
    )
    def get(self, request: Request, key: str) -> Response:
        if not key_is_well_formed(key):
            raise ApplicationError(
                "validation_error",
                "Not a well-formed idempotency key.",
                status_code=400,
                details={"key": ["1 to 400 visible ASCII characters, no spaces."]},
            )
        key_check_visible(principal=request.user, key=key)
        return Response(idempotency_key_state(key=key))


__all__ = ["IdempotencyKeyDetailApi", "ToolInvokeApi", "ToolListApi"]
