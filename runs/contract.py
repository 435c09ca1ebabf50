"""The request shapes of the lean worker calls, declared once.

Each field's type, limits and default are written here; runs.apis builds its DRF serializers
(and so the served OpenAPI schema) from them, and the lean path (runs.hotpath) validates from
them. The lean check accepts a subset of what the serializer accepts, with the same validated
values: JSON types only (no "5" for 5), no unknown keys, no padded text. Whatever it does not
take it declines, and the DRF view answers with its field errors, so a refusal keeps one text.
Cross-field rules are written once here (`Shape.rules`) and run by both.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from rest_framework import serializers

from runs.constants import AGENT_NAME_MAX, AGENT_NAME_REGEX, Effect, EnforcedBy, StepKind

MAX_EPOCH = 2**63 - 1  # the column is a bigint
MAX_STEP_INDEX = 100_000
MAX_TOKENS_PER_CALL = 10**12
MAX_TEXT = 200


class Decline(Exception):
    """Not for the lean path: the DRF view answers (with its exact validation errors)."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


@dataclass(frozen=True)
class Field:
    """One field. Absent, it takes `default` (called, if callable, as DRF calls it); with none
    it is required, unless `optional` (then it stays absent, as DRF's required=False without a
    default leaves it)."""

    default: Any = REQUIRED
    nullable: bool = False
    optional: bool = False  # absent is fine and stays absent (DRF required=False, no default)
    help_text: str | None = None

    def lean(self, value: Any) -> Any:
        raise NotImplementedError

    def drf(self) -> serializers.Field:
        raise NotImplementedError

    def _kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.optional:
            kwargs["required"] = False
        if self.default is not REQUIRED:
            kwargs["required"] = False
            kwargs["default"] = self.default
        if self.nullable:
            kwargs["allow_null"] = True
        if self.help_text:
            kwargs["help_text"] = self.help_text
        return kwargs

    def check(self, value: Any) -> Any:
        if value is None and self.nullable:
            return None
        return self.lean(value)


@dataclass(frozen=True)
class Int(Field):
    low: int = 0
    high: int = 0

    def lean(self, value: Any) -> Any:
        if type(value) is not int or not self.low <= value <= self.high:
            raise Decline
        return value

    def drf(self) -> serializers.Field:
        return serializers.IntegerField(min_value=self.low, max_value=self.high, **self._kwargs())


@dataclass(frozen=True)
class Text(Field):
    max_length: int = MAX_TEXT

    def lean(self, value: Any) -> Any:
        # DRF trims surrounding whitespace and refuses blank text: padded text is its to answer
        if type(value) is not str or not 0 < len(value) <= self.max_length:
            raise Decline
        if value != value.strip():
            raise Decline
        return value

    def drf(self) -> serializers.Field:
        return serializers.CharField(max_length=self.max_length, **self._kwargs())


@dataclass(frozen=True)
class Pattern(Text):
    """Text that `regex` finds (DRF's RegexField: searched, after trimming, as here)."""

    regex: str = ""

    def lean(self, value: Any) -> Any:
        value = super().lean(value)
        if re.search(self.regex, value) is None:
            raise Decline
        return value

    def drf(self) -> serializers.Field:
        return serializers.RegexField(self.regex, max_length=self.max_length, **self._kwargs())


@dataclass(frozen=True)
class Choice(Field):
    choices: tuple[tuple[str, str], ...] | tuple[str, ...] = ()

    @property
    def values(self) -> frozenset[str]:
        return frozenset(c[0] if isinstance(c, tuple) else c for c in self.choices)

    def lean(self, value: Any) -> Any:
        if type(value) is not str or value not in self.values:
            raise Decline
        return value

    def drf(self) -> serializers.Field:
        return serializers.ChoiceField(choices=list(self.choices), **self._kwargs())


@dataclass(frozen=True)
class Bool(Field):
    def lean(self, value: Any) -> Any:
        if type(value) is not bool:
            raise Decline
        return value

    def drf(self) -> serializers.Field:
        return serializers.BooleanField(**self._kwargs())


class JSONObjectField(serializers.JSONField):
    """A JSON object (not a list, string or number)."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError("Must be a JSON object.")
        return super().to_internal_value(data)


class AnyJSONField(serializers.JSONField):
    """Any JSON value, null included."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("allow_null", True)
        kwargs.setdefault("required", False)
        kwargs.setdefault("default", None)
        super().__init__(**kwargs)


