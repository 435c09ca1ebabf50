"""The tool registry: name, effect, a strict arguments schema, and the callable.

A write tool's callable is only reachable through `tool_invoke`, which routes it through the
idempotency services; the registry also wraps the callable itself so that calling it outside a
reservation raises. Registering a write tool without idempotency enforcement is not possible.
"""

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from rest_framework import serializers

from runs.access import run_check_visible
from runs.api_errors import ApplicationError
from runs.authentication import WorkerPrincipal
from runs.canonical import arguments_hash
from runs.constants import FINAL_STATUSES, Effect, StepState
from runs.kernel import BudgetStopped, StepAnswer
from runs.selectors import KeyStep, key_is_journal_shaped, step_for_key
from runs.services.steps import step_outcome_from_gateway
from tools.crash import crash_point
from tools.idempotency import (
    KeyCaller,
    Outcome,
    Reservation,
    ToolError,
    current_reservation,
    idempotency_key_validate,
    idempotency_run,
    key_not_found,
)
from tools.models import IdempotencyKey


class StrictArguments(serializers.Serializer):
    """An arguments schema: declared fields only (an unknown field is an error, not ignored)."""

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({key: ["Unknown field."] for key in unknown})
        return attrs


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows about the call: its key (write tools) and who asked."""

    tool: str
    idempotency_key: str | None
    actor: str


ToolFunction = Callable[[dict[str, Any], ToolContext], Any]


@dataclass(frozen=True)
class Tool:
    name: str
    effect: str
    arguments: type[StrictArguments]
    fn: ToolFunction
    description: str = ""

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Bad arguments → 400 validation_error with field details, before any key is touched."""
        if not isinstance(arguments, dict):
            raise ApplicationError(
                "validation_error",
                "The request is not valid.",
                status_code=400,
                details={"arguments": ["Must be a JSON object."]},
            )
        serializer = self.arguments(data=arguments)
        if not serializer.is_valid():
            raise ApplicationError(
                "validation_error",
                f"The arguments of {self.name} are not valid.",
                status_code=400,
                details={"arguments": serializer.errors},
            )
        return dict(serializer.validated_data)

    def describe(self) -> dict[str, Any]:
        """The tool as GET /api/v1/tools/ lists it, with a JSON-ish view of its arguments."""
        return {
            "name": self.name,
            "effect": self.effect,
            "description": self.description,
            "arguments": {name: _describe_field(f) for name, f in self.arguments().fields.items()},
        }


_FIELD_TYPES: list[tuple[type[serializers.Field], str]] = [
    (serializers.EmailField, "email"),
    (serializers.ChoiceField, "choice"),
    (serializers.CharField, "string"),
    (serializers.IntegerField, "integer"),
    (serializers.FloatField, "number"),
    (serializers.DecimalField, "decimal"),
    (serializers.BooleanField, "boolean"),
    (serializers.ListField, "list"),
    (serializers.DictField, "object"),
]


def _describe_field(f: serializers.Field) -> dict[str, Any]:
    kind = next((name for cls, name in _FIELD_TYPES if isinstance(f, cls)), "any")
    described: dict[str, Any] = {"type": kind, "required": bool(f.required)}
    if f.help_text:
        described["help"] = str(f.help_text)
    for attribute in ("max_length", "min_value", "max_value"):
        if getattr(f, attribute, None) is not None:
            described[attribute] = getattr(f, attribute)
    if isinstance(f, serializers.ChoiceField):
        described["choices"] = list(f.choices)
    if not f.required and f.default is not serializers.empty and not callable(f.default):
        described["default"] = f.default
    return described


_registry: dict[str, Tool] = {}


def _enforced(name: str, fn: ToolFunction) -> ToolFunction:
    """A write tool's callable refuses to run unless a reservation for its key is active."""

    def guarded(arguments: dict[str, Any], context: ToolContext) -> Any:
        reservation = current_reservation()
        if reservation is None or reservation.key != context.idempotency_key:
            raise RuntimeError(
                f"write tool {name} called outside idempotency enforcement; use tool_invoke"
            )
        return fn(arguments, context)

    return guarded


def tool_register(
    *,
    name: str,
    effect: str,
    arguments: type[StrictArguments],
    fn: ToolFunction,
    description: str = "",
    replace: bool = False,
) -> Tool:
    """Add a tool. Write tools are wrapped in the key services; names are unique."""
    if effect not in Effect.values:
        raise ValueError(f"effect must be one of {Effect.values}, not {effect!r}")
    if not issubclass(arguments, StrictArguments):
        raise TypeError("arguments must be a StrictArguments serializer (unknown fields refused)")
    if name in _registry and not replace:
        raise ValueError(f"tool {name} is already registered")
    callable_ = _enforced(name, fn) if effect == Effect.WRITE else fn
    tool = Tool(
        name=name, effect=effect, arguments=arguments, fn=callable_, description=description
    )
    _registry[name] = tool
    return tool


