"""The two doors to the lean calls answer alike: a differential test.

Request bodies for intent, outcome, heartbeat, lease, create, complete and fail are generated from
the served OpenAPI schema (schemathesis, valid and invalid), some steered at a real run's epoch
and steps (or, to create, at an agent with a policy, one without, and an external id that
attaches), sent with an unscoped token or one limited to an agent, some given one deliberately
bad or edge value of a field (the values DRF's fields treat specially).
Each body is sent, on the same database state (a savepoint rolled back after each), to the lean
path (runs.hotpath.answer, what HotPathWSGI and hot_view run) and to the DRF view alone. The lean
path may decline (the DRF view then answers in production), but it never accepts what the
serializer refuses, and when it answers, status and body are the DRF view's, times aside (and
the id of a run each door created anew).
"""

import json
import re
from collections import Counter
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.db import transaction
from rest_framework.test import APIClient, APIRequestFactory

from runs import apis
from runs.hotpath import Decline, answer
from runs.models import BudgetPolicy
from runs.tokens import worker_token_create
from tests.runs.journal_client import JournalClient

OPERATIONS = {
    "runs_steps_create": ("intent", apis.StepIntentApi),
    "runs_steps_outcome": ("outcome", apis.StepOutcomeApi),
    "runs_heartbeat": ("heartbeat", apis.RunHeartbeatApi),
    "runs_lease": ("lease", apis.RunLeaseApi),
    "runs_create": ("create", apis.RunCreateApi),
    "runs_complete": ("complete", apis.RunCompleteApi),
    "runs_fail": ("fail", apis.RunFailApi),
}
EXAMPLES = 40  # per operation and generation mode: a few seconds in all

_INT = [-1, 0, 4, 5, 600, 601, 100_000, 100_001, 10**12 + 1, 2**63, "1", 1.5, True, None]
_TEXT = ["", " x", "x ", "x" * 200, "x" * 201, "é", 7, None]
_CHOICE = ["", "TOOL", "tool", "model", "read", "write", "ledger", "nobody", "ok", "error", 1, None]
# DRF's DecimalField counts an exponent's zeros and caps the text at 1,000 characters
_JSON: list[Any] = [None, {}, [], "x", 1.5, 10**20, {"a": [1, None, "é"]}]
_MONEY = ["0E+7", "1E+5", "1E+6", "0" * 1001, "0" * 50, "1.0000000", "999999.999999", "1000000",
          "-1", "-0", "NaN", "Infinity", " 1", "1_0", "", 1, 10**6, 0.5, None]  # fmt: skip
MUTATIONS: dict[str, list[Any]] = {
    "epoch": _INT,
    "index": _INT,
    "ttl_seconds": _INT,
    "input_tokens": _INT,
    "output_tokens": _INT,
    "name": _TEXT,
    "worker": _TEXT,
    "kind": _CHOICE,
    "effect": _CHOICE,
    "enforced_by": _CHOICE,
    "status": _CHOICE,
    "cost_usd": _MONEY,
    "arguments": [[], "x", None, {}, {"a": [1, {"b": None}]}],
    "result": [None, [], {"r": 1}, "x"],
    "invoke": [True, False, "true", 1, None],
    "usage": [None, {}, [], "x", {"input_tokens": 60}],
    "outcome": [None, {}, [], {"status": "ok", "usage": {"input_tokens": 60}}],
    # DRF's RegexField trims before it searches the pattern (whose $ also matches before "\n")
    "agent": ["doors", "elsewhere", "a.b:c_d-e", "", " doors", "doors ", "doors\n", "a b",
              "x" * 100, "x" * 101, "é", 7, None],
    "external_id": [*_TEXT, "ext-1", "ext-new"],
    "input": _JSON,
    "output": _JSON,
    "error": _JSON,
}  # fmt: skip
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


