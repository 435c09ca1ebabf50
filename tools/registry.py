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
from rest_framework import serializers

from runs.api_errors import ApplicationError
from runs.constants import Effect
from tools.idempotency import Outcome, ToolError, current_reservation, idempotency_run


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
    *, name: str, arguments: Any, idempotency_key: str | None, actor: str = ""
) -> Outcome:
    """Validate, then run: read tools directly, write tools at most once per key."""
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
    return idempotency_run(
        key=idempotency_key,
        tool=name,
        arguments=arguments,
        execute=lambda reservation: found.fn(
            validated, ToolContext(tool=name, idempotency_key=reservation.key, actor=actor)
        ),
        actor=actor,
    )


def tools_load_extra(modules: Iterable[str] | None = None) -> None:
    """Import the modules named in settings.TOOLS_EXTRA_MODULES (they register more tools)."""
    for module in settings.TOOLS_EXTRA_MODULES if modules is None else modules:
        importlib.import_module(module)


__all__ = [
    "StrictArguments",
    "Tool",
    "ToolContext",
    "tool",
    "tool_get",
    "tool_invoke",
    "tool_register",
    "tool_unregister",
    "tools_list",
]