def tool(
    name: str, *, effect: str, arguments: type[StrictArguments], description: str = ""
) -> Callable[[ToolFunction], ToolFunction]:
    """Decorator form of `tool_register`; returns the plain function (for direct calls in bench)."""

    def decorate(fn: ToolFunction) -> ToolFunction:
        tool_register(
            name=name,
            effect=effect,
            arguments=arguments,
            fn=fn,
            description=description or (fn.__doc__ or "").strip().splitlines()[0],
        )
        return fn

    return decorate


def tool_unregister(*, name: str) -> None:
    """Test hook: remove a tool registered by a test."""
    _registry.pop(name, None)


def tool_get(*, name: str) -> Tool:
    found = _registry.get(name)
    if found is None:
        raise ApplicationError(
            "tool_not_found", f"No tool named {name!r}.", status_code=404, details={"name": name}
        )
    return found


def tools_list() -> list[Tool]:
    return [_registry[name] for name in sorted(_registry)]


def tool_invoke(
    *,
    name: str,
    arguments: Any,
    idempotency_key: str | None,
    actor: str = "",
    principal: Any = None,
    ledger_epoch: int | None = None,
) -> Outcome:
    """Validate, then run: read tools directly, write tools at most once per key.

    A write's key must name a journalled intent (`_journal_step`) unless the token has the
    `tools:direct` scope and the key names no step; completing a step's key records the step's
    outcome in the same transaction. `principal` None: an in-process caller (tests, bench),
    treated as `tools:direct`.
    """
    found = tool_get(name=name)
    if found.effect == Effect.WRITE and not idempotency_key:
        raise ApplicationError(
            "idempotency_key_required",
            f"{name} has an effect: send an Idempotency-Key header (the step's idempotency_key).",
            status_code=400,
            details={"Idempotency-Key": ["Required for write tools."]},
        )
    validated = found.validate(arguments)
    if found.effect == Effect.READ:
        context = ToolContext(tool=name, idempotency_key=None, actor=actor)
        try:
            result = found.fn(validated, context)
        except ToolError as exc:
            return Outcome(status_code=exc.status_code, body=exc.body(), replayed=False)
        return Outcome(status_code=200, body={"result": result}, replayed=False)
    key = idempotency_key_validate(key=idempotency_key)
    step = _journal_step(
        key=key, tool=name, arguments=arguments, principal=principal, ledger_epoch=ledger_epoch
    )
    return write_invoke(
        found,
        validated=validated,
        arguments=arguments,
        key=key,
        step=step,
        actor=actor,
        epoch=ledger_epoch,
        caller=_key_caller(principal) if step is None else None,
    )


def _key_caller(principal: Any) -> KeyCaller | None:
    """The token a free-form key belongs to (None: an in-process caller, who may use any)."""
    if not isinstance(principal, WorkerPrincipal):
        return None
    return KeyCaller(token_id=principal.token_id, agents=principal.agents)


def write_invoke(
    found: Tool,
    *,
    validated: dict[str, Any],
    arguments: Any,
    key: str,
    step: KeyStep | None,
    actor: str,
    epoch: int | None,
    recorded: Callable[[StepAnswer | BudgetStopped | None], None] | None = None,
    caller: KeyCaller | None = None,
) -> Outcome:
    """Run a write tool under a checked key; a step's outcome is recorded with the key's end.

    `recorded` hears what the journal answered for the step's outcome (None: not recorded;
    a BudgetStopped: recorded, and the run stopped).
    """
    if step is not None and step.state != StepState.INTENT and not _key_recorded(key):
        if step.state == StepState.DONE:
            # the key was pruned after its retention: the journal still knows what the step did
            return Outcome(status_code=200, body={"result": step.result}, replayed=True)
        raise ApplicationError(
            "intent_not_journalled",
            f"The key names step {step.index}, which is {step.state}; its key record is pruned.",
            details={"key": key, "found": step.found()},
        )
    on_finish = None
    if step is not None:
        on_finish = _outcome_recorder(step, epoch=epoch, actor=actor, recorded=recorded)

    def execute(reservation: Reservation) -> Any:
        crash_point("inside_tool")
        result = found.fn(
            validated, ToolContext(tool=found.name, idempotency_key=reservation.key, actor=actor)
        )
        crash_point("before_outcome_commit")
        return result

    outcome = idempotency_run(
        key=key,
        tool=found.name,
        arguments=arguments,
        execute=execute,
        actor=actor,
        on_finish=on_finish,
        caller=caller,
    )
    if outcome.replayed and on_finish is not None and step and step.state == StepState.INTENT:
        # executed under an earlier intent of this step, whose outcome was not recorded then
        with transaction.atomic():
            on_finish(outcome)
    return outcome