@dataclass(frozen=True)
class JSONObject(Field):
    def lean(self, value: Any) -> Any:
        if type(value) is not dict:
            raise Decline
        return value

    def drf(self) -> serializers.Field:
        return JSONObjectField(**self._kwargs())


@dataclass(frozen=True)
class AnyJSON(Field):
    """Any JSON value; absent is `default` (null unless another is given)."""

    default: Any = None
    nullable: bool = True

    def lean(self, value: Any) -> Any:
        return value

    def drf(self) -> serializers.Field:
        return AnyJSONField(**self._kwargs())


@dataclass(frozen=True)
class Money(Field):
    """US dollars: a decimal string or a whole number, at most `whole` digits before the point
    and `places` after it, not negative (DRF's DecimalField(max_digits, decimal_places))."""

    whole: int = 6
    places: int = 6

    def lean(self, value: Any) -> Any:
        if type(value) not in (str, int):
            raise Decline
        if type(value) is str and (len(value) > 100 or value != value.strip()):
            raise Decline  # DRF caps the text's length; a short clean string is what workers send
        try:
            amount = Decimal(value)
        except InvalidOperation as exc:
            raise Decline from exc
        if not amount.is_finite() or amount < 0:
            raise Decline
        _, digits, exponent = amount.as_tuple()
        assert isinstance(exponent, int)
        # DRF's count: the digits written, an exponent's zeros included, at most `whole` of them
        # before the point and `places` after it
        places = max(0, -exponent)
        whole = max(0, len(digits) + exponent)
        if places > self.places or whole > self.whole:
            raise Decline
        return amount.quantize(Decimal(1).scaleb(-self.places))

    def drf(self) -> serializers.Field:
        return serializers.DecimalField(
            max_digits=self.whole + self.places,
            decimal_places=self.places,
            min_value=0,
            coerce_to_string=True,
            **self._kwargs(),
        )


@dataclass(frozen=True)
class Nested(Field):
    shape: "Shape | None" = None

    def lean(self, value: Any) -> Any:
        assert self.shape is not None
        return self.shape.lean(value)

    def drf(self) -> serializers.Field:
        assert self.shape is not None
        return self.shape.serializer()(**self._kwargs())


Rule = Callable[[dict[str, Any]], dict[str, list[str]] | None]


@dataclass(frozen=True)
class Shape:
    """A request body: its fields in order, and the rules between them (each answers the
    field errors it finds, or None). `name` is the serializer class, `component` its schema name."""

    name: str
    fields: dict[str, Field]
    rules: tuple[Rule, ...] = ()
    component: str | None = None
    _built: list[type[serializers.Serializer]] = field(default_factory=list, compare=False)

    def lean(self, data: Any) -> dict[str, Any]:
        """The validated payload, as the serializer's validated_data; Decline otherwise."""
        if type(data) is not dict or not data.keys() <= self.fields.keys():
            raise Decline
        valid: dict[str, Any] = {}
        for name, spec in self.fields.items():
            if name in data:
                valid[name] = spec.check(data[name])
            elif spec.default is not REQUIRED:
                valid[name] = spec.default() if callable(spec.default) else spec.default
            elif not spec.optional:
                raise Decline
        if any(rule(valid) for rule in self.rules):
            raise Decline
        return valid

    def validated(self, data: Any) -> dict[str, Any]:
        """The validated payload by the DRF serializer: a 400 with each field's error."""
        serializer = self.serializer()(data=data)
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def serializer(self) -> type[serializers.Serializer]:
        """The DRF serializer of this shape (one class per shape: one schema component)."""
        if not self._built:
            self._built.append(self._build())
        return self._built[0]

    def _build(self) -> type[serializers.Serializer]:
        rules = self.rules

        def validate(_: serializers.Serializer, attrs: dict[str, Any]) -> dict[str, Any]:
            for rule in rules:
                errors = rule(attrs)
                if errors:
                    raise serializers.ValidationError(errors)
            return attrs

        body: dict[str, Any] = {name: spec.drf() for name, spec in self.fields.items()}
        body["__module__"] = __name__
        if rules:
            body["validate"] = validate
        built = type(self.name, (serializers.Serializer,), body)
        if self.component:
            from drf_spectacular.utils import extend_schema_serializer

            built = extend_schema_serializer(component_name=self.component)(built)
        return built