def _times_aside(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _times_aside(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_times_aside(v) for v in value]
    if isinstance(value, str) and _TIME.match(value):
        return "<time>"
    return value


NESTED = {
    "outcome": {"status", "result", "usage"},
    "usage": {"input_tokens", "output_tokens", "cost_usd"},
}


def _cleaned(body: dict[str, Any], known: set[str]) -> dict[str, Any]:
    """`body` with only the keys its schema names, in nested objects too."""
    clean = {}
    for key, value in body.items():
        if key in known:
            clean[key] = (
                _cleaned(value, NESTED[key]) if key in NESTED and isinstance(value, dict) else value
            )
    return clean


def _mutate(body: Any, known: set[str], field: str, value: Any) -> Any:
    """`body` with `field` set to `value` where the schema has it (at the top or one object
    down); unchanged when it has no place for it."""
    if not isinstance(body, dict):
        return body
    body = json.loads(json.dumps(body))
    if field in known:
        body[field] = value
        return body
    for name, fields in NESTED.items():
        if field in fields and isinstance(body.get(name), dict):
            body[name][field] = value
            return body
        inner = body.get("outcome")
        if field in fields and isinstance(inner, dict) and isinstance(inner.get(name), dict):
            inner[name][field] = value
            return body
    return body


def _request_fields(schema: dict[str, Any], operation_id: str) -> set[str]:
    """The property names of an operation's JSON request body in the served schema."""
    for item in schema["paths"].values():
        for operation in item.values():
            if isinstance(operation, dict) and operation.get("operationId") == operation_id:
                body = operation["requestBody"]["content"]["application/json"]["schema"]
                name = body["$ref"].rsplit("/", 1)[-1]
                return set(schema["components"]["schemas"][name]["properties"])
    raise AssertionError(f"no operation {operation_id}")


def _on_this_state(call: Any) -> Any:
    """Call, then roll the database back: each door meets the same state."""
    with transaction.atomic():
        try:
            return call()
        finally:
            transaction.set_rollback(True)


def _new_run_id_aside(call: str, answered: tuple[int, Any]) -> tuple[int, Any]:
    """A run each door created anew has an id of its own."""
    status, body = answered
    if call == "create" and status == 201:
        body = {**body, "id": "<new run>"}
    return status, _times_aside(body)


def test_the_lean_path_never_accepts_what_the_serializer_refuses_and_answers_as_it_does(
    api: APIClient, worker_token: str, make_policy: Callable[..., BudgetPolicy]
) -> None:
    import schemathesis
    from hypothesis import HealthCheck, Phase, assume, given, settings
    from hypothesis import strategies as st
    from schemathesis import GenerationMode

    make_policy("doors", max_tokens=50)  # a step reporting 50 tokens stops the run
    journal = JournalClient(api)
    run_id = journal.create(agent="doors")["id"]
    epoch = journal.lease(run_id).json()["epoch"]
    journal.write_step(run_id, epoch, 0)  # step 0 done, step 1 an open intent, step 2 next
    assert journal.intent(run_id, epoch, 1).status_code == 201
    # a run with nothing open, to complete or fail; its external id attaches a create
    settled = journal.create(agent="doors", external_id="ext-1")["id"]
    assert journal.lease(settled).json()["epoch"] == epoch
    journal.write_step(settled, epoch, 0)
    _, scoped_token = worker_token_create(name="doors-only", agents=["doors"])

    served = APIClient().get("/api/v1/schema/?format=json")
    assert served.status_code == 200
    schema = schemathesis.openapi.from_dict(json.loads(served.content))
    factory = APIRequestFactory()
    known = {op: _request_fields(json.loads(served.content), op) for op in OPERATIONS}
    tokens = {False: f"Bearer {worker_token}", True: f"Bearer {scoped_token}"}
    seen: Counter[str] = Counter()

    def both_doors(
        call: str, view: Any, body: Any, target: str, index: int | None, scoped: bool = False
    ) -> None:
        raw = json.dumps(body).encode()
        authorization = tokens[scoped]
        path = "/api/v1/runs/" if call == "create" else f"/api/v1/runs/{target}/{call}"
        run = None if call == "create" else UUID(target)

        def lean() -> tuple[int, Any] | None:
            try:
                hot = answer(call, run_id=run, index=index, body=raw, authorization=authorization)
            except Decline:
                return None
            return hot.status, json.loads(hot.body)

        def drf() -> tuple[int, Any]:
            request = factory.post(
                path, raw, content_type="application/json", HTTP_AUTHORIZATION=authorization
            )
            kwargs: dict[str, Any] = {} if run is None else {"run_id": target}
            if index is not None:
                kwargs["index"] = index
            response = view.as_view()(request, **kwargs)
            response.render()
            return response.status_code, json.loads(response.content)

        by_lean = _on_this_state(lean)
        by_drf = _on_this_state(drf)
        if by_lean is None:
            seen["declined"] += 1
            return
        seen[f"lean {by_lean[0]}"] += 1
        seen[f"{call} lean {by_lean[0] // 100}xx"] += 1
        if by_lean[0] >= 400 and by_lean[1]["error"]["code"] == "budget_exceeded":
            seen["budget stop"] += 1
        where = f"{call} {body!r} (run {target}, index {index}, scoped token {scoped})"
        assert not (200 <= by_lean[0] < 300 and by_drf[0] >= 300), (
            f"the lean path accepted what the serializer refuses: {where}: {by_drf}"
        )
        assert _new_run_id_aside(call, by_lean) == _new_run_id_aside(call, by_drf), where

    fields = st.sampled_from(sorted(MUTATIONS)).flatmap(
        lambda f: st.tuples(st.just(f), st.sampled_from(MUTATIONS[f]))
    )

    def fuzz(operation_id: str, mode: Any) -> None:
        call, view = OPERATIONS[operation_id]
        operation = schema.find_operation_by_id(operation_id)

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(
            case=operation.as_strategy(generation_mode=mode),
            steer=st.booleans(),
            index=st.sampled_from([0, 1, 2, 2, 2]),
            mutation=st.none() | fields,
            unknown_run=st.integers(0, 9),
            other_run=st.uuids(),
            scoped=st.booleans(),
            agent=st.sampled_from(["doors", "doors", "elsewhere"]),
            external_id=st.sampled_from([None, "ext-1", "ext-new"]),
        )
        def check(
            case: Any,
            steer: bool,
            index: int,
            mutation: Any,
            unknown_run: int,
            other_run: Any,
            scoped: bool,
            agent: str,
            external_id: str | None,
        ) -> None:
            body = case.body
            assume(case.media_type == "application/json" and not isinstance(body, bytes))
            if steer and isinstance(body, dict):  # the real run's epoch and steps, a
                # JSON object for `arguments`, no keys the schema does not name
                body = _cleaned(body, known[operation_id])
                if call == "create":  # an agent with a policy or not; an id that attaches
                    body.update(agent=agent, external_id=external_id)
                else:
                    body["epoch"] = epoch
                if call == "intent":
                    body["index"] = index
                    body["invoke"] = False  # (mutations still try it; no tool is named)
                    if not isinstance(body.get("arguments"), dict):
                        body["arguments"] = {"q": body.get("arguments")}
            mutated = body if mutation is None else _mutate(body, known[operation_id], *mutation)
            # (paths route UUIDs only); complete and fail: a run with a write open, or none
            target = str(other_run) if unknown_run == 0 else run_id
            if call in ("complete", "fail") and unknown_run % 2:
                target = settled
            both_doors(call, view, mutated, target, index if call == "outcome" else None, scoped)

        check()

    for operation_id in OPERATIONS:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(operation_id, mode)

    # and every listed edge value, in turn, in an otherwise valid body that reaches the kernel
    usage = {"input_tokens": 1, "output_tokens": 1, "cost_usd": "0.5"}
    valid = {
        "intent": {"epoch": epoch, "index": 2, "kind": "model", "name": "m", "effect": "read",
                   "arguments": {"q": 1}, "outcome": {"status": "ok", "result": 1, "usage": usage}},
        "outcome": {"epoch": epoch, "status": "ok", "result": {"r": 1}, "usage": usage},
        "heartbeat": {"epoch": epoch},
        "lease": {"worker": "w-2", "ttl_seconds": 30},
        "create": {"agent": "doors", "input": {"q": 1}, "external_id": "ext-2"},
        "complete": {"epoch": epoch, "output": {"answer": 42}},
        "fail": {"epoch": epoch, "error": {"why": "gave up"}},
    }  # fmt: skip
    for operation_id, (call, view) in OPERATIONS.items():
        target = settled if call in ("complete", "fail") else run_id
        for field, values in MUTATIONS.items():
            for value in values:
                mutated = _mutate(valid[call], known[operation_id], field, value)
                if mutated != valid[call]:
                    for scoped in (False, True) if call == "create" else (False,):
                        index = 1 if call == "outcome" else None
                        both_doors(call, view, mutated, target, index, scoped)

    print(f"\ndoors: {dict(sorted(seen.items()))}")
    # the comparison was made where it matters: accepted calls, refusals and budget stops
    assert sum(n for k, n in seen.items() if k.startswith("lean 2")) >= 20, seen
    assert sum(n for k, n in seen.items() if k.startswith("lean 4")) >= 20, seen
    assert seen["budget stop"] > 0 and seen["declined"] > 0, seen
    for call in ("create", "complete", "fail"):  # each new lean call, accepted and refused
        assert seen[f"{call} lean 2xx"] >= 5 and seen[f"{call} lean 4xx"] >= 5, seen
