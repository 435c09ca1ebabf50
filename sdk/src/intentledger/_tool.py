"""`@tool`: journal a plain function as a step of whatever run is active."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, overload

from intentledger._run import Effect, EnforcedBy, current_run


@overload
def tool[F: Callable[..., Any]](fn: F, /) -> F: ...


@overload
def tool(
    *, name: str | None = None, effect: Effect = "write", enforced_by: EnforcedBy | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    effect: Effect = "write",
    enforced_by: EnforcedBy | None = None,
) -> Any:
    """Make calls of `fn` inside `with ledger.run(...)` journalled steps (replayed after a crash).

    Arguments are bound to parameter names and journalled; a write function that accepts
    `idempotency_key` receives the step's key (and is `enforced_by="tool"` unless you say
    otherwise); one that does not is `enforced_by="nobody"`, so a crash inside it goes to review.
    """

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        step_name = name or f"{func.__module__}.{func.__qualname__}"
        signature = inspect.signature(func)

        @functools.wraps(func)
        def call(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind_partial(*args, **kwargs)
            bound.arguments.pop("idempotency_key", None)
            return current_run().tool(
                step_name, dict(bound.arguments), effect=effect, enforced_by=enforced_by, fn=func
            )

        call.step_name = step_name  # type: ignore[attr-defined]
        return call

    return decorate(fn) if fn is not None else decorate