def key_check_visible(*, principal: Any, key: str) -> None:
    """A token limited to agents reads only keys of its runs' steps, or free-form keys of tokens
    whose agents it may all see (its own included); 404 otherwise, the same as for a key nobody
    made. An unscoped token reads any key."""
    caller = _key_caller(principal)
    if caller is None or caller.agents is None:
        return
    step = step_for_key(key=key)
    if step is not None and principal.may_use(step.agent):
        return
    if step is None:
        row = IdempotencyKey.objects.filter(key=key).first()
        if row is not None and caller.may_see(row):
            return
    raise key_not_found(key)


def _key_recorded(key: str) -> bool:
    return IdempotencyKey.objects.filter(key=key).exists()


def _outcome_recorder(
    step: KeyStep,
    *,
    epoch: int | None,
    actor: str,
    recorded: Callable[[StepAnswer | BudgetStopped | None], None] | None,
) -> Callable[[Outcome], None]:
    def record(outcome: Outcome) -> None:
        answer = step_outcome_from_gateway(
            run_id=step.run_id,
            index=step.index,
            epoch=step.epoch if epoch is None else epoch,
            ok=outcome.ok,
            result=outcome.body.get("result") if outcome.ok else outcome.body,
            actor=actor,
        )
        if recorded is not None:
            recorded(answer)

    return record


def _journal_step(
    *, key: str, tool: str, arguments: Any, principal: Any, ledger_epoch: int | None
) -> KeyStep | None:
    """The step a write's key names, checked; None for a free-form key a direct caller may use.

    Refusals (nothing is written by any): 404 when the key's run is not the token's,
    409 `stale_epoch` for a `Ledger-Epoch` that is not the run's, 409 `intent_not_journalled`
    when the key names no step (and the token is not `tools:direct`) or a step with another
    tool, other arguments, or in a state that is neither an open intent nor done.
    """
    step = step_for_key(key=key)
    direct = principal is None or (
        isinstance(principal, WorkerPrincipal) and principal.tools_direct
    )
    if step is None:
        # a token's free-form key may not take a journal step's form: planted before the step
        # is journalled, it would answer that step's gateway call with its stored response
        if direct and (principal is None or not key_is_journal_shaped(key)):
            return None
        raise ApplicationError(
            "intent_not_journalled",
            "This Idempotency-Key names no journalled step: journal the step's intent first "
            "(POST /api/v1/runs/{id}/steps/) and send its idempotency_key.",
            details={"key": key, "found": None},
        )
    try:
        run_check_visible(principal=principal, run_id=step.run_id)
    except ApplicationError:
        raise ApplicationError(
            "not_found", "No journalled step has this key.", status_code=404, details={"key": key}
        ) from None
    if step.run_status in FINAL_STATUSES and step.state == StepState.INTENT:
        # an open intent of a finished run never runs (cancel moved the epoch, but a caller
        # without Ledger-Epoch would not notice); a done or error step still replays
        raise ApplicationError(
            "run_finished",
            f"The run is {step.run_status}; the key of its step {step.index} does not execute.",
            details={"key": key, "status": step.run_status},
        )
    if ledger_epoch is not None and ledger_epoch != step.run_epoch:
        raise ApplicationError(
            "stale_epoch",
            "Another worker holds the run now; stop and write nothing more.",
            details={"epoch": ledger_epoch, "current_epoch": step.run_epoch},
        )
    given = {"name": tool, "arguments_hash": arguments_hash(arguments)}
    if (step.name, step.arguments_hash) != (given["name"], given["arguments_hash"]) or (
        step.state not in (StepState.INTENT, StepState.DONE, StepState.ERROR)
    ):
        raise ApplicationError(
            "intent_not_journalled",
            f"The key names step {step.index}, journalled as {step.name} ({step.state}) with "
            "other arguments or in a state that cannot run: the key was not used."
            if step.state in (StepState.INTENT, StepState.DONE, StepState.ERROR)
            else f"The key names step {step.index}, which is {step.state}, not an open intent.",
            details={"key": key, "found": step.found(), "given": given},
        )
    return step


def tools_load_extra(modules: Iterable[str] | None = None) -> None:
    """Import the modules named in settings.TOOLS_EXTRA_MODULES (they register more tools)."""
    for module in settings.TOOLS_EXTRA_MODULES if modules is None else modules:
        importlib.import_module(module)


__all__ = [
    "StrictArguments",
    "Tool",
    "ToolContext",
    "key_check_visible",
    "tool",
    "tool_get",
    "tool_invoke",
    "tool_register",
    "tool_unregister",
    "tools_list",
    "write_invoke",
]