def invoke_rule(attrs: dict[str, Any]) -> dict[str, list[str]] | None:
    """A gateway step (`invoke`) is a tool step and brings no outcome."""
    if attrs.get("invoke") and (
        attrs.get("outcome") is not None or attrs.get("kind") != StepKind.TOOL
    ):
        return {"invoke": ["A gateway step is a tool step and brings no outcome."]}
    if attrs.get("invoke") and attrs.get("previous_outcome") is not None:
        return {"previous_outcome": ["A gateway step takes no previous_outcome."]}
    # which effect may bring an outcome or name an enforcer: the kernel decides, for every caller
    return None


def previous_outcome_rule(attrs: dict[str, Any]) -> dict[str, list[str]] | None:
    """A carried outcome is the previous step's (which steps may carry one: the kernel says)."""
    previous = attrs.get("previous_outcome")
    if previous is not None and previous["index"] != attrs.get("index", 0) - 1:
        return {"previous_outcome": ["Must be the outcome of the step before (index - 1)."]}
    return None


EPOCH = Int(low=0, high=MAX_EPOCH)

USAGE = Shape(
    "UsageSerializer",
    {
        "input_tokens": Int(low=0, high=MAX_TOKENS_PER_CALL, default=0),
        "output_tokens": Int(low=0, high=MAX_TOKENS_PER_CALL, default=0),
        "cost_usd": Money(optional=True, nullable=True),
    },
)

_OUTCOME_FIELDS: dict[str, Field] = {
    "status": Choice(choices=("ok", "error"), default="ok"),
    "result": AnyJSON(),
    "usage": Nested(shape=USAGE, default=None, nullable=True),
}
OUTCOME_FIELDS = Shape("OutcomeFieldsSerializer", _OUTCOME_FIELDS)
PREVIOUS_OUTCOME = Shape(
    "PreviousOutcomeSerializer",
    {"index": Int(low=0, high=MAX_STEP_INDEX), **_OUTCOME_FIELDS},
)

HEARTBEAT = Shape("EpochSerializer", {"epoch": EPOCH})

LEASE = Shape(
    "InputSerializer",
    {"worker": Text(), "ttl_seconds": Int(low=5, high=600, default=30)},
    component="RunLeaseInput",
)

INTENT = Shape(
    "InputSerializer",
    {
        "epoch": EPOCH,
        "index": Int(low=0, high=MAX_STEP_INDEX),
        "kind": Choice(choices=tuple(StepKind.choices)),
        "name": Text(),
        "effect": Choice(choices=tuple(Effect.choices)),
        "enforced_by": Choice(choices=tuple(EnforcedBy.choices), default=None, nullable=True),
        "arguments": JSONObject(),
        "outcome": Nested(shape=OUTCOME_FIELDS, default=None, nullable=True),
        "invoke": Bool(
            default=False,
            help_text="Run the registered gateway tool `name` under the step's key and answer "
            "the step done or error, in this one call.",
        ),
        "previous_outcome": Nested(
            shape=PREVIOUS_OUTCOME,
            default=None,
            nullable=True,
            help_text="The outcome of the step before (index - 1), a write enforced_by tool, "
            "recorded first in the same transaction as this intent.",
        ),
    },
    rules=(invoke_rule, previous_outcome_rule),
    component="StepIntentInput",
)

OUTCOME = Shape(
    "InputSerializer", {"epoch": EPOCH, **_OUTCOME_FIELDS}, component="StepOutcomeInput"
)

CREATE = Shape(
    "InputSerializer",
    {
        "agent": Pattern(regex=AGENT_NAME_REGEX, max_length=AGENT_NAME_MAX),
        "input": AnyJSON(default=dict),
        "external_id": Text(max_length=200, default=None, nullable=True),
    },
    component="RunCreateInput",
)

# a worker's last call on a run: its epoch and one JSON field (runs.hotcalls.finish)
COMPLETE = Shape(
    "RunCompleteInputSerializer",
    {"epoch": EPOCH, "output": AnyJSON()},
    component="RunCompleteInput",
)
FAIL = Shape(
    "RunFailInputSerializer", {"epoch": EPOCH, "error": AnyJSON()}, component="RunFailInput"
)

__all__ = [
    "COMPLETE",
    "CREATE",
    "FAIL",
    "HEARTBEAT",
    "INTENT",
    "LEASE",
    "OUTCOME",
    "OUTCOME_FIELDS",
    "PREVIOUS_OUTCOME",
    "USAGE",
    "AnyJSONField",
    "Decline",
    "JSONObjectField",
    "Shape",
]
