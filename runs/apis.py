"""The worker API: one view per operation, thin callers of runs.services."""

from typing import Any

from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_serializer,
    inline_serializer,
)
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from runs import contract, hotcalls, selectors
from runs.access import run_check_visible
from runs.api_errors import error_response
from runs.constants import (
    BUDGET_LIMITS,
    RunRunner,
    RunStatus,
)
from runs.models import Run
from runs.representations import event_json, run_json, step_json
from runs.services.approvals import step_wait_decided

MAX_PAGE = 200
MAX_WAIT_SECONDS = 60


# --- shapes, for validation and for the OpenAPI schema --------------------------------------


class ErrorSerializer(serializers.Serializer):
    error = inline_serializer(
        "ErrorBody",
        fields={
            "code": serializers.CharField(),
            "message": serializers.CharField(),
            "details": serializers.DictField(),
        },
    )


# the hot calls' request shapes are declared in runs.contract; their serializers are built there
UsageSerializer = contract.USAGE.serializer()
EpochSerializer = contract.HEARTBEAT.serializer()


class LeaseRefSerializer(serializers.Serializer):
    worker = serializers.CharField()
    expires_at = serializers.DateTimeField()


class BudgetSerializer(serializers.Serializer):
    # by limit name (runs.constants.BUDGET_LIMITS): money as a string, the rest whole numbers
    limits = inline_serializer(
        "BudgetLimits",
        fields={
            name: serializers.CharField(allow_null=True)
            if name == "cost_usd"
            else serializers.IntegerField()
            for name in BUDGET_LIMITS
        },
    )
    used = inline_serializer(
        "BudgetUsed",
        fields={
            name: serializers.CharField() if name == "cost_usd" else serializers.IntegerField()
            for name in BUDGET_LIMITS
            if name != "wall_seconds"  # the deadline says how much wall time is left
        },
    )
    deadline = serializers.DateTimeField()


class ForkOriginSerializer(serializers.Serializer):
    run_id = serializers.UUIDField()
    index = serializers.IntegerField(help_text="how many of the original's steps the fork copied")


class RunOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    agent = serializers.CharField()
    external_id = serializers.CharField(allow_null=True)
    status = serializers.CharField()
    status_reason = serializers.CharField()
    runner = serializers.ChoiceField(
        choices=RunRunner.choices,
        help_text="celery: run by the agents' Celery task (re-dispatched after a lost lease); "
        "external: resumed only by its own process.",
    )
    input = serializers.JSONField()
    output = serializers.JSONField(allow_null=True)
    error = serializers.JSONField(allow_null=True)
    epoch = serializers.IntegerField()
    lease = LeaseRefSerializer(allow_null=True)
    budget = BudgetSerializer()
    step_count = serializers.IntegerField()
    forked_from = ForkOriginSerializer(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class ResolutionSerializer(serializers.Serializer):
    action = serializers.CharField()
    by = serializers.CharField()
    note = serializers.CharField()
    at = serializers.DateTimeField()


class StepOutputSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    kind = serializers.CharField()
    name = serializers.CharField()
    effect = serializers.CharField()
    enforced_by = serializers.CharField(allow_null=True)
    arguments = serializers.JSONField()
    arguments_hash = serializers.CharField()
    idempotency_key = serializers.CharField()
    state = serializers.CharField()
    result = serializers.JSONField(allow_null=True)
    usage = UsageSerializer()
    epoch = serializers.IntegerField()
    intent_at = serializers.DateTimeField()
    outcome_at = serializers.DateTimeField(allow_null=True)
    resolution = ResolutionSerializer(allow_null=True)


class EventOutputSerializer(serializers.Serializer):
    seq = serializers.IntegerField()
    type = serializers.CharField()
    payload = serializers.JSONField()
    actor = serializers.CharField()
    at = serializers.DateTimeField()
    prev_hash = serializers.CharField()
    hash = serializers.CharField()


def _errors(
    code: str, *, http: int = 409, also: tuple[int, ...] = ()
) -> dict[int, OpenApiResponse]:
    responses = {http: OpenApiResponse(ErrorSerializer, description=code)}
    for extra in also:
        responses[extra] = OpenApiResponse(ErrorSerializer)
    return responses


COMMON = (400, 401, 404, 413)


# --- operations -----------------------------------------------------------------------------


def hot_call_api(
    name: str, *, operation_id: str, responses: dict[int, Any], base: type[APIView] = APIView
) -> type[APIView]:
    """The DRF view of hot call `name` (runs.hotcalls), which the OpenAPI schema describes; the
    lean path (runs.hotpath) answers the same call first, and leaves this view what it declines."""
    request_serializer = hotcalls.CALLS[name].shape.serializer()

    class HotCallApi(base):  # type: ignore[valid-type,misc]
        @extend_schema(operation_id=operation_id, request=request_serializer, responses=responses)
        def post(
            self, request: Request, run_id: str | None = None, index: int | None = None
        ) -> Response:
            code, body = hotcalls.answer(
                name,
                principal=request.user,
                run_id=run_id,
                index=index,
                data=request.data,
                validate=contract.Shape.validated,
                traceparent=request.headers.get("traceparent"),
            )
            return Response(body, status=code)

    return HotCallApi


def _made_or_found(serializer: type[serializers.Serializer]) -> dict[int, Any]:
    """201 made by this call, 200 found as an earlier call made it: the same body."""
    return {201: serializer, 200: serializer}


# GET /api/v1/runs/; the URL's POST is RunCreateApi's, below (no docstring: it would describe
# both operations in the schema)
class RunListApi(APIView):
    class ListQuerySerializer(serializers.Serializer):
        agent = serializers.CharField(max_length=100, required=False)
        external_id = serializers.CharField(max_length=200, required=False)
        status = serializers.ChoiceField(choices=RunStatus.choices, required=False)
        created_after = serializers.DateTimeField(required=False)
        cursor = serializers.CharField(
            max_length=500, required=False, help_text="next_cursor of the previous page."
        )
        limit = serializers.IntegerField(min_value=1, max_value=MAX_PAGE, default=50)

    @extend_schema_serializer(component_name="RunListOutput")
    class ListOutputSerializer(serializers.Serializer):
        runs = RunOutputSerializer(many=True)
        next_cursor = serializers.CharField(allow_null=True)

    @extend_schema(
        operation_id="runs_list",
        summary="Find runs (newest first, cursor pagination; only runs the token may see)",
        parameters=[ListQuerySerializer],
        responses={
            200: ListOutputSerializer,
            **_errors("validation_error: a bad filter, limit or a tampered cursor", http=400),
            **_errors("not_authenticated", http=401),
        },
    )
    def get(self, request: Request) -> Response:
        query = self.ListQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        page = selectors.runs_find(principal=request.user, **query.validated_data)
        return Response(
            {"runs": [run_json(run) for run in page.runs], "next_cursor": page.next_cursor}
        )


RunCreateApi = hot_call_api(
    "create",
    base=RunListApi,
    operation_id="runs_create",
    responses={
        **_made_or_found(RunOutputSerializer),
        **_errors("validation_error", http=400, also=(401, 413)),
        **_errors("agent_not_allowed: the token is limited to other agents", http=403),
        **_errors("no_budget_policy: neither the agent's nor the default policy exists"),
    },
)


class RunDetailApi(APIView):
    class QuerySerializer(serializers.Serializer):
        wait = serializers.RegexField(
            r"^[0-9]{1,2}$",
            required=False,
            help_text="Seconds (0-60) to wait for the run to be final, need review or be over "
            "budget; the run is answered then, or when the time is up, either way.",
            error_messages={"invalid": f"An integer from 0 to {MAX_WAIT_SECONDS}."},
        )

        def validate_wait(self, value: str) -> int:
            if int(value) > MAX_WAIT_SECONDS:
                raise serializers.ValidationError(f"An integer from 0 to {MAX_WAIT_SECONDS}.")
            return int(value)

    @extend_schema(
        operation_id="runs_retrieve",
        parameters=[QuerySerializer],
        responses={
            200: RunOutputSerializer,
            **_errors("validation_error: wait not an integer in 0..60", http=400),
            **_errors("not_found", http=404, also=(401,)),
        },
    )
    def get(self, request: Request, run_id: str) -> Response:
        run_check_visible(principal=request.user, run_id=run_id)
        query = self.QuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        if "wait" in request.query_params and "wait" not in query.validated_data:  # ?wait=
            raise serializers.ValidationError(
                {"wait": [f"An integer from 0 to {MAX_WAIT_SECONDS}."]}
            )
        run = Run.objects.filter(pk=run_id).first()
        if run is None:
            return error_response("not_found", f"No run {run_id}.", 404)
        return Response(run_json(run))


@extend_schema_serializer(component_name="RunLeaseOutput")
class RunLeaseOutputSerializer(serializers.Serializer):
    run = RunOutputSerializer()
    epoch = serializers.IntegerField()
    expires_at = serializers.DateTimeField()
    recovered = serializers.BooleanField()
    journal = StepOutputSerializer(many=True)


RunLeaseApi = hot_call_api(
    "lease",
    operation_id="runs_lease",
    responses={
        200: RunLeaseOutputSerializer,
        **_errors("lease_held | needs_review | run_finished | budget_exceeded", also=COMMON),
    },
)


@extend_schema_serializer(component_name="RunHeartbeatOutput")
class RunHeartbeatOutputSerializer(serializers.Serializer):
    expires_at = serializers.DateTimeField(allow_null=True)
    status = serializers.CharField()
    epoch = serializers.IntegerField()


RunHeartbeatApi = hot_call_api(
    "heartbeat",
    operation_id="runs_heartbeat",
    responses={200: RunHeartbeatOutputSerializer, **_errors("stale_epoch", also=COMMON)},
)

StepIntentApi = hot_call_api(
    "intent",
    operation_id="runs_steps_create",
    responses={
        **_made_or_found(StepOutputSerializer),
        202: OpenApiResponse(
            StepOutputSerializer,
            description="The step is journalled and awaiting_approval: an approval rule "
            "matched; it runs only after people approve it.",
        ),
        **_errors(
            "stale_epoch | out_of_order | nondeterministic | budget_exceeded | needs_review | "
            "run_finished | approval_denied | idempotency_in_progress (invoke)",
            also=COMMON,
        ),
    },
)


class StepDetailApi(APIView):
    @extend_schema(
        operation_id="runs_steps_retrieve",
        parameters=[
            OpenApiParameter(
                "wait",
                int,
                description="Seconds (0..60) to wait while the step is awaiting_approval: "
                "the answer comes as soon as it is decided, or at the timeout.",
            )
        ],
        responses={200: StepOutputSerializer, **_errors("not_found", http=404, also=(400, 401))},
    )
    def get(self, request: Request, run_id: str, index: int) -> Response:
        run_check_visible(principal=request.user, run_id=run_id)  # first: before wait's 400
        raw = request.query_params.get("wait", "0")
        if not raw.isdigit() or int(raw) > MAX_WAIT_SECONDS:
            return error_response(
                "validation_error",
                "wait is a whole number of seconds from 0 to 60.",
                400,
                {"wait": [f"0..{MAX_WAIT_SECONDS}"]},
            )
        step = step_wait_decided(run_id=run_id, index=index, wait_seconds=int(raw))
        return Response(step_json(step))


@extend_schema_serializer(component_name="StepOutcomeOutput")
class StepOutcomeOutputSerializer(serializers.Serializer):
    step = StepOutputSerializer()
    budget = BudgetSerializer()


StepOutcomeApi = hot_call_api(
    "outcome",
    operation_id="runs_steps_outcome",
    responses={
        200: StepOutcomeOutputSerializer,
        **_errors("stale_epoch | outcome_conflict | budget_exceeded", also=COMMON),
    },
)

# a worker's last call on a run: its epoch and one JSON field (runs.contract), answered with it
_FINISH_RESPONSES = {
    200: RunOutputSerializer,
    **_errors(
        "stale_epoch | needs_review (a write step still open went to review) | "
        "run_finished | budget_exceeded",
        also=COMMON,
    ),
}
RunCompleteApi = hot_call_api("complete", operation_id="runs_complete", responses=_FINISH_RESPONSES)
RunFailApi = hot_call_api("fail", operation_id="runs_fail", responses=_FINISH_RESPONSES)


class RunJournalApi(APIView):
    @extend_schema_serializer(component_name="RunJournalOutput")
    class OutputSerializer(serializers.Serializer):
        steps = StepOutputSerializer(many=True)
        events = EventOutputSerializer(many=True)

    @extend_schema(
        operation_id="runs_journal",
        responses={200: OutputSerializer, **_errors("not_found", http=404, also=(401,))},
    )
    def get(self, request: Request, run_id: str) -> Response:
        run_check_visible(principal=request.user, run_id=run_id)
        steps, events = selectors.run_journal(run_id=run_id)
        return Response(
            {"steps": [step_json(s) for s in steps], "events": [event_json(e) for e in events]}
        )


__all__ = [
    "RunCompleteApi",
    "RunCreateApi",
    "RunDetailApi",
    "RunFailApi",
    "RunHeartbeatApi",
    "RunJournalApi",
    "RunLeaseApi",
    "StepDetailApi",
    "StepIntentApi",
    "StepOutcomeApi",
]
